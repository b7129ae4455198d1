"""``veracity benchmark``: every registered trust signal on the same questions, the same greedy
answers and the same call budget, judged against one or several label sources.

Methods are reached through the registry only (each declares a ``signal`` target, see
:class:`veracity.method.SignalFunction`), so this folder imports no other method folder. The
budget is K model calls per question: one shared greedy answer, then each method may ask
K − 1 more (γ: N = K − 1 perturbed answers; self-consistency and semantic entropy: M = K − 1
samples; P(True): one; logprob and length: none). Calls are counted at the clients while each
method runs, and a method that asks for more than its share is refused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from veracity.client import request_key
from veracity.correctness import Labelled
from veracity.errors import ConfigError, DataError
from veracity.labels import LabelSource, disagreement, label_items
from veracity.method import (
    Signal,
    SignalRequest,
    SignalUnavailable,
    methods,
    signal_function,
)
from veracity.methods.benchmark.records import BenchmarkRecord
from veracity.metrics import CALIBRATORS, METRICS, fused_scores, metric_table, reliability, risk_coverage
from veracity.runs.common import Context
from veracity.types import Generation, GenRequest, Item, Sampling

FUSED = "fused"
DISAGREE = 0.10
"""Label sources that disagree on more than this share of items get a warning."""


@dataclass(frozen=True)
class BenchmarkSettings:
    """How the benchmark runs; every field is recorded in benchmark.json."""

    budget: int = 11
    """K model calls per question, the shared greedy answer included."""
    labels: tuple[str, ...] = ("contains",)
    methods: tuple[str, ...] = ()
    """Methods to run (empty = every method that declares a signal)."""
    temperature: float = 0.7
    max_tokens: int = 64
    seed: int = 0
    folds: int = 5
    resamples: int = 2000
    level: float = 0.95
    entailment: str | None = None

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ConfigError("--budget must be at least 1 (the greedy answer)")
        if not self.labels:
            raise ConfigError("give at least one label source (--labels)")
        for text in self.labels:
            LabelSource.parse(text)
        if self.folds < 2:
            raise ConfigError("--folds must be at least 2")

    @property
    def sampling(self) -> Sampling:
        """The greedy answers' decoding: a γ run's centre answers use the same (cache hits)."""
        return Sampling(temperature=0.0, max_tokens=self.max_tokens)


@dataclass
class Cost:
    """What one method spent on this run (counted at the clients while it ran)."""

    requests: int = 0
    """Generation requests it made (cached or not): what the budget counts."""
    model_calls: int = 0
    """Requests the model actually answered (not from the cache)."""
    generated_tokens: int = 0
    wall_seconds: float = 0.0
    embed_seconds: float = 0.0
    scorer_seconds: float = 0.0
    """NLI / cross-encoder time."""

    def per_question(self, n: int) -> float:
        return self.requests / n if n else math.nan


@dataclass(frozen=True)
class Skipped:
    method: str
    reason: str


@dataclass
class Benchmark:
    """Everything the tables are made from, per item and per signal."""

    items: list[Item]
    answers: list[str]
    signals: list[Signal]
    costs: dict[str, Cost]
    skipped: list[Skipped]
    labels: dict[str, list[bool | None]] = field(default_factory=dict)
    samples: list[tuple[str, ...]] | None = None
    origin: dict[str, str] = field(default_factory=dict)
    """The method each signal came from."""

    def records(self) -> list[BenchmarkRecord]:
        return [BenchmarkRecord(
            item.id, item.question, answer,
            {s.name: s.values[k] for s in self.signals},
            {name: found[k] for name, found in self.labels.items()},
            tuple(item.references), tuple(_incorrect(item)),
            self.samples[k] if self.samples is not None else ())
            for k, (item, answer) in enumerate(zip(self.items, self.answers, strict=True))]


def _incorrect(item: Item) -> list[str]:
    found = item.metadata.get("incorrect_answers") or item.metadata.get("incorrect") or []
    return [str(x) for x in found] if isinstance(found, list) else []


def snapshot(ctx: Context) -> Cost:
    """The context's counters so far (wall_seconds: a clock reading); see :func:`spent`."""
    clients = list(ctx.clients.values())
    return Cost(sum(c.stats.requests for c in clients), sum(c.stats.model_calls for c in clients),
                sum(c.stats.completion_tokens for c in clients), time.perf_counter(),
                sum(e.stats.embed_seconds for e in ctx.embedders.values()),
                sum(s.stats.model_seconds for s in ctx.scorers.values()))


