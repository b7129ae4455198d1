"""``veracity deception``: run the benchmark, score recorded results, build datasets."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import click

from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    SEED,
    CommonOptions,
    Finite,
    common_options,
    default_out,
    handles_errors,
    options_as,
    record_selection,
    sample_options,
    selection_of,
)
from veracity.cli.output import echo
from veracity.data.stored import selected_mc
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.methods.deception.core import (
    DEFAULT_MAX_TOKENS,
    PAPER_SAMPLING,
    SUSCEPTIBILITY_FORMULAS,
    SUSCEPTIBILITY_METHODS,
    DeceptionSettings,
)
from veracity.methods.deception.dataset import MAX_SHOTS, MakeSettings
from veracity.methods.deception.prompt import DEFAULT_PROMPT, load_prompt_file
from veracity.methods.deception.records import DeceptionRecord, DeceptionResults, DeceptionSummary
from veracity.methods.deception.repeats import spreads
from veracity.methods.deception.run import make_dataset, run_deception, run_deception_recorded
from veracity.runs.result import RunResult
from veracity.store import dumps
from veracity.types import Sampling

DEFAULT_MODEL = "llamacpp/default"


def _subjects(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [s.strip() for s in value.split(",") if s.strip()]
    if not names:
        raise ConfigError("--subjects is empty")
    return names


def _pct(value: float | None) -> str:
    return "    —" if value is None else f"{100 * value:5.1f}"


def _susceptibility(m: DeceptionSummary) -> str:
    if m.susceptibility_unbounded:
        return "    ∞"
    return "    —" if m.susceptibility is None else f"{m.susceptibility:5.2f}"


def _value(results: dict[str, Any], key: str) -> str:
    if results.get(f"{key}_unbounded"):
        return "∞"
    value = results.get(key)
    return "—" if value is None else f"{value:.2f}"


def _rate(results: dict[str, Any], key: str) -> str:
    value = results.get(key)
    return "—" if value is None else f"{100 * value:.1f}%"


def print_metrics(results: dict[str, Any]) -> None:
    """Per-subject and overall metrics as a plain-text table (percentages)."""
    echo(f"\n{'subject':<36} {'items':>5} {'norm%':>6} {'misl%':>6} {'susc':>6} "
               f"{'cons%':>6} {'err n%':>6} {'err m%':>6}")
    summary = DeceptionSummary.from_results(results)
    for name, m in [*summary.per_subject.items(), ("ALL", summary)]:
        echo(
            f"{name[:36]:<36} {m.n_items:>5} {_pct(m.normal_accuracy):>6} "
            f"{_pct(m.misleading_accuracy):>6} {_susceptibility(m):>6} "
            f"{_pct(m.consistency):>6} {_pct(m.error_rate_normal):>6} "
            f"{_pct(m.error_rate_misleading):>6}"
        )
    used = results.get("susceptibility_subjects", [])
    echo(
        f"\nmodel {results['model']}  dataset {results['dataset']}\n"
        f"consistency {_pct(summary.consistency).strip()}% = correct "
        f"{_pct(summary.consistent_correct).strip()}% + incorrect "
        f"{_pct(summary.consistent_incorrect).strip()}%; susceptibility over {len(used)} "
        f"subject(s) with normal accuracy > {results['susceptibility_threshold']}"
    )
    chosen = results.get("susceptibility_method", "pooled")
    for method in SUSCEPTIBILITY_METHODS:
        key = "susceptibility_" + method.replace("-", "_")
        if key in results:
            mark = " (headline)" if method == chosen else ""
            echo(f"  susceptibility {method}{mark}: {_value(results, key)}  = "
                 f"{SUSCEPTIBILITY_FORMULAS[method]}")
    if "truncation_rate_normal" in results and results.get("source") != "recorded":
        echo(f"invalid answers: normal {_rate(results, 'error_rate_normal')}, misleading "
             f"{_rate(results, 'error_rate_misleading')}; of them cut off by --max-tokens: "
             f"normal {_rate(results, 'truncation_rate_normal')}, misleading "
             f"{_rate(results, 'truncation_rate_misleading')}")
    if summary.n_unscored:
        click.echo(f"{summary.n_unscored} item(s) not scored: the server failed or sent no text "
                   "(error_kind in samples.jsonl); rerun the same command to retry them")


def _finish(outcome: RunResult[DeceptionRecord, DeceptionResults], as_json: bool, title: str) -> None:
    if as_json:
        echo(dumps(outcome.results, indent=2))
    else:
        print_metrics(outcome.results)
    write_report(outcome.run, title, as_json)


@click.group()
def deception() -> None:
    """Deception-based benchmarking (DB-MMLU): accuracy with and without misleading openings."""

T = TypeVar("T")


@dataclass(frozen=True)
class RunOptions:
    """``veracity deception run``'s options."""

    model: str
    dataset: str
    subjects: str | None
    limit_per_subject: int | None
    sample: int | None
    sample_seed: int
    temperature: float | None
    top_p: float | None
    top_k: int | None
    repeat_penalty: float | None
    greedy: bool
    max_tokens: int
    seed: int
    retries: int
    threshold: float
    lenient: bool
    susceptibility: str
    prompt_file: Path | None
    system_prompt: bool
    out: Path | None
    as_json: bool
    repeats: int = 1
    common: CommonOptions = CommonOptions()

    def sampling(self) -> Sampling:
        """The paper's sampling, each value replaced where given; or greedy decoding."""
        given = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                 "repeat_penalty": self.repeat_penalty}
        explicit = [n for n, v in given.items() if v is not None]
        if self.greedy:
            if explicit:
                raise ConfigError(
                    f"--greedy cannot be combined with --{explicit[0].replace('_', '-')}")
            return Sampling(temperature=0.0, max_tokens=self.max_tokens, seed=self.seed)
        return Sampling(temperature=_given(self.temperature, PAPER_SAMPLING.temperature),
                        top_p=_given(self.top_p, PAPER_SAMPLING.top_p),
                        top_k=_given(self.top_k, PAPER_SAMPLING.top_k),
                        repeat_penalty=_given(self.repeat_penalty, PAPER_SAMPLING.repeat_penalty),
                        max_tokens=self.max_tokens, seed=self.seed)

    def settings(self) -> DeceptionSettings:
        prompt = load_prompt_file(self.prompt_file) if self.prompt_file else DEFAULT_PROMPT
        return DeceptionSettings(sampling=self.sampling(), threshold=self.threshold,
                                 retries=self.retries, lenient=self.lenient,
                                 susceptibility=self.susceptibility, prompt=prompt,
                                 system_prompt=self.system_prompt)


