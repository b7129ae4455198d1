"""``veracity fewl``: score, validate, rank and select answers with FEWL."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import click

from veracity.cli.lifecycle import CommandRun, command_run, write_report
from veracity.cli.options import (
    SEED,
    CommonOptions,
    Finite,
    common_options,
    handles_errors,
    options_as,
    pick,
    record_selection,
    sample_options,
    selection_of,
    unique_out,
)
from veracity.cli.output import echo
from veracity.data.labelled import load_labelled, load_questions
from veracity.data.stored import selected_items
from veracity.errors import ConfigError
from veracity.methods.fewl.core import DIVERGENCES, EXPERTISE_FORMS, Divergence, ExpertiseForm
from veracity.methods.fewl.modes import run_fewl, run_fewl_select, run_fewl_validate
from veracity.methods.fewl.neighbours.core import INDEXES
from veracity.methods.fewl.pairs import PairPrompt, PairSettings
from veracity.methods.fewl.records import (
    AccuracyCell,
    FewlRecord,
    FewlResults,
    FewlValidation,
    SampleLevel,
)
from veracity.methods.fewl.reference_list import REFERENCE_MODES
from veracity.methods.fewl.run import ANSWER_TEMPLATE, NEIGHBOUR_MODES, FewlSettings, answer_source
from veracity.methods.fewl.similarity import MAPPINGS
from veracity.methods.fewl.similarity import Mapping as SimilarityMapping
from veracity.methods.fewl.validation.core import TABLE_ROWS
from veracity.runs.result import RunResult
from veracity.text import slug

F = TypeVar("F", bound=Callable[..., Any])

questions_dataset = click.option(
    "--dataset", required=True,
    help="chale:PATH, truthfulqa:PATH, halueval:PATH, haltt4llm:PATH, builtin, "
         "webquestions:PATH, jsonl:PATH, csv:PATH.")
labelled_dataset = click.option(
    "--dataset", required=True,
    help="Labelled answers: chale:PATH, truthfulqa:PATH or halueval:PATH.")


def fewl_options(func: F) -> F:
    """Dataset, references, pairs, similarity and the [reconstructed] FEWL parameters."""
    decorators = [
        click.option("--limit", type=click.IntRange(min=1), help="Only the first N questions."),
        sample_options,
        click.option("--reference", multiple=True,
                     help="Reference model spec (repeat for several models)."),
        click.option("--reference-samples", type=click.IntRange(1, 100), default=1,
                     show_default=True, help="J answers per reference model (sampled when > 1)."),
        click.option("--reference-temperature", type=Finite(0.0, 10.0), default=0.7, show_default=True),
        click.option("--reference-mode", type=click.Choice(REFERENCE_MODES), default="samples",
                     show_default=True,
                     help="samples: J independent answers per reference; one-call: one request "
                          "asking each reference for J diversified answers (the paper's §4.1)."),
        click.option("--references-file", type=click.Path(path_type=Path),
                     help="JSONL with id + references (e.g. a run's references.jsonl)."),
        click.option("--pairs", type=click.IntRange(1, 200), default=25, show_default=True,
                     help="R wrong / corrected pairs asked per question."),
        click.option("--pairs-model", help="Model writing the pairs (default: first reference)."),
        click.option("--pairs-file", type=click.Path(path_type=Path),
                     help="JSONL with id + pairs [{wrong, corrected}] (e.g. a run's pairs.jsonl)."),
        click.option("--pairs-temperature", type=Finite(0.0, 10.0), default=0.7, show_default=True),
        click.option("--pair-retries", type=click.IntRange(0, 10), default=2, show_default=True),
        click.option("--min-pairs", type=click.IntRange(1, 200), default=1, show_default=True,
                     help="Questions with fewer parsed pairs are reported, not scored."),
        click.option("--pairs-max-tokens", type=click.IntRange(16, 100_000),
                     help="Token budget of a pair call (default 48 per pair + 64)."),
        click.option("--pair-prompt", type=click.Path(path_type=Path, dir_okay=False),
                     help="File with the pair prompt to use instead of the built-in one "
                          "({question} and {r} are filled in; e.g. the paper's C.1 prompt)."),
        click.option("--similarity", default="st/default", show_default=True,
                     help="Embedder spec (cosine) or cross-encoder/PATH (local NLI / STS model)."),
        click.option("--similarity-label",
                     help="Output of a multi-label cross-encoder to read (default: entailment)."),
        click.option("--mapping", type=click.Choice(MAPPINGS), default="affine", show_default=True,
                     help="[reconstructed] cosine -> [0,1]: (1+cos)/2 or max(cos,0)."),
        click.option("--question-embedder", help="Embedder for the neighbour search."),
        click.option("--neighbours", type=click.IntRange(0, 10_000), default=25, show_default=True,
                     help="[reconstructed] K questions of the laziness penalty."),
        click.option("--near-duplicate", type=Finite(-1.0, 1.0), default=0.8, show_default=True,
                     help="[reconstructed] neighbours with question cosine above this excluded."),
        click.option("--neighbours-mode", type=click.Choice(NEIGHBOUR_MODES), default="nearest",
                     show_default=True, help="The penalty's questions: the K nearest, or K "
                     "random ones with cosine <= --near-duplicate (Table 8), seeded."),
        click.option("--neighbours-index", type=click.Choice(INDEXES), default="auto",
                     show_default=True, help="Nearest-neighbour search (faiss): exact, or an "
                     "approximate hnsw / ivf index whose recall@K against exact search is "
                     "measured on a sample and recorded; auto: exact below 100,000 questions."),
        click.option("--tau", type=Finite(0.0, min_open=True), default=1.0, show_default=True,
                     help="[reconstructed] softmax temperature of the expertise weights."),
        click.option("--expertise", type=click.Choice(EXPERTISE_FORMS), default="gap",
                     show_default=True, help="[reconstructed] expertise s_j: mean SIM(h_j, CO) - "
                     "SIM(h_j, IW) (gap), -SIM(h_j, IW) (wrong) or SIM(h_j, CO) (corrected)."),
        click.option("--divergence", type=click.Choice(DIVERGENCES), default="tv",
                     show_default=True, help="f-divergence of g / f* (tv is the paper's)."),
        click.option("--max-tokens", type=click.IntRange(1, 100_000), default=96, show_default=True,
                     help="Token budget of each answer (references and answers)."),
        click.option("--answer-template", default=ANSWER_TEMPLATE,
                     help="Prompt for answers; must contain {question}."),
        click.option("--seed", type=SEED, default=0, show_default=True),
        click.option("--out", type=click.Path(path_type=Path), help="Run directory to write."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


@dataclass(frozen=True, kw_only=True)
class FewlParameters:
    """The options that make FewlSettings: references, pairs, similarity and FEWL's own."""

    reference: tuple[str, ...]
    reference_samples: int
    reference_temperature: float
    reference_mode: str
    references_file: Path | None
    pairs: int
    pairs_model: str | None
    pairs_file: Path | None
    pairs_temperature: float
    pair_retries: int
    min_pairs: int
    pairs_max_tokens: int | None
    pair_prompt: Path | None
    similarity: str
    similarity_label: str | None
    mapping: SimilarityMapping
    question_embedder: str | None
    neighbours: int
    near_duplicate: float
    neighbours_mode: str
    neighbours_index: str
    tau: float
    expertise: ExpertiseForm
    divergence: Divergence
    max_tokens: int
    answer_template: str
    seed: int

    def settings(self) -> FewlSettings:
        return FewlSettings(
            references=tuple(self.reference), reference_samples=self.reference_samples,
            reference_temperature=self.reference_temperature,
            reference_mode=self.reference_mode, references_file=self.references_file,
            pairs=PairSettings(r=self.pairs, temperature=self.pairs_temperature,
                               max_tokens=self.pairs_max_tokens, retries=self.pair_retries,
                               min_pairs=self.min_pairs, seed=self.seed),
            pairs_model=self.pairs_model, pairs_file=self.pairs_file,
            similarity=self.similarity, similarity_label=self.similarity_label,
            mapping=self.mapping, question_embedder=self.question_embedder,
            neighbours=self.neighbours, near_duplicate=self.near_duplicate, tau=self.tau,
            expertise=self.expertise, divergence=self.divergence,
            neighbours_mode=self.neighbours_mode, neighbours_index=self.neighbours_index,
            pair_prompt=PairPrompt.from_file(self.pair_prompt) if self.pair_prompt
            else PairPrompt(),
            max_tokens=self.max_tokens, answer_template=self.answer_template, seed=self.seed,
        )


