"""A benchmark run through the run driver, chunk by chunk: each chunk's greedy answers, every
signal and every label written to samples.jsonl as the chunk finishes (every model call is
cached as it arrives, so a rerun after an interruption makes only the missing calls); at the
end the tables are made from the stored per-item rows (benchmark.json, benchmark.csv). Or
score-only on a recorded file."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from veracity.data.jsonl import line_objects
from veracity.errors import DataError
from veracity.methods.benchmark.core import (
    GREEDY,
    Chunk,
    Ledger,
    chosen_methods,
    greedy_answers,
    score_chunk,
    snapshot,
)
from veracity.methods.benchmark.records import BenchmarkRecord, BenchmarkSummary, Cost
from veracity.methods.benchmark.settings import BenchmarkSettings
from veracity.methods.benchmark.tables import Rows, tables, warnings_of
from veracity.metrics import METRICS
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.store import RunDir
from veracity.streaming import chunks
from veracity.text import csv_cell
from veracity.types import Generation, Item

BENCHMARK_FILE = "benchmark.json"
CSV_FILE = "benchmark.csv"
RECORDED_LABELS = "recorded"
"""The label source of labels that came with a recorded file (its ``correct`` field)."""
LIVE_CHUNK = 256
"""Questions per chunk: every method's calls for them are sent to the backend at once."""

BenchmarkRun = RunResult[BenchmarkRecord, BenchmarkSummary]


@dataclass(frozen=True)
class _Run:
    """What the driver needs around the chunks (the same for a live and a recorded run)."""

    model: str | None
    embedder: str
    dataset: str
    settings: BenchmarkSettings


def run_benchmark(items: Sequence[Item], model: str, embedder: str, settings: BenchmarkSettings,
                  ctx: Context, out: Path | None, dataset: str,
                  chunk_size: int = LIVE_CHUNK) -> BenchmarkRun:
    """Greedy answers, every method's signal at the budget and every label source, chunk by
    chunk; the tables at the end."""
    if not items:
        raise DataError("no questions to benchmark")
    check_target(out)  # before any model call
    chosen = chosen_methods(settings.methods)
    ledger = Ledger(chosen)

    def batches() -> Iterator[list[BenchmarkRecord]]:
        for part in chunks(items, chunk_size):
            before = snapshot(ctx)
            answers = greedy_answers(part, model, ctx, settings, logprobs="logprob" in chosen)
            ledger.charge(GREEDY, snapshot(ctx) - before)
            yield score_chunk(Chunk(part, answers), model, embedder, settings, ctx, ledger)

    return _drive(_Run(model, embedder, dataset, settings), batches(), ledger, ctx, out)


def read_recorded(path: Path) -> tuple[list[Item], list[Generation | None],
                                       list[tuple[str, ...]] | None, dict[str, list[bool | None]]]:
    """A recorded file (JSONL): per line ``id``, ``question`` (or ``prompt``), ``answer``, and
    optionally ``samples`` (answers sampled at T > 0), ``references``, ``incorrect``,
    ``correct`` (a label) or ``labels`` (labels by source, as a benchmark run's samples.jsonl
    holds them)."""
    items: list[Item] = []
    answers: list[Generation | None] = []
    samples: list[tuple[str, ...]] = []
    labels: dict[str, dict[int, bool | None]] = {}
    for number, row in line_objects(path, "recorded file"):
        where = f"{path}, line {number}"
        question = row.get("question", row.get("prompt"))
        answer = row.get("answer")
        if not isinstance(question, str) or not question.strip():
            raise DataError(f"{where}: needs a 'question' (or 'prompt') string")
        if answer is not None and not isinstance(answer, str):
            raise DataError(f"{where}: 'answer' must be a string or null")
        drawn = row.get("samples") or []
        refs, wrong = row.get("references") or [], row.get("incorrect") or []
        for name, value in (("samples", drawn), ("references", refs), ("incorrect", wrong)):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise DataError(f"{where}: '{name}' must be a list of strings")
        k = len(items)
        items.append(Item(str(row.get("id", f"item-{k + 1}")), question, tuple(refs),
                          {"incorrect_answers": list(wrong)}))
        answers.append(Generation(answer) if answer is not None else None)
        samples.append(tuple(drawn))
        given = dict(row.get("labels") or {})
        if "correct" in row:
            given[RECORDED_LABELS] = row["correct"]
        for source, value in given.items():
            if value is not None and not isinstance(value, bool):
                raise DataError(f"{where}: label '{source}' must be true, false or null")
            labels.setdefault(str(source), {})[k] = value
    if not items:
        raise DataError(f"{path}: no recorded answers")
    found = {s: [v.get(k) for k in range(len(items))] for s, v in labels.items()}
    return items, answers, samples if any(samples) else None, found