def _given(value: T | None, default: T) -> T:
    return default if value is None else value


@dataclass(frozen=True)
class MakeOptions:
    """``veracity deception make-dataset``'s options."""

    model: str
    source: str
    out: Path
    subjects: str | None
    limit_per_subject: int | None
    batch_size: int
    shots: int
    shuffle: bool
    system_prompt: bool
    seed: int
    retries: int
    temperature: float
    max_tokens: int
    as_json: bool
    common: CommonOptions = CommonOptions()

    def settings(self) -> MakeSettings:
        return MakeSettings(
            batch_size=self.batch_size, seed=self.seed, retries=self.retries, shots=self.shots,
            shuffle=self.shuffle, system_prompt=self.system_prompt,
            sampling=Sampling(temperature=self.temperature, top_p=0.95, top_k=40,
                              repeat_penalty=1.1, max_tokens=self.max_tokens),
        )


@deception.command("run")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True,
              help="Model spec; it must support prefill.")
@click.option("--dataset", required=True, help="db-mmlu:DIR, or mc-jsonl:FILE with openings.")
@click.option("--subjects", help="Comma-separated subjects (default: all).")
@click.option("--limit-per-subject", type=click.IntRange(min=1), help="First K items per subject.")
@sample_options
@click.option("--temperature", type=Finite(0.0, 10.0), help="Default 0.3 (paper).")
@click.option("--top-p", type=Finite(0.0, 1.0), help="Default 0.3 (paper).")
@click.option("--top-k", type=click.IntRange(min=0), help="Default 40 (paper).")
@click.option("--repeat-penalty", type=Finite(0.0, 10.0), help="Default 1.1 (paper).")
@click.option("--greedy", is_flag=True, help="Temperature 0 instead of the paper's sampling.")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=DEFAULT_MAX_TOKENS,
              show_default=True, help="Per answer; a reasoning cut off here is recorded as "
              "truncated (its own error kind) and counted wrong.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Sampling seed.")
@click.option("--retries", type=click.IntRange(0, 10), default=1, show_default=True,
              help="Extra attempts for an invalid answer (with --greedy on a local model a "
                   "retry repeats the same answer: 0 saves time).")