@dataclass(frozen=True, kw_only=True)
class FewlOptions(FewlParameters):
    """What every FEWL mode's command takes (:func:`fewl_options` and the common options)."""

    dataset: str
    limit: int | None
    sample: int | None
    sample_seed: int
    out: Path | None
    common: CommonOptions = CommonOptions()

    def selected(self, labelled: bool = False) -> tuple[list[Any], dict[str, Any]]:
        """The --dataset's questions left by --limit and --sample, and the record of that
        choice."""
        items: list[Any] = (load_labelled(self.dataset) if labelled
                            else load_questions(self.dataset))
        return pick(items, selection_of(self.sample, self.sample_seed, self.limit),
                    lambda item: str(item.id))

    def held(self) -> Any:
        """The selected questions kept on disk (large files), as ``(items, chosen)``."""
        return selected_items(self.dataset, selection_of(self.sample, self.sample_seed,
                                                         self.limit),
                              load=lambda: load_questions(self.dataset))


@dataclass(frozen=True, kw_only=True)
class ScoreOptions(FewlOptions):
    """``veracity fewl run`` / ``rank``'s options."""

    answers: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class ValidateOptions(FewlOptions):
    """``veracity fewl validate``'s options."""

    repeats: int
    judge: str | None
    preset: str | None = None


