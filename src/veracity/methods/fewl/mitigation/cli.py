"""``veracity fewl icl`` and ``veracity fewl finetune``: reduce hallucination with FEWL-chosen
answers (as examples, or as fine-tuning targets) and measure it with a judge's win rate."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from veracity.cli.options import (
    Finite,
    common_options,
    handles_errors,
    options_as,
    record_selection,
)
from veracity.cli.output import echo
from veracity.errors import DataError
from veracity.methods.fewl.cli import (
    FewlOptions,
    default_out,
    fewl_options,
    questions_dataset,
)
from veracity.methods.fewl.mitigation.core import MitigationSettings
from veracity.methods.fewl.mitigation.examples import FORMATS, POOLS
from veracity.methods.fewl.mitigation.lora import METHODS
from veracity.methods.fewl.mitigation.paper import labelled_candidates
from veracity.methods.fewl.mitigation.records import MitigationRecord, MitigationResults
from veracity.methods.fewl.mitigation.selection import RULES
from veracity.methods.fewl.mitigation.tables import acc_text, pct, print_table6, print_table7
from veracity.methods.fewl.run import AnswerSource, answer_source
from veracity.report import build_report
from veracity.runs.common import total_stats
from veracity.runs.result import RunResult


def print_table(results: MitigationResults, versus: str) -> None:
    """The paper's table: one row per rule, with accuracy where the data has labels."""
    echo(f"\n{'selected by':<12} {versus + ' better':>22} {results.base_name + ' better':>22} "
         f"{'inconsistent/tie':>22} {'unparseable':>12} {'accuracy':>9} "
         f"{'win rate (decided)':>28}")
    for row in results.rows:
        acc, r = row.accuracy, row.rates
        paper = r.paper_win_rate
        won = f"{pct(paper)} of {paper.decided}"
        echo(f"{row.rule:<12} {pct(r.candidate_better):>22} {pct(r.base_better):>22}"
             f" {pct(r.inconsistent_or_tie):>22} {r.unparseable:>5}/{r.replies:<6}"
             f" {acc_text(acc):>9} {won:>28}")
    echo("win rate (decided): the paper's C.10 rate, wins over the pairs the judge decided "
         "(not sure and inconsistent pairs removed)")
    base = results.base_accuracy
    if base is not None:
        echo(f"{results.base_name} accuracy {acc_text(base)} over {base.n} questions")


@dataclass(frozen=True, kw_only=True)
class MitigationOptions(FewlOptions):
    """What ``fewl icl`` and ``fewl finetune`` share (:func:`mitigation_options`)."""

    judge: str
    judge_prompt: Path | None
    candidates: str | None
    samples: int
    temperature: float
    split: float
    selected_by: tuple[str, ...]

    def mitigation(self, model: str, extra: dict[str, str | bool],
                   default_rules: tuple[str, ...] = RULES) -> MitigationSettings:
        rules = tuple(self.selected_by) or default_rules
        candidates = self.candidates or model
        from_dataset = candidates == "dataset"
        lists = labelled_candidates(self.dataset, self.seed) if from_dataset else None
        return MitigationSettings(
            fewl=self.settings(), candidates=AnswerSource("dataset") if from_dataset
            else answer_source(candidates),
            judge=self.judge, rules=rules, samples=self.samples,
            temperature=self.temperature, split=self.split, extra=extra,
            candidate_lists=lists, **_judge_prompt(self.judge_prompt))


@dataclass(frozen=True, kw_only=True)
class IclOptions(MitigationOptions):
    """``veracity fewl icl``'s options."""

    model: str
    examples: int
    pool: str
    example_format: str
    icl_template: Path | None
    zero_shot: bool


@dataclass(frozen=True, kw_only=True)
class FinetuneOptions(MitigationOptions):
    """``veracity fewl finetune``'s options."""

    base: str
    method: str
    base_chat_template: str | None
    preset: str | None
    epochs: float
    max_steps: int | None
    lora_r: int
    learning_rate: float | None
    batch_size: int
    max_length: int
    save_steps: int
    threads: int | None
    merge: bool


def _judge_prompt(path: Path | None) -> dict[str, str]:
    """The judge prompt settings from --judge-prompt (nothing: the built-in prompt)."""
    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the judge prompt {path}: {exc}") from None
    missing = [f for f in ("{question}", "{a}", "{b}") if f not in text]
    if missing:
        raise DataError(f"judge prompt {path}: it must contain {', '.join(missing)}")
    return {"judge_prompt": text, "judge_prompt_source": str(path)}


