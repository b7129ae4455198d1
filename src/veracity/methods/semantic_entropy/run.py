"""A semantic-entropy run: M answers sampled per question, clustered by meaning, and the
entropy over the clusters; or recorded samples (no model but the entailment check)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.backends.base import require
from veracity.backends.logprobs import parse_tokens
from veracity.data.jsonl import read_objects
from veracity.errors import BackendError, DataError
from veracity.methods.semantic_entropy.core import (
    Same,
    SemanticEntropySettings,
    cluster_batches,
    discrete_entropy,
    likelihood_entropy,
)
from veracity.methods.semantic_entropy.entail import entailment
from veracity.methods.semantic_entropy.records import SemanticEntropyRecord, SemanticEntropySummary
from veracity.records import Mean
from veracity.runs.common import Context
from veracity.runs.driver import Finish, Kept, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.stats import Histogram
from veracity.streaming import MomentSums, chunks
from veracity.types import Generation, GenRequest, Item, Sampling

CHUNK = 64
"""Questions per chunk of a run written to a directory (M samples each)."""


@dataclass(frozen=True)
class Sampled:
    """One sampled answer and its mean token log-probability (None: none returned)."""

    text: str
    mean_logprob: float | None = None


def _sampled(reply: Generation | BackendError) -> Sampled | None:
    """A usable sample; None for a failed or empty one (never clustered)."""
    if isinstance(reply, BackendError) or not reply.text.strip():
        return None
    tokens = reply.logprobs
    mean = math.fsum(t.logprob for t in tokens) / len(tokens) if tokens else None
    return Sampled(reply.text.strip(), mean)


def wants_logprobs(settings: SemanticEntropySettings, ctx: Context, model: str) -> bool:
    """Whether the samples are asked for log-probabilities: for the likelihood form, where
    the backend returns them (``form=likelihood`` fails at once where it cannot)."""
    backend = ctx.client(model).backend
    if settings.form == "likelihood":
        require(backend, "logprobs", "the likelihood form of semantic entropy")
    return settings.form != "discrete" and backend.capabilities.logprobs


def sample_answers(items: Sequence[Item], model: str, settings: SemanticEntropySettings,
                   ctx: Context) -> list[list[Sampled]]:
    """M answers per question at the settings' temperature (failed / empty ones dropped)."""
    logprobs = wants_logprobs(settings, ctx, model)
    requests = [settings.sample_request(i.question, k, logprobs)
                for i in items for k in range(1, settings.m + 1)]
    replies = ctx.client(model).generate_each(requests, stage="semantic entropy: samples")
    m = settings.m
    return [[s for r in replies[q * m : (q + 1) * m] if (s := _sampled(r)) is not None]
            for q in range(len(items))]


def score_samples(items: Sequence[Item], answers: Sequence[str],
                  samples: Sequence[Sequence[Sampled]], settings: SemanticEntropySettings,
                  same: Same, described: str, model: str) -> list[SemanticEntropyRecord]:
    """Cluster each question's samples (one batched check per round across questions) and
    score them."""
    usable = [q for q, s in enumerate(samples) if len(s) >= 2]
    found = cluster_batches([items[q].question for q in usable],
                            [[s.text for s in samples[q]] for q in usable], same)
    clusters = dict(zip(usable, found, strict=True))
    out = []
    for q, (item, answer, group) in enumerate(zip(items, answers, samples, strict=True)):
        record = SemanticEntropyRecord(
            item.id, item.question, answer, None, samples=tuple(s.text for s in group),
            sample_logprobs=tuple(s.mean_logprob for s in group), m=settings.m,
            temperature=settings.temperature, entailment=described, model=model,
            references=item.references)
        if not answer:
            out.append(replace(record, error="no greedy answer to judge"))
            continue
        if q not in clusters:
            out.append(replace(record, error=f"{len(group)} usable samples of {settings.m}: "
                                             "at least 2 are needed"))
            continue
        ids = clusters[q]
        discrete = discrete_entropy(ids)
        means = [s.mean_logprob for s in group]
        weighted = None if any(v is None for v in means) else likelihood_entropy(
            ids, [float(v) for v in means if v is not None])
        form = "likelihood" if settings.form != "discrete" and weighted is not None \
            else "discrete"
        out.append(replace(record, score=weighted if form == "likelihood" else discrete,
                           form=form, discrete=discrete, likelihood=weighted,
                           n_clusters=len(set(ids)), clusters=tuple(ids)))
    return out


def score_greedy(items: Sequence[Item], greedy: Sequence[Generation | BackendError],
                 settings: SemanticEntropySettings, ctx: Context, model: str,
                 embedder: str = "st/default") -> list[SemanticEntropyRecord]:
    """Semantic entropy beside given greedy answers: M samples per question from ``model``
    (its calls), clustered with the settings' check (``embedder`` for the default one)."""
    if len(greedy) != len(items):
        raise DataError(f"{len(items)} questions but {len(greedy)} greedy answers")
    same, described = entailment(settings, embedder, ctx)
    answers = ["" if isinstance(g, BackendError) else g.text.strip() for g in greedy]
    return score_samples(items, answers, sample_answers(items, model, settings, ctx), settings,
                         same, described, model)


def score_items(items: Sequence[Item], model: str, embedder: str,
                settings: SemanticEntropySettings, ctx: Context) -> list[SemanticEntropyRecord]:
    """The greedy answer and M samples of each question, scored."""
    plain = Sampling(temperature=0.0, max_tokens=settings.max_tokens)
    greedy = ctx.client(model).generate_each([GenRequest.user(i.question, plain) for i in items],
                                             stage="semantic entropy: greedy answers")
    return score_greedy(items, greedy, settings, ctx, model, embedder)