@dataclass(frozen=True, kw_only=True)
class SelectOptions(FewlOptions):
    """``veracity fewl select``'s options."""

    candidates: str
    samples: int
    temperature: float
    icl_examples: int
    min_fewl: float | None


PAPER_PRESET: dict[str, Any] = {"reference_samples": 5, "reference_mode": "one-call", "pairs": 25}
"""``fewl validate --preset paper``: five answers from one reference in one call (§4.1: "multi"
generates five answers; C.6: two calls per question), 25 pairs (C.1's prompt asks for 25). The
similarity is Vectara's HHEM in C.3, a model directory veracity cannot name for you: the preset
keeps ``--similarity`` as given and says so."""
PAPER_SIMILARITY = "Vectara's HHEM cross-encoder (C.3)"


def apply_paper_preset(o: ValidateOptions) -> tuple[ValidateOptions, dict[str, Any] | None]:
    """The options with the paper's settings where none was given on the command line; what
    was applied and what was kept is printed and returned for run.json."""
    if o.preset is None:
        return o, None
    if len(o.reference) != 1 or o.references_file is not None:
        raise ConfigError("--preset paper asks one reference model for its answers: give exactly "
                          "one --reference (and no --references-file)")
    context = click.get_current_context()
    applied: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for key, value in PAPER_PRESET.items():
        if context.get_parameter_source(key) == click.core.ParameterSource.COMMANDLINE:
            kept[key] = getattr(o, key)
        else:
            applied[key] = value
    shown = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in applied.items())
    echo(f"preset paper: {shown}" + (
        f" (given explicitly: {', '.join(f'{k}={v}' for k, v in kept.items())})" if kept else "")
        + f"; similarity {o.similarity} (the paper's is {PAPER_SIMILARITY}: "
          "--similarity cross-encoder/DIR, see the FEWL docs)", err=True)
    return replace(o, **applied), {"name": "paper", "applied": applied, "overridden": kept,
                                   "similarity": {"used": o.similarity,
                                                  "paper": PAPER_SIMILARITY}}


def warn_single_reference(settings: FewlSettings) -> None:
    """One reference answer per question makes every multi row a copy of the single row."""
    if settings.references_file is None and len(settings.references) == 1 and (
            settings.reference_samples == 1):
        echo("note: one reference answer per question, so the multi rows repeat the single "
             "ones; the paper asks its reference for 5 (--reference-samples 5 --reference-mode "
             "one-call, or --preset paper)", err=True)


def default_out(mode: str, dataset: str) -> Path:
    stem = Path(dataset.split(":", 1)[-1]).stem or dataset
    return unique_out(slug(f"fewl-{mode}-{stem}"))


def _f(value: Any, digits: int = 4) -> str:
    return "—" if value is None or value != value else f"{value:.{digits}f}"


def _models_table(results: FewlResults) -> None:
    ranking = results.ranking
    labels = ranking.labels if ranking is not None else None
    errors = labels.error_rate if labels is not None else {}
    echo(f"\n{'answers':<36} {'n':>5} {'mean FEWL':>10} {'± s.e.':>8} {'mean T':>8} "
               f"{'mean L':>8}" + (f" {'error rate':>10}" if errors else ""))
    for name, m in results.models.items():
        line = (f"{name[:36]:<36} {m.n:>5} {_f(m.mean):>10} {_f(m.stderr):>8} "
                f"{_f(m.mean_truthfulness):>8} {_f(m.mean_penalty):>8}")
        echo(line + (f" {_f(errors.get(name)):>10}" if errors else ""))
    if ranking is not None and ranking.sample_level is not None:
        _sample_level(ranking.sample_level)
    if labels is not None:
        echo(f"Spearman(mean FEWL, accuracy) over {len(labels.spearman_models)} models: "
                   f"{_f(labels.spearman, 3)} (p {_f(labels.spearman_p, 3)}; "
                   f"{labels.n_labelled} labelled questions)")