def spent(before: Cost, after: Cost) -> Cost:
    """What was spent between two snapshots."""
    return Cost(after.requests - before.requests, after.model_calls - before.model_calls,
                after.generated_tokens - before.generated_tokens,
                after.wall_seconds - before.wall_seconds,
                after.embed_seconds - before.embed_seconds,
                after.scorer_seconds - before.scorer_seconds)


TOP_K = 5
"""Alternatives per token the shared greedy answers ask for (the logprob baseline's entropy)."""


def greedy_answers(items: Sequence[Item], model: str, ctx: Context, sampling: Sampling,
                   logprobs: bool = True) -> list[Generation | None]:
    """The one greedy answer per question every method shares (None where the model failed).

    Asked with token log-probabilities when the backend has them, so the logprob baseline
    needs no call of its own; but an answer the cache already holds without them (a γ or
    consistency run's) is taken as it is, so a benchmark after such a run makes no new greedy
    call (the logprob baseline then asks for its own, and is charged for it)."""
    client = ctx.client(model)
    plain = [GenRequest.user(i.question, sampling) for i in items]
    requests = plain
    if logprobs and client.backend.capabilities.logprobs:
        rich = [replace(r, logprobs=TOP_K) for r in plain]
        requests = rich
        if ctx.cache is not None:
            identity = client.identity()
            keys = [request_key(client.spec, identity, r) for r in (*plain, *rich)]
            held = ctx.cache.get_json(keys)
            n = len(plain)
            requests = [plain[k] if keys[k] in held and keys[n + k] not in held else rich[k]
                        for k in range(n)]
    replies = client.generate_each(requests, stage="benchmark: greedy answers")
    return [r if isinstance(r, Generation) else None for r in replies]


def chosen_methods(names: Sequence[str]) -> list[str]:
    """Registered methods with a benchmark signal, in registry order (or the ones named)."""
    known = [m.name for m in methods() if getattr(m, "signal", "")]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--methods: {', '.join(unknown)} cannot be benchmarked; choose from "
                          f"{', '.join(known)}")
    return [n for n in known if not names or n in names]


def run_signals(items: Sequence[Item], answers: Sequence[Generation | None], model: str | None,
                embedder: str, settings: BenchmarkSettings, ctx: Context,
                samples: Sequence[tuple[str, ...]] | None = None,
                greedy_cost: Cost | None = None) -> Benchmark:
    """Every chosen method's signals on the shared answers, each method's cost counted."""
    request = SignalRequest(tuple(items), tuple(answers), settings.budget, model, embedder,
                            settings.sampling, settings.temperature, settings.seed,
                            tuple(samples) if samples is not None else None,
                            settings.entailment)
    by_name = {m.name: m for m in methods()}
    signals: list[Signal] = []
    costs: dict[str, Cost] = {"greedy answers": greedy_cost or Cost()}
    skipped: list[Skipped] = []
    origin: dict[str, str] = {}
    allowed = (settings.budget - 1) * len(items)
    for name in chosen_methods(settings.methods):
        function = signal_function(by_name[name])
        if function is None:
            continue
        before = snapshot(ctx)
        try:
            found = function(ctx, request)
        except SignalUnavailable as exc:
            skipped.append(Skipped(name, str(exc)))
            continue
        cost = spent(before, snapshot(ctx))
        if cost.requests > allowed:
            raise ConfigError(
                f"method '{name}' asked for {cost.requests} model calls on {len(items)} questions, "
                f"over its budget of {settings.budget - 1} per question: a method must split "
                "--budget as documented")
        for signal in found:
            if len(signal.values) != len(items):
                raise DataError(f"method '{name}' gave {len(signal.values)} values for "
                                f"{len(items)} questions")
        for signal in [s for s in found if all(v is None for v in s.values)]:
            skipped.append(Skipped(signal.name, "no question could be scored"))
            found.remove(signal)
        signals.extend(found)
        origin.update({s.name: name for s in found})
        costs[name] = cost
    texts = [a.text.strip() if a is not None else "" for a in answers]
    return Benchmark(list(items), texts, signals, costs, skipped,
                     samples=list(samples) if samples is not None else None, origin=origin)


def add_labels(bench: Benchmark, sources: Sequence[str], ctx: Context, embedder: str,
               given: dict[str, list[bool | None]] | None = None) -> None:
    """Each source's label of each answer (``given``: labels recorded with the answers)."""
    labelled = [Labelled(item.question, answer, tuple(item.references), tuple(_incorrect(item)))
                for item, answer in zip(bench.items, bench.answers, strict=True)]
    ids = [item.id for item in bench.items]
    for name, found in (given or {}).items():
        bench.labels[name] = found
    for text in sources:
        source = LabelSource.parse(text)
        bench.labels[source.name] = label_items(source, ids, labelled, ctx, embedder)