@click.option("--threshold", type=Finite(0.0, 1.0, max_open=True), default=0.4,
              show_default=True, help="Susceptibility uses subjects above this normal accuracy.")
@click.option("--lenient", is_flag=True, help="Lenient answer parsing (not paper-compatible).")
@click.option("--susceptibility", type=click.Choice(SUSCEPTIBILITY_METHODS), default="pooled",
              show_default=True, help="Headline susceptibility (both are reported): pooled "
              "Σc_n/Σc_m (reproduces Table 3) or subject-weighted Σ(t_s/T′)(c_n^s/c_m^s) (§3.2.2).")
@click.option("--prompt-file", type=click.Path(path_type=Path, dir_okay=False),
              help="TOML file with the instruction, question layout and worked example "
                   "(placeholders {question}, {A}-{D}, {options}, {subject}).")
@click.option("--system-prompt", is_flag=True,
              help="Send the instruction as a system message (the paper puts it in the first "
                   "user turn, as some chat templates refuse system messages).")
@click.option("--out", type=click.Path(path_type=Path),
              help="Run directory (default: runs/deception-<dataset>-<model>).")
@click.option("--repeats", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Run R times, repeat r with --seed + r (§6: results vary with sampling); "
                   "repeat r > 0 goes to OUT-repeat-r and OUT/repeats.json holds each metric's "
                   "mean ± sd.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
@common_options
@handles_errors
@options_as(RunOptions)
def run(o: RunOptions) -> None:
    """Answer each item normally and from its misleading opening; print the paper's metrics."""
    settings = o.settings()
    out = o.out or default_out("deception", o.dataset.split(":", 1)[-1], o.model)
    # a sample is drawn from what --subjects and --limit-per-subject leave
    held = selected_mc(o.dataset, _subjects(o.subjects),  # large files: on disk
                       o.limit_per_subject, selection_of(o.sample, o.sample_seed))
    if o.repeats > 1 and settings.sampling.temperature == 0:
        raise ConfigError("--repeats measures the spread of sampled answers: with --greedy "
                          "(temperature 0) every repeat is the same run")
    extra: list[RunResult[DeceptionRecord, DeceptionResults]] = []
    with held as (items, chosen), command_run(o.common) as cmd:
        outcome = run_deception(o.model, o.dataset, cmd.ctx, settings, out,
                                _subjects(o.subjects), o.limit_per_subject, items)
        for r in range(1, o.repeats):
            again = replace(settings, sampling=replace(settings.sampling,
                                                       seed=settings.sampling.seed + r))
            extra.append(run_deception(o.model, o.dataset, cmd.ctx, again,
                                       out.parent / f"{out.name}-repeat-{r}",
                                       _subjects(o.subjects), o.limit_per_subject, items))
    record_selection(outcome.run, chosen)
    _finish(outcome, o.as_json, f"veracity deception: {outcome.summary.model}")
    if extra:
        _repeats(outcome, extra, settings.sampling.seed, o.as_json)
    if not o.as_json:
        echo(cmd.calls_line())


def _repeats(first: RunResult[DeceptionRecord, DeceptionResults],
             extra: list[RunResult[DeceptionRecord, DeceptionResults]], seed: int,
             as_json: bool) -> None:
    """Write repeats.json into the first run and print each metric's mean ± sd."""
    runs = [first, *extra]
    found = spreads([o.summary.summary for o in runs])
    record: JsonObject = {
        "repeats": len(runs), "seeds": [seed + r for r in range(len(runs))],
        "runs": [str(o.run.path) if o.run is not None else None for o in runs],
        "metrics": {name: s.to_json() for name, s in found.items()}}
    if first.run is not None:
        first.run.write_json("repeats.json", record)
    if as_json:
        echo(dumps(record, indent=2))
        return
    echo(f"\nover {len(runs)} repeats (seeds {seed}-{seed + len(runs) - 1}), mean ± sd:")
    for name, s in found.items():
        scale, unit = (1.0, "") if name == "susceptibility" else (100.0, "%")
        shown = "—" if s.mean is None else f"{scale * s.mean:.2f}{unit}"
        spread = "" if s.sd is None else f" ± {scale * s.sd:.2f}{unit}"
        echo(f"  {name.replace('_', ' '):<24} {shown}{spread}  (n = {len(s.defined)})")


@deception.command("score-recorded")
@click.option("--results", "results_dir", required=True,
              type=click.Path(path_type=Path, file_okay=False),
              help="Directory of <subject>.csv[.gz]: gold, normal reasoning, normal prediction, "
                   "misleading reasoning, misleading prediction (no header).")
@click.option("--dataset", required=True, help="db-mmlu:DIR the results were produced on.")
@click.option("--subjects", help="Comma-separated subjects (default: every results file).")
@click.option("--model", "model_name", help="Name shown for these results (default: DIR name).")
@click.option("--threshold", type=Finite(0.0, 1.0, max_open=True), default=0.4,
              show_default=True)
@click.option("--susceptibility", type=click.Choice(SUSCEPTIBILITY_METHODS), default="pooled",
              show_default=True, help="Headline susceptibility (both are reported).")
@click.option("--out", type=click.Path(path_type=Path), help="Also write a run directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
@handles_errors
def score_recorded(results_dir: Path, dataset: str, subjects: str | None, model_name: str | None,
                   threshold: float, susceptibility: str, out: Path | None,
                   as_json: bool) -> None:
    """Score results recorded elsewhere (the DB-MMLU authors' format), with no model."""
    outcome = run_deception_recorded(results_dir, dataset, threshold, out, _subjects(subjects),
                                     model_name, susceptibility)
    _finish(outcome, as_json, f"veracity deception: {outcome.results['model']} (recorded)")


@deception.command("make-dataset")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True,
              help="Model that writes the misleading openings.")
@click.option("--input", "source", required=True,
              help="mmlu:DIR_OR_FILE (a directory with dev/, test/, val/ merges the splits), "
                   "mc-jsonl:FILE (question, options, answer) or db-mmlu:DIR.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Directory for <subject>.csv (DB-MMLU format) and the side files.")
@click.option("--subjects", help="Comma-separated subjects (default: all).")
@click.option("--limit-per-subject", type=click.IntRange(min=1), help="First K items per subject.")
@click.option("--batch-size", type=click.IntRange(1, 100), default=20, show_default=True,
              help="Questions per request (the paper's 20).")
@click.option("--shots", type=click.IntRange(1, MAX_SHOTS), default=5, show_default=True,
              help="Worked examples in every request (the paper's 5).")
@click.option("--shuffle/--no-shuffle", default=True, show_default=True,
              help="Shuffle the questions within each subject with --seed (the paper's way).")
@click.option("--system-prompt", is_flag=True,
              help="Send the instruction as a system message, not in the first user turn.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the targeted wrong options and of the shuffle (recorded).")
@click.option("--retries", type=click.IntRange(0, 10), default=2, show_default=True)
@click.option("--temperature", type=Finite(0.0, 10.0), default=0.7, show_default=True)
@click.option("--max-tokens", type=click.IntRange(0, 100_000), default=0,
              help="Per request (default: 100 + 120 per question).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@common_options
@handles_errors
@options_as(MakeOptions)
def make_dataset_command(o: MakeOptions) -> None:
    """Write misleading openings for any multiple-choice data, in the DB-MMLU format."""
    settings = o.settings()
    with command_run(o.common) as cmd:
        made = make_dataset(o.model, o.source, o.out, cmd.ctx, settings,
                            _subjects(o.subjects), o.limit_per_subject)
    s = made.summary
    if o.as_json:
        echo(dumps(s, indent=2))
    else:
        echo(f"wrote {s['n_written']} of {s['n_items']} items to {made.out} "
                   f"({len(s['per_subject'])} subject file(s)); targets in targets.jsonl")
        if s["n_resumed"] or s["n_by_hand"]:
            echo(f"{s['n_resumed']} taken from the interrupted build's journal, "
                 f"{s['n_by_hand']} written by hand")
    if made.failed:
        echo(f"warning: {len(made.failed)} item(s) got no valid misleading opening after "
                   f"{settings.retries} retr{'y' if settings.retries == 1 else 'ies'}; they are "
                   f"listed in {made.out / 'failures.jsonl'}; complete them by hand in "
                   f"{made.out / 'to_complete.csv'} and rerun", err=True)
        for f in made.failed[:5]:
            echo(f"  {f.item.id}: {f.errors[-1] if f.errors else 'no answer'}", err=True)
    if not s["n_written"]:
        raise click.exceptions.Exit(1)  # nothing `run` could read: scripts must see it