def _cell(cell: AccuracyCell | None) -> str:
    """A table cell as the paper prints it: accuracy in % with ± std over repeats."""
    if cell is None or cell.accuracy != cell.accuracy:
        return "—"
    text = f"{100 * cell.accuracy:.1f}"
    return text + (f" ± {100 * cell.std:.1f}" if cell.std is not None else "")


def _validation_table(results: FewlResults, validation: FewlValidation) -> None:
    """Table 1's layout: one row per variant, one column per comparison, for the run's
    divergence; then FEWL under every divergence."""
    table = validation.comparisons
    div = results.divergence
    repeats = validation.repeats
    echo(f"\nmeasurement accuracy (%), {div}, mean ± std over {repeats} repeat(s)"
         if repeats > 1 else f"\nmeasurement accuracy (%), {div}")
    names = list(table)
    width = max(16, *(len(n) + 2 for n in names))
    echo(f"{'':<40}" + "".join(f"{n:>{width}}" for n in names))
    for variant, label in TABLE_ROWS:
        cells = [table[n].cells[div].get(variant) for n in names]
        if all(c is None for c in cells):
            continue
        echo(f"{label:<40}" + "".join(f"{_cell(c):>{width}}" for c in cells))
    counts = ", ".join(f"{n}: n = {table[n].cells[div]['fewl'].n}, "
                       f"{table[n].identical_skipped} identical skipped" for n in names)
    echo(counts)
    others = [d for d in DIVERGENCES if d != div and d in table[names[0]].cells]
    for other in others:
        echo(f"{'FEWL, ' + other:<40}" + "".join(
            f"{_cell(table[n].cells[other].get('fewl')):>{width}}" for n in names))
    figures = validation.figures
    if figures:
        two = figures.figure2
        echo(f"\nFigure 2 ({two.judge}): questions by how many of their {two.k} nearest "
             f"neighbours' gold answers were judged correct: "
             + ", ".join(f"{k}: {n}" for k, n in enumerate(two.histogram) if n)
             + f" (mean {_f(two.mean_correct, 2)}, {two.unjudged} not judged)")
        echo("Figure 3: reference answers rated 0 / 1 / 2:")
        for name, entry in figures.figure3.references.items():
            zero, one, two_ = entry.counts
            echo(f"  {name}: {zero} / {one} / {two_} (mean {_f(entry.mean, 2)}, "
                 f"{entry.unrated} unrated)")


def _sample_level(level: SampleLevel) -> None:
    echo(f"\nsample-level ranking (Table 5) over {level.n_questions} questions with "
         "TruthfulQA labels: the answer the TQA metric prefers scores higher")
    for pair in level.pairs:
        w, wo = pair.with_penalty, pair.without_penalty
        echo(f"  {pair.a} vs {pair.b}: with penalty {w.agree}/{w.n}, "
             f"without {wo.agree}/{wo.n}")


def _finish(outcome: RunResult[FewlRecord, FewlResults], cmd: CommandRun,
            chosen: dict[str, Any]) -> None:
    record_selection(outcome.run, chosen)
    results = outcome.summary
    if results.validation is not None and results.validation.comparisons:
        _validation_table(results, results.validation)
    else:
        _models_table(results)
    sel = results.selection
    if sel is not None:
        echo(f"selected answers: mean FEWL {_f(sel.mean)} over {sel.n} questions"
                   + (f"; accuracy first candidate {_f(sel.accuracy_first_candidate, 3)}, "
                      f"selected {_f(sel.accuracy_selected, 3)}" if sel.n_labelled
                      else ""))
    failed = results.pairs_failed
    if failed:
        shown = ", ".join(failed[:10]) + (" ..." if len(failed) > 10 else "")
        echo(f"pair generation failed for {len(failed)} question(s), not scored: {shown}")
    echo(cmd.calls_line())
    write_report(outcome.run, f"veracity FEWL {results.mode}: {results.dataset}")


@click.group()
def fewl() -> None:
    """FEWL: truthfulness of answers against expertise-weighted reference models (no gold)."""