def _risk(signal: Signal, keep: Sequence[int]) -> np.ndarray:
    values = np.array([signal.values[k] for k in keep], dtype=np.float64)
    return -values if signal.higher_is_better else values


def tables(bench: Benchmark, settings: BenchmarkSettings) -> dict[str, Any]:
    """One table per label source (items every signal scored and the source labelled), with
    the fused row, curves and each source's agreement with the others."""
    out: dict[str, Any] = {}
    baselines = [s.name for s in bench.signals if s.baseline]
    for source, found in bench.labels.items():
        keep = [k for k in range(len(bench.items)) if found[k] is not None
                and all(s.values[k] is not None and math.isfinite(float(s.values[k] or 0))
                        for s in bench.signals)]
        y = np.array([1.0 if found[k] else 0.0 for k in keep])
        entry: dict[str, Any] = {"n_items": len(bench.items), "n": len(keep),
                                 "n_wrong": int((y == 0).sum()), "accuracy":
                                 float(y.mean()) if y.size else None}
        if not bench.signals or y.size < settings.folds or y.min(initial=1) == y.max(initial=0):
            entry["problem"] = ("needs both right and wrong answers on at least "
                                f"{settings.folds} scored items")
            out[source] = entry
            continue
        scores = {s.name: _risk(s, keep) for s in bench.signals}
        if len(scores) > 1:
            scores[FUSED] = fused_scores(scores, y, settings.folds, settings.seed)
        table = metric_table(scores, y, baselines, settings.resamples, settings.folds,
                             settings.seed, settings.level)
        entry["reference"] = table.reference
        entry["metrics"] = {name: {key: _plain(est.value) for key, est in row.items()}
                            for name, row in table.rows.items()}
        entry["intervals"] = {name: {key: est.to_json() for key, est in row.items()}
                              for name, row in table.rows.items()}
        entry["curves"] = {name: [float(r) for r in risk_coverage(u, y)[1]]
                           for name, u in scores.items()}
        entry["reliability"] = {name: {how: reliability(table.calibrated[name][how], y)
                                       for how in CALIBRATORS} for name in scores}
        entry["order"] = sorted(table.rows, key=lambda n: -_value(table.rows[n]["auroc"].value))
        out[source] = entry
    return out


def _plain(v: float) -> float | None:
    return None if math.isnan(v) else v


def _value(v: float) -> float:
    return -math.inf if math.isnan(v) else v


def warnings_of(bench: Benchmark, found: dict[str, Any]) -> list[str]:
    """Label sources that disagree on more than 10 % of items, or rank the signals differently."""
    notes = []
    names = list(bench.labels)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both, differ = disagreement(bench.labels[a], bench.labels[b])
            if both and differ / both > DISAGREE:
                notes.append(f"label sources {a} and {b} disagree on {differ} of {both} answers "
                             f"({differ / both:.0%}): the verdict depends on the label rule")
    orders = {s: [n for n in e["order"] if n != FUSED] for s, e in found.items() if "order" in e}
    first = next(iter(orders.items()), None)
    if first is not None:
        for source, order in orders.items():
            if order != first[1]:
                notes.append(f"the methods' order by AUROC under {source} ({', '.join(order)}) "
                             f"differs from under {first[0]} ({', '.join(first[1])})")
    return notes


def summary(bench: Benchmark, settings: BenchmarkSettings, model: str | None, embedder: str,
            dataset: str) -> dict[str, Any]:
    """benchmark.json / results.json: settings, signals, costs, one table per label source."""
    found = tables(bench, settings)
    n = len(bench.items)
    return {
        "method": "benchmark", "model": model, "embedder": embedder, "dataset": dataset,
        "n_items": n, "settings": asdict(settings) | {"labels": list(settings.labels)},
        "metrics": list(METRICS),
        "signals": [{"name": s.name, "method": bench.origin.get(s.name, s.name),
                     "higher_is_better": s.higher_is_better,
                     "baseline": s.baseline, "settings": s.settings,
                     "n_scored": sum(v is not None for v in s.values)} for s in bench.signals],
        "skipped": [asdict(s) for s in bench.skipped],
        "costs": {name: asdict(c) | {"requests_per_question": c.per_question(n)}
                  for name, c in bench.costs.items()},
        "tables": found,
        "warnings": warnings_of(bench, found),
    }


def winner(entry: dict[str, Any]) -> str | None:
    """The single signal of highest AUROC in one table (fused left out), or None."""
    order = [n for n in entry.get("order", []) if n != FUSED]
    return order[0] if order else None