def _mean(values: npt.NDArray[np.float64]) -> Mean:
    moments = MomentSums()
    moments.add(values)
    mean, stderr = moments.mean_stderr()
    return Mean(mean, stderr, int(values.size))


def summarise(records: Sequence[SemanticEntropyRecord], model: str = "", embedder: str = "",
              dataset: str = "", settings: SemanticEntropySettings | None = None,
              ) -> SemanticEntropySummary:
    """Mean entropy ± s.e. (of each form), clusters per question, and the histogram."""
    scored = [r for r in records if r.score is not None]
    means = {name: _mean(np.asarray([float(v) for r in scored
                                     if (v := getattr(r, name)) is not None]))
             for name in ("score", "discrete", "likelihood", "n_clusters")}
    values = np.asarray([r.score for r in scored], dtype=np.float64)
    top = max(float(values.max()) if values.size else 1.0, 1e-9)
    counts, edges = np.histogram(values, bins=20, range=(0.0, top))
    return SemanticEntropySummary(
        model, embedder, dataset, (settings or SemanticEntropySettings()).describe(),
        len(records), len(scored), len(records) - len(scored),
        {f: sum(r.form == f for r in scored) for f in ("discrete", "likelihood")},
        means["score"].mean, means["score"].stderr, means["discrete"], means["likelihood"],
        means["n_clusters"], Histogram(tuple(float(e) for e in edges),
                                       tuple(int(c) for c in counts)))


def run_semantic_entropy(items: Sequence[Item], model: str, embedder: str,
                         settings: SemanticEntropySettings, ctx: Context, out: Path | None,
                         dataset: str) -> RunResult[SemanticEntropyRecord, SemanticEntropySummary]:
    """Score every question; with ``out``, chunk by chunk into that run directory."""
    if not items:
        raise DataError("no questions to score")
    wants_logprobs(settings, ctx, model)  # form=likelihood fails before any call
    return _written(items, lambda chunk: score_items(chunk, model, embedder, settings, ctx),
                    settings, out, ctx, model, embedder, dataset)


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{where}: expected a list of strings")
    return value


def read_recorded(path: Path) -> Iterator[tuple[Item, str, list[Sampled]]]:
    """Recorded samples: JSONL with ``prompt``, ``answer`` (the greedy one) and ``samples``
    per line; optional ``sample_logprobs`` (per sample, its tokens in the ``logprobs`` shape
    or its mean token log-probability), ``id``, ``references``."""
    for number, row in read_objects(path, "recorded file"):
        where = f"{path}, line {number}"
        for name in ("prompt", "answer"):
            if not isinstance(row.get(name), str):
                raise DataError(f"{where}: field '{name}' must be a string")
        texts = _strings(row.get("samples"), f"{where}, 'samples'")
        given = row.get("sample_logprobs")
        means: list[float | None] = [None] * len(texts)
        if given is not None:
            if not isinstance(given, list) or len(given) != len(texts):
                raise DataError(f"{where}, 'sample_logprobs': one entry per sample")
            for k, entry in enumerate(given):
                if isinstance(entry, int | float) and not isinstance(entry, bool):
                    means[k] = float(entry)
                else:
                    tokens = parse_tokens(entry, f"{where}, 'sample_logprobs' {k + 1}")
                    means[k] = math.fsum(t.logprob for t in tokens) / len(tokens) \
                        if tokens else None
        refs = _strings(row.get("references") or [], f"{where}, 'references'")
        item = Item(str(row.get("id", f"line-{number}")), row["prompt"], tuple(refs))
        yield item, row["answer"].strip(), [Sampled(t.strip(), v) for t, v in zip(
            texts, means, strict=True) if t.strip()]


def run_recorded(path: Path, embedder: str, settings: SemanticEntropySettings, ctx: Context,
                 out: Path | None) -> RunResult[SemanticEntropyRecord, SemanticEntropySummary]:
    """Score recorded samples: no model call except the entailment check's."""
    rows = {item.id: (item, answer, group) for item, answer, group in read_recorded(path)}
    if not rows:
        raise DataError(f"{path}: no records")
    same, described = entailment(settings, embedder, ctx)

    def score(chunk: Sequence[Item]) -> list[SemanticEntropyRecord]:
        return score_samples(chunk, [rows[i.id][1] for i in chunk],
                             [rows[i.id][2] for i in chunk], settings, same, described,
                             "recorded")

    return _written([r[0] for r in rows.values()], score, settings, out, ctx, "recorded",
                    embedder, f"recorded:{path}")


def _written(items: Sequence[Item],
             score: Callable[[Sequence[Item]], list[SemanticEntropyRecord]],
             settings: SemanticEntropySettings, out: Path | None, ctx: Context, model: str,
             embedder: str, dataset: str) -> RunResult[SemanticEntropyRecord, SemanticEntropySummary]:
    check_target(out)
    config = {"model": model, "embedder": embedder, "dataset": dataset,
              "settings": settings.describe()}
    kept: Kept[SemanticEntropyRecord] = Kept()

    def finish() -> Finish[SemanticEntropySummary]:
        return Finish(summarise(kept, model, embedder, dataset, settings), stats=ctx.stats())

    return drive(out, RunPlan("semantic-entropy", SemanticEntropyRecord, config, ctx.started),
                 (score(chunk) for chunk in chunks(items, CHUNK)), [kept], finish)