@fewl.command("run")
@click.option("--answers", "answers", multiple=True, required=True,
              help="Model spec or JSONL file (id + answer) of the answers to score; repeatable.")
@questions_dataset
@fewl_options
@common_options
@handles_errors
@options_as(ScoreOptions)
def run_cmd(o: ScoreOptions) -> None:
    """Score answers: FEWL per question and the mean per answer source."""
    _scored("run", o)


@fewl.command("rank")
@click.option("--answers", "answers", multiple=True, required=True,
              help="Model spec or JSONL file per model to rank; repeat for each model.")
@questions_dataset
@fewl_options
@common_options
@handles_errors
@options_as(ScoreOptions)
def rank_cmd(o: ScoreOptions) -> None:
    """Rank models by mean FEWL; with multiple-choice labels (haltt4llm), also by true error
    rate (an answer is correct when it starts with the correct letter or, failing that, is
    most similar to the correct option among A-E), and their Spearman correlation."""
    _scored("rank", o)


def _scored(mode: str, o: ScoreOptions) -> None:
    settings = o.settings()
    sources = [answer_source(a) for a in o.answers]
    with o.held() as (items, chosen), command_run(o.common) as cmd:  # large files: on disk
        outcome = run_fewl(items, sources, settings, cmd.ctx, o.out or default_out(mode,
                           o.dataset), o.dataset, mode)
    _finish(outcome, cmd, chosen)


@fewl.command("validate")
@labelled_dataset
@click.option("--repeats", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Run R times, seed + r for the stochastic parts (sampled references, pairs, "
                   "random neighbours); the table shows mean ± std.")
@click.option("--judge", help="Judge model spec for Figures 2 and 3: neighbours' gold answers "
                              "judged for each question, and each reference answer rated 0/1/2.")
@click.option("--preset", type=click.Choice(["paper"]),
              help="The paper's validation setting (§4.1, C.1, C.3, C.6): one reference asked "
                   "for 5 diversified answers in one call, 25 pairs; options given explicitly "
                   "still win. Recorded in run.json.")
@fewl_options
@common_options
@handles_errors
@options_as(ValidateOptions)
def validate_cmd(o: ValidateOptions) -> None:
    """Measurement accuracy on labelled answers (chale, truthfulqa, halueval): the share of
    questions where the better answer scores higher, for FEWL and its ablations x tv/js/kl,
    printed in the layout of the paper's Table 1."""
    o, preset = apply_paper_preset(o)
    settings = o.settings()
    warn_single_reference(settings)
    items, chosen = o.selected(labelled=True)
    with command_run(o.common) as cmd:
        outcome = run_fewl_validate(items, settings, cmd.ctx, o.out or default_out(
            "validate", o.dataset), o.dataset, o.repeats, o.judge)
    if outcome.run is not None and preset is not None:
        outcome.run.update_config({"preset": preset})
    _finish(outcome, cmd, chosen)


@fewl.command("select")
@click.option("--candidates", required=True,
              help="Model spec (sampled --samples times) or JSONL (id + answers list).")
@click.option("--samples", type=click.IntRange(1, 100), default=4, show_default=True)
@click.option("--temperature", type=Finite(0.0, 10.0), default=0.7, show_default=True,
              help="Sampling temperature of the candidates.")
@click.option("--icl-examples", type=click.IntRange(0, 100), default=3, show_default=True,
              help="Neighbour questions used as examples in each ICL prompt.")
@click.option("--min-fewl", type=Finite(), help="Only export answers scoring at least this.")
@questions_dataset
@fewl_options
@common_options
@handles_errors
@options_as(SelectOptions)
def select_cmd(o: SelectOptions) -> None:
    """Pick the best candidate per question by FEWL; write icl_prompts.jsonl and a chat-format
    finetune.jsonl into the run directory."""
    settings = o.settings()
    source = answer_source(o.candidates)
    if source.model is None and o.samples != 4:
        raise ConfigError("--samples applies to a candidate model, not a file")
    with o.held() as (items, chosen), command_run(o.common) as cmd:  # large files: on disk
        outcome = run_fewl_select(items, source, settings, cmd.ctx, o.out or default_out(
            "select", o.dataset), o.dataset, o.samples, o.temperature, o.icl_examples,
            o.min_fewl)
    _finish(outcome, cmd, chosen)
    if outcome.run is not None:
        echo(f"exports: {outcome.run.path / 'icl_prompts.jsonl'}, "
             f"{outcome.run.path / 'finetune.jsonl'}")