def score_recorded(path: Path, embedder: str, settings: BenchmarkSettings, ctx: Context,
                   out: Path | None, model: str | None = None,
                   chunk_size: int = LIVE_CHUNK) -> BenchmarkRun:
    """Score-only: the signals that need no model call (or ``model`` for the rest), on answers
    and samples brought from elsewhere; labels from the file and/or ``settings.labels``."""
    items, answers, samples, given = read_recorded(path)
    check_target(out)  # before any model call
    ledger = Ledger(chosen_methods(settings.methods))
    ledger.charge(GREEDY, Cost())

    def batches() -> Iterator[list[BenchmarkRecord]]:
        for start in range(0, len(items), chunk_size):
            part = slice(start, start + chunk_size)
            chunk = Chunk(items[part], answers[part],
                          samples[part] if samples is not None else None,
                          {source: found[part] for source, found in given.items()})
            yield score_chunk(chunk, model, embedder, settings, ctx, ledger)

    return _drive(_Run(model, embedder, f"recorded:{path}", settings), batches(), ledger, ctx,
                  out)


def _drive(run: _Run, batches: Iterator[list[BenchmarkRecord]], ledger: Ledger, ctx: Context,
           out: Path | None) -> BenchmarkRun:
    rows = Rows()
    config = {"model": run.model, "embedder": run.embedder, "dataset": run.dataset,
              "settings": run.settings.describe()}

    def finish() -> Finish[BenchmarkSummary]:
        summary = summarise(rows, ledger, run)
        return Finish(summary, stats=ctx.stats(), exports=lambda where: _exports(where, summary))

    return drive(out, RunPlan("benchmark", BenchmarkRecord, config, ctx.started), batches,
                 [rows], finish)


def summarise(rows: Rows, ledger: Ledger, run: _Run) -> BenchmarkSummary:
    """The tables from the stored rows, with the ledger's signals, costs and skips."""
    signals = ledger.signal_infos()
    found = tables(rows, signals, run.settings)
    return BenchmarkSummary(run.model, run.embedder, run.dataset, len(rows), run.settings,
                            METRICS, tuple(signals), tuple(ledger.skipped()),
                            ledger.ordered_costs(), found,
                            tuple(warnings_of(rows.by_source(), found)))


def _exports(run: RunDir, summary: BenchmarkSummary) -> None:
    run.write_json(BENCHMARK_FILE, summary.to_json())
    run.record(CSV_FILE)
    (run.path / CSV_FILE).write_text(leaderboard_csv(summary), encoding="utf-8")


def leaderboard_csv(summary: BenchmarkSummary) -> str:
    """One row per label source and signal: every metric, its interval and its difference to
    the best baseline, with the signal's cost. Text cells cannot run as spreadsheet formulas."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = ["labels", "signal", "n", "n_wrong", "reference"]
    for key in METRICS:
        header += [key, f"{key}_low", f"{key}_high", f"{key}_diff", f"{key}_diff_low",
                   f"{key}_diff_high"]
    header += ["requests_per_question", "model_calls", "generated_tokens", "wall_seconds",
               "embed_seconds", "scorer_seconds"]
    writer.writerow(header)
    for source, table in summary.tables.items():
        for name, row in table.rows.items():
            cells: list[str | int] = [csv_cell(source), csv_cell(name), table.n, table.n_wrong,
                                      csv_cell(table.reference or "")]
            for key in METRICS:
                est = row[key]
                cells += [_num(v) for v in (est.value, est.low, est.high, est.diff,
                                            est.diff_low, est.diff_high)]
            cost = summary.costs.get(summary.method_of(name))
            cells += ([_num(cost.per_question(summary.n_items)), cost.model_calls,
                       cost.generated_tokens, _num(cost.wall_seconds),
                       _num(cost.embed_seconds), _num(cost.scorer_seconds)]
                      if cost else [""] * 6)
            writer.writerow(cells)
    return buffer.getvalue()


def _num(value: float | int) -> str:
    if isinstance(value, float) and math.isnan(value):
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)
