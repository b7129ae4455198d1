"""``veracity benchmark``: every registered trust signal on the same questions, the same greedy
answers and the same call budget, judged against one or several label sources; scored here
one chunk of questions at a time.

Methods are reached through the registry only (each declares a ``signal`` target, see
:class:`veracity.method.SignalFunction`), so this folder imports no other method folder. The
budget is K model calls per question: one shared greedy answer, then each method may ask
K − 1 more (γ: N = K − 1 perturbed answers; self-consistency and semantic entropy: M = K − 1
samples; P(True): one; logprob and length: none; FEWL: one pair call and the reference
answers, see its signal). Calls are counted at the clients while each method runs, and a
method that asks for more than its share is refused.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from veracity.client import request_key
from veracity.correctness import Labelled
from veracity.errors import ConfigError, DataError
from veracity.labels import LabelSource, label_items
from veracity.method import (
    Signal,
    SignalFunction,
    SignalRequest,
    SignalUnavailable,
    methods,
    signal_function,
)
from veracity.methods.benchmark.records import BenchmarkRecord, Cost, SignalInfo, Skipped
from veracity.methods.benchmark.settings import BenchmarkSettings
from veracity.runs.common import Context
from veracity.types import Generation, GenRequest, Item

__all__ = ["BenchmarkSettings", "Chunk", "Ledger", "chosen_methods", "greedy_answers",
           "score_chunk"]

GREEDY = "greedy answers"
"""The cost row of the shared greedy answers."""


def snapshot(ctx: Context) -> Cost:
    """The context's counters so far (wall_seconds: a clock reading); subtract two."""
    clients = list(ctx.clients.values())
    return Cost(sum(c.stats.requests for c in clients), sum(c.stats.model_calls for c in clients),
                sum(c.stats.completion_tokens for c in clients), time.perf_counter(),
                sum(e.stats.embed_seconds for e in ctx.embedders.values()),
                sum(s.stats.model_seconds for s in ctx.scorers.values()))


TOP_K = 5
"""Alternatives per token the shared greedy answers ask for (the logprob baseline's entropy)."""


def greedy_answers(items: Sequence[Item], model: str, ctx: Context, settings: BenchmarkSettings,
                   logprobs: bool = True) -> list[Generation | None]:
    """The one greedy answer per question every method shares (None where the model failed).

    Asked with token log-probabilities when the backend has them, so the logprob baseline
    needs no call of its own; but an answer the cache already holds without them (a γ or
    consistency run's) is taken as it is, so a benchmark after such a run makes no new greedy
    call (the logprob baseline then asks for its own, and is charged for it)."""
    client = ctx.client(model)
    plain = [GenRequest.user(i.question, settings.sampling) for i in items]
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


def signal_functions(names: Sequence[str]) -> list[tuple[str, SignalFunction]]:
    """Each chosen method's benchmark entry point, in registry order."""
    by_name = {m.name: m for m in methods()}
    found = [(name, signal_function(by_name[name])) for name in chosen_methods(names)]
    return [(name, function) for name, function in found if function is not None]


def incorrect_of(item: Item) -> list[str]:
    found = item.metadata.get("incorrect_answers") or item.metadata.get("incorrect") or []
    return [str(x) for x in found] if isinstance(found, list) else []


@dataclass(frozen=True)
class Chunk:
    """A chunk of questions to score: their greedy answers (None: the model failed) and, for
    a recorded file, their sampled answers and recorded labels."""

    items: Sequence[Item]
    answers: Sequence[Generation | None]
    samples: Sequence[tuple[str, ...]] | None = None
    given: Mapping[str, Sequence[bool | None]] | None = None
    """Labels recorded with the answers, by source."""


