"""A benchmark run: the greedy answers, every signal, the labels, the tables; written into a
run directory (samples.jsonl holds every item's scores and labels, benchmark.json the tables,
benchmark.csv the leaderboard); or score-only on a recorded file."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veracity.data.jsonl import line_objects
from veracity.errors import DataError
from veracity.methods.benchmark.core import (
    Benchmark,
    BenchmarkSettings,
    Cost,
    add_labels,
    chosen_methods,
    greedy_answers,
    run_signals,
    snapshot,
    spent,
    summary,
)
from veracity.methods.benchmark.records import BenchmarkRecord
from veracity.metrics import METRICS
from veracity.runs.common import Context
from veracity.runs.driver import check_target
from veracity.store import RunDir
from veracity.text import csv_cell
from veracity.types import Generation, Item

BENCHMARK_FILE = "benchmark.json"
CSV_FILE = "benchmark.csv"
RECORDED_LABELS = "recorded"
"""The label source of labels that came with a recorded file (its ``correct`` field)."""


@dataclass(frozen=True)
class Outcome:
    results: dict[str, Any]
    records: list[BenchmarkRecord]
    run: RunDir | None


def run_benchmark(items: Sequence[Item], model: str, embedder: str, settings: BenchmarkSettings,
                  ctx: Context, out: Path | None, dataset: str) -> Outcome:
    """Greedy answers, every method's signal at the budget, every label source, the tables."""
    if not items:
        raise DataError("no questions to benchmark")
    check_target(out)  # before any model call
    before = snapshot(ctx)
    answers = greedy_answers(items, model, ctx, settings.sampling,
                             logprobs="logprob" in chosen_methods(settings.methods))
    bench = run_signals(items, answers, model, embedder, settings, ctx,
                        greedy_cost=spent(before, snapshot(ctx)))
    add_labels(bench, settings.labels, ctx, embedder)
    return _finish(bench, settings, model, embedder, dataset, ctx, out)


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
                   out: Path | None, model: str | None = None) -> Outcome:
    """Score-only: the signals that need no model call (or ``model`` for the rest), on answers
    and samples brought from elsewhere; labels from the file and/or ``settings.labels``."""
    items, answers, samples, given = read_recorded(path)
    check_target(out)  # before any model call
    bench = run_signals(items, answers, model, embedder, settings, ctx, samples, Cost())
    sources = [s for s in settings.labels if s not in given]
    add_labels(bench, sources if given else settings.labels, ctx, embedder, given)
    return _finish(bench, settings, model, embedder, f"recorded:{path}", ctx, out)


def _finish(bench: Benchmark, settings: BenchmarkSettings, model: str | None, embedder: str,
            dataset: str, ctx: Context, out: Path | None) -> Outcome:
    results = summary(bench, settings, model, embedder, dataset)
    records = bench.records()
    run = None
    if out is not None:
        run = RunDir.create(out, "benchmark", {"model": model, "embedder": embedder,
                                               "dataset": dataset,
                                               "settings": results["settings"]}, ctx.started)
        run.write_samples(r.to_json() for r in records)
        run.write_json(BENCHMARK_FILE, results)
        run.record(CSV_FILE)
        (run.path / CSV_FILE).write_text(leaderboard_csv(results), encoding="utf-8")
        run.write_results(results)
        run.finish(ctx.stats())
    return Outcome(results, records, run)


def leaderboard_csv(results: dict[str, Any]) -> str:
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
    method_of = {s["name"]: s["method"] for s in results["signals"]}
    for source, entry in results["tables"].items():
        for name, row in entry.get("intervals", {}).items():
            cells: list[Any] = [csv_cell(source), csv_cell(name), entry["n"], entry["n_wrong"],
                                csv_cell(entry.get("reference") or "")]
            for key in METRICS:
                est = row[key]
                cells += [_num(est["value"]), _num(est["ci"][0]), _num(est["ci"][1]),
                          _num(est["diff"]), _num(est["diff_ci"][0]), _num(est["diff_ci"][1])]
            cost = results["costs"].get(method_of.get(name, ""))
            cells += ([_num(cost["requests_per_question"]), cost["model_calls"],
                       cost["generated_tokens"], _num(cost["wall_seconds"]),
                       _num(cost["embed_seconds"]), _num(cost["scorer_seconds"])]
                      if cost else [""] * 6)
            writer.writerow(cells)
    return buffer.getvalue()


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)