def _done(outcome: RunResult[MitigationRecord, MitigationResults], started: float, ctx: Any, title: str,
          chosen: dict[str, Any]) -> None:
    record_selection(outcome.run, chosen)
    stats = total_stats(ctx)
    echo(f"{stats.model_calls} model calls, {stats.cache_hits} cache hits, "
         f"{time.perf_counter() - started:.1f} s")
    if outcome.run is not None:
        report = build_report([outcome.run.path], outcome.run.path / "report.html", title=title)
        echo(f"run directory: {outcome.run.path}\nreport: {report}")


def mitigation_options(func: Any) -> Any:
    for decorator in reversed([
        click.option("--judge", required=True, help="Model spec of the pairwise judge."),
        click.option("--judge-prompt", type=click.Path(path_type=Path, dir_okay=False),
                     help="File with the judge's prompt ({question}, {a}, {b} filled in) instead "
                          "of the built-in one (helpful, truthful, harmless; A, B or C: not sure)."),
        click.option("--candidates", help="Model spec or JSONL (id + answers) of the candidate "
                     "answers of the training questions (default: the model / base), or "
                     "'dataset': a labelled dataset's own answers (CHALE: good, mid, hallucinated)."),
        click.option("--samples", type=click.IntRange(1, 100), default=4, show_default=True,
                     help="Candidates per training question."),
        click.option("--temperature", type=Finite(0.0, 10.0), default=0.7, show_default=True,
                     help="Sampling temperature of the candidates."),
        click.option("--split", type=Finite(0.0, 1.0, min_open=True, max_open=True), default=0.8,
                     show_default=True, help="Share of questions in the (seeded) training split."),
        click.option("--selected-by", type=click.Choice(RULES), multiple=True,
                     help="Selection rule(s) to compare (repeatable; default: icl fewl and "
                          "baseline, finetune all three)."),
    ]):
        func = decorator(func)
    return func


@click.command("icl")
@click.option("--model", required=True, help="Model that answers, with examples (and zero-shot).")
@click.option("--examples", type=click.IntRange(1, 50), default=5, show_default=True,
              help="K nearest pool questions shown as worked examples (the paper: 5).")
@click.option("--pool", type=click.Choice(POOLS), default="differs", show_default=True,
              help="Example pool: training questions where FEWL and the baseline chose different "
                   "answers (the paper's), or all training questions.")
@click.option("--example-format", type=click.Choice(FORMATS), default="message",
              show_default=True, help="Examples in one user message (C.11) or as chat turns.")
@click.option("--icl-template", type=click.Path(path_type=Path, dir_okay=False),
              help="File with the one-message prompt ({examples}, {question} filled in).")
@click.option("--zero-shot", is_flag=True,
              help="Also answer zero-shot and judge every rule against it (a third arm).")
@mitigation_options
@questions_dataset
@fewl_options
@common_options
@handles_errors
@options_as(IclOptions)
def icl_cmd(o: IclOptions) -> None:
    """FEWL-guided in-context learning (Table 6): K nearest pool questions as examples with the
    answer each rule picks; the judge compares FEWL-guided and baseline-guided answers head to
    head in both orders; accuracy on labels."""
    from veracity.methods.fewl.mitigation.icl import IclSettings, fewl_icl

    model = o.model
    icl = IclSettings(examples=o.examples, pool=o.pool, format=o.example_format,
                      zero_shot=o.zero_shot, **_icl_template(o.icl_template))
    settings = o.mitigation(model, {"model": model}, ("fewl", "baseline"))
    items, chosen = o.selected()
    ctx = o.common.context()
    started = time.perf_counter()
    try:
        outcome = fewl_icl(items, settings, model, icl, ctx,
                           o.out or default_out("icl", o.dataset), o.dataset)
        print_table6(outcome.summary)
        if outcome.summary.rows:
            print_table(outcome.summary, "ICL")
        _done(outcome, started, ctx, f"veracity FEWL icl: {o.dataset}", chosen)
    finally:
        ctx.close()