class Ledger:
    """What the chunks have cost and found so far, per method and per signal (what the
    summary needs beside the records); equal whatever the chunks, but for wall seconds."""

    def __init__(self, order: Sequence[str]) -> None:
        self.order = [GREEDY, *order]
        self.costs: dict[str, Cost] = {}
        self.signals: dict[str, SignalInfo] = {}
        self.scored: dict[str, int] = {}
        self.unavailable: dict[str, str] = {}
        """Each method that could not score some chunk: the first reason it gave."""

    def charge(self, method: str, cost: Cost) -> None:
        self.costs[method] = self.costs.get(method, Cost()) + cost

    def found(self, method: str, signal: Signal) -> None:
        self.scored[signal.name] = (self.scored.get(signal.name, 0)
                                    + sum(v is not None for v in signal.values))
        if signal.name not in self.signals:
            self.signals[signal.name] = SignalInfo(signal.name, method, signal.higher_is_better,
                                                   signal.baseline, dict(signal.settings))
        else:  # a count or size that grows with the questions: the largest of the chunks
            known = self.signals[signal.name]
            merged = {k: _larger(known.settings.get(k), v) for k, v in signal.settings.items()}
            self.signals[signal.name] = replace(known, settings=dict(known.settings) | merged)

    def ordered_costs(self) -> dict[str, Cost]:
        return {name: self.costs[name] for name in self.order if name in self.costs}

    def signal_infos(self) -> list[SignalInfo]:
        """Every signal that scored at least one answer, methods in registry order."""
        return [replace(s, n_scored=self.scored[s.name]) for s in self._by_method()
                if self.scored[s.name]]

    def skipped(self) -> list[Skipped]:
        out = []
        for method in self.order:
            mine = [s for s in self._by_method() if s.method == method]
            if method in self.unavailable and not any(self.scored[s.name] for s in mine):
                out.append(Skipped(method, self.unavailable[method]))
                continue
            out += [Skipped(s.name, "no question could be scored") for s in mine
                    if not self.scored[s.name]]
        return out

    def _by_method(self) -> list[SignalInfo]:
        rank = {name: k for k, name in enumerate(self.order)}
        return sorted(self.signals.values(), key=lambda s: rank.get(s.method, len(rank)))


def _larger(a: object, b: object) -> object:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return max(a, b)
    return a if a is not None else b


def score_chunk(chunk: Chunk, model: str | None, embedder: str, settings: BenchmarkSettings,
                ctx: Context, ledger: Ledger) -> list[BenchmarkRecord]:
    """Every chosen method's signals on one chunk's shared answers (each method's cost
    counted and its budget checked), every label source's labels: the chunk's records."""
    items = chunk.items
    request = SignalRequest(tuple(items), tuple(chunk.answers), settings.budget, model, embedder,
                            settings.sampling, settings.temperature, settings.seed,
                            tuple(chunk.samples) if chunk.samples is not None else None,
                            settings.entailment, settings.references)
    allowed = (settings.budget - 1) * len(items)
    values: dict[str, tuple[float | None, ...]] = {}
    for name, function in signal_functions(settings.methods):
        before = snapshot(ctx)
        try:
            found = function(ctx, request)
        except SignalUnavailable as exc:
            ledger.unavailable.setdefault(name, str(exc))
            continue
        cost = snapshot(ctx) - before
        if cost.requests > allowed:
            raise ConfigError(
                f"method '{name}' asked for {cost.requests} model calls on {len(items)} questions, "
                f"over its budget of {settings.budget - 1} per question: a method must split "
                "--budget as documented")
        for signal in found:
            if len(signal.values) != len(items):
                raise DataError(f"method '{name}' gave {len(signal.values)} values for "
                                f"{len(items)} questions")
            ledger.found(name, signal)
            values[signal.name] = signal.values
        ledger.charge(name, cost)
    texts = [a.text.strip() if a is not None else "" for a in chunk.answers]
    labels = chunk_labels(chunk, texts, settings, ctx, embedder)
    return [BenchmarkRecord(
        item.id, item.question, texts[k],
        {name: v[k] for name, v in values.items() if v[k] is not None},
        {source: found[k] for source, found in labels.items()},
        tuple(item.references), tuple(incorrect_of(item)),
        chunk.samples[k] if chunk.samples is not None else ())
        for k, item in enumerate(items)]


def chunk_labels(chunk: Chunk, texts: Sequence[str], settings: BenchmarkSettings, ctx: Context,
                 embedder: str) -> dict[str, Sequence[bool | None]]:
    """Each source's label of each answer: the recorded labels first, then every --labels
    source (the ones a recorded file already holds are taken from it)."""
    given = dict(chunk.given or {})
    labelled = [Labelled(item.question, answer, tuple(item.references),
                         tuple(incorrect_of(item)))
                for item, answer in zip(chunk.items, texts, strict=True)]
    ids = [item.id for item in chunk.items]
    out = dict(given)
    for text in settings.labels:
        if text in given:
            continue
        source = LabelSource.parse(text)
        out[source.name] = label_items(source, ids, labelled, ctx, embedder)
    return out