def _icl_template(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        return {"template": path.read_text(encoding="utf-8"), "template_source": str(path)}
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the ICL template {path}: {exc}") from None


PAPER = {"method": "full", "epochs": 10.0, "split": 0.8,
         "selected_by": ("gold", "baseline", "fewl"), "base_chat_template": "raw"}
"""§5.2: a base model (OPT-1.3B) fine-tuned fully for 10 epochs on the answers each rule picks
(ground truth, baseline, FEWL), TruthfulQA split 80 / 20; prompts as raw text."""


def _preset(o: FinetuneOptions) -> tuple[FinetuneOptions, dict[str, Any] | None]:
    """--preset paper: its settings where no option was given on the command line."""
    name = o.preset
    if name is None:
        return o, None
    context = click.get_current_context()
    applied: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for key, value in PAPER.items():
        if context.get_parameter_source(key) == click.core.ParameterSource.COMMANDLINE:
            kept[key] = getattr(o, key)
        else:
            applied[key] = value
    echo(f"preset {name}: " + ", ".join(f"{k.replace('_', '-')}={v}" for k, v in applied.items())
         + (f" (given explicitly: {', '.join(f'{k}={v}' for k, v in kept.items())})"
            if kept else ""), err=True)
    return replace(o, **applied), {"name": name, "applied": applied, "overridden": kept}


@click.command("finetune")
@click.option("--base", required=True, help="hf/default (bundled SmolLM2), hf/DIR or hf/FILE.gguf; "
              "a base model without a chat template needs --chat-template (raw: plain text).")
@click.option("--method", type=click.Choice(METHODS), default="lora", show_default=True,
              help="lora: an adapter per rule; full: every weight (the paper's SFT).")
@click.option("--base-chat-template", metavar="FILE|NAME",
              help="Prompt format of the base and fine-tuned models only (raw: plain text, for a "
                   "base model without a chat template); default --chat-template, else the "
                   "model's own. The judge and reference models keep theirs.")
@click.option("--preset", type=click.Choice(["paper"]), default=None,
              help="The paper's settings (method=full, epochs=10, split=0.8, all three rules, "
                   "base-chat-template=raw); options given explicitly still win. Recorded in "
                   "run.json.")
@click.option("--epochs", type=Finite(0.0, 1000.0, min_open=True), default=3.0, show_default=True)
@click.option("--max-steps", type=click.IntRange(min=1), help="Stop after S optimiser steps.")
@click.option("--lora-r", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("--learning-rate", type=Finite(0.0, 1.0, min_open=True), default=None,
              help="Default 2e-4 for lora, 2e-5 for full fine-tuning.")
@click.option("--batch-size", type=click.IntRange(1, 1024), default=4, show_default=True)
@click.option("--max-length", type=click.IntRange(16, 32768), default=256, show_default=True,
              help="Tokens per training example (longer ones are cut).")
@click.option("--save-steps", type=click.IntRange(min=1), default=10, show_default=True,
              help="Checkpoint every N steps (a rerun resumes from the last).")
@click.option("--threads", type=click.IntRange(min=1),
              help="torch CPU threads for training and generation (1 is fastest on a busy machine).")
@click.option("--merge", is_flag=True, help="Also save the LoRA-merged model (loadable as hf/DIR); "
              "full fine-tuning always saves the whole model there.")
@mitigation_options
@questions_dataset
@fewl_options
@common_options
@handles_errors
@options_as(FinetuneOptions)
def finetune_cmd(o: FinetuneOptions) -> None:
    """Label-free fine-tuning (Table 7): a LoRA adapter or a fully fine-tuned model per selection
    rule (TRL SFT) on the training split's chosen answers; the judge compares fine-tuned and base
    answers on the test split in both orders."""
    from veracity.methods.fewl.mitigation.finetune import fewl_finetune
    from veracity.methods.fewl.mitigation.lora import LoraSettings

    o, preset = _preset(o)
    base, method = o.base, o.method
    rate = o.learning_rate or (2e-5 if method == "full" else 2e-4)
    lora = LoraSettings(epochs=o.epochs, max_steps=o.max_steps or -1,
                        lora_r=o.lora_r, lora_alpha=2 * o.lora_r,
                        learning_rate=rate, batch_size=o.batch_size,
                        max_length=o.max_length, save_steps=o.save_steps,
                        seed=o.seed, device=o.common.device, threads=o.threads,
                        method=method, chat_template=o.base_chat_template)
    merge = o.merge
    settings = o.mitigation(base, {"base": base, "merge": merge, "method": method})
    items, chosen = o.selected()
    ctx = o.common.context()
    started = time.perf_counter()
    out: Path = o.out or default_out("finetune", o.dataset)
    try:
        outcome = fewl_finetune(items, settings, base, lora, ctx, out, o.dataset, merge,
                                progress=not o.common.quiet)
        tuned = outcome.summary.finetune
        for rule, t in (tuned.training if tuned is not None else {}).items():
            saved = t.adapter or t.merged or ""
            loss = "—" if t.train_loss is None else f"{t.train_loss:.3f}"
            echo(f"{rule}: {t.steps} steps on {t.examples} examples in {t.seconds:.0f} s"
                 f", loss {loss}, {method} -> {out / saved}")
        print_table7(outcome.summary)
        print_table(outcome.summary, "fine-tuned")
        if preset is not None and outcome.run is not None:
            outcome.run.update_config({"preset": preset})
        _done(outcome, started, ctx, f"veracity FEWL finetune: {o.dataset}", chosen)
    finally:
        ctx.close()
