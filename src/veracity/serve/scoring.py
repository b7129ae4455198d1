"""Scoring one exchange on the event loop: perturbed calls, cache, embedding, gamma, verdict.

The perturbed prompts of one answer go out together (concurrent requests on the gateway's
own async client, sent with the request for the answer since they do not depend on it; one
batch on an in-process model, after the answer), after a cache lookup; only real answers
are cached. Their embeddings join those of all
concurrent scores in one batch (:class:`~veracity.serve.embedding.EmbedWorker`). Gamma and the
verdict are the project's own (:mod:`veracity.methods.gamma.core`,
:mod:`veracity.methods.gamma.calibration.trust`).
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from veracity.cache import Cache
from veracity.client import request_key
from veracity.embed.base import Embedder
from veracity.errors import ConfigError, VeracityError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.calibration.trust import UNDEFINED, TrustScore
from veracity.methods.gamma.core import check_prompt, gamma_from_embeddings
from veracity.perturb import perturb
from veracity.serve.cacheio import CacheIO
from veracity.serve.embedding import EmbedWorker
from veracity.serve.local import ROLES, request_sampling
from veracity.serve.settings import GatewaySettings
from veracity.serve.upstream import Upstream
from veracity.serve.verdicts import Thresholds, ThresholdSource
from veracity.serve.wire import ChatRequest
from veracity.types import Generation, GenRequest, Message, Sampling

SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop",
                   "presence_penalty", "frequency_penalty", "n")


class ScoringError(VeracityError):
    """This exchange cannot be scored; the answer is still returned."""


@dataclass(frozen=True)
class Exchange:
    """What a score is computed from: the request as sent and the answer returned."""

    id: str
    model: str
    body: ChatRequest
    answer: str | None

    def split(self) -> tuple[tuple[Message, ...], str]:
        """(turns before the prompt, the prompt): the last message must be a user's text."""
        messages = self.body.get("messages") or []
        turns = []
        for m in messages:
            role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (None, None)
            if role not in ROLES or not isinstance(content, str):
                raise ScoringError("only text messages (system, user, assistant) can be scored")
            turns.append(Message(role, content))
        if not turns or turns[-1].role != "user":
            raise ScoringError("the last message must be the user's prompt to be scored")
        return tuple(turns[:-1]), turns[-1].content

    def prompt(self) -> str:
        try:
            return self.split()[1]
        except ScoringError:
            return ""

    def sampling(self) -> dict[str, object]:
        """The sampling fields the request named, as it named them."""
        return {k: self.body.get(k) for k in SAMPLING_FIELDS if k in self.body}


@dataclass(frozen=True)
class Perturbed:
    """The perturbed answers, the calls sent for them (not cached) and how long they took."""

    answers: list[str]
    calls: int
    ms: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    """Tokens of the calls sent (the upstream's usage; 0 when it reports none)."""


@dataclass(frozen=True)
class Plan:
    """What is asked for a score: the perturbed prompts, their sampling, their requests."""

    prompt: str
    ball: list[str]
    sampling: Sampling
    requests: list[GenRequest]


@dataclass(frozen=True)
class Started:
    """Perturbed calls sent before the answer arrived, and their plan."""

    plan: Plan
    task: asyncio.Task[Perturbed]


def discard(started: Started | None) -> None:
    """Cancel perturbed calls whose answer will never be scored (the upstream failed, the
    client left); a failure they already met is read, so asyncio does not report it."""
    if started is None:
        return
    task = started.task
    if task.done():
        if not task.cancelled():
            task.exception()
    else:
        task.cancel()


class Scorer:
    """Turns an exchange into the ``veracity`` object of the response."""

    def __init__(self, settings: GatewaySettings, upstream: Upstream, embedder: Embedder,
                 cache: Cache | None, thresholds: ThresholdSource) -> None:
        self.settings = settings
        self.upstream = upstream
        self.thresholds = thresholds
        self.io = CacheIO(cache)
        self.embedder = EmbedWorker(embedder, cache, self.io)

    def start(self) -> None:
        self.io.start()
        self.embedder.start()

    def on(self, upstream: Upstream) -> Scorer:
        """This scorer (its cache, embedder and thresholds) asking another upstream for the
        perturbed answers: a policy's stronger model. Started and closed with this one."""
        other = copy.copy(self)
        other.upstream = upstream
        return other

    async def aclose(self) -> None:
        """Stop the embedder; write what the cache still has queued."""
        await self.embedder.aclose()
        await self.io.aclose()

    def thresholds_for(self, model: str) -> Thresholds:
        """The verdict thresholds (and calibration) for requests naming ``model``; a
        ConfigError when the calibration was made for another setup and is not forced."""
        spec, _ = self.upstream.scoring_key(model)
        return self.thresholds.lookup(spec, self.embedder.spec, self.settings.form)

    def sampling(self, exchange: Exchange) -> Sampling:
        """The perturbed calls' sampling: the configured temperature, the request's token budget."""
        s = self.settings
        try:
            asked = request_sampling(exchange.body, s.max_tokens, s.temperature)
        except VeracityError as exc:
            raise ScoringError(str(exc)) from None
        return Sampling(temperature=s.temperature, max_tokens=asked.max_tokens, seed=s.seed)

    def plan(self, exchange: Exchange) -> Plan:
        """The perturbed prompts and requests; a VeracityError when the request cannot be
        scored. Needs the request only, not the answer."""
        context, prompt = exchange.split()
        check_prompt(prompt, "the prompt to score")
        sampling = self.sampling(exchange)
        ball = perturb(prompt, self.settings.n, self.settings.ball, self.settings.seed)
        return Plan(prompt, ball, sampling,
                    [GenRequest((*context, Message("user", p)), sampling) for p in ball])

    def start_perturbed(self, exchange: Exchange) -> Started | None:
        """The perturbed calls, started before the answer has arrived (they depend on the
        request only), when the upstream takes concurrent requests and the request can be
        scored; None otherwise (:meth:`score` then makes them after the answer)."""
        if not getattr(self.upstream, "overlaps_answer", False):  # an upstream written before it
            return None
        try:
            self.thresholds_for(exchange.model)
            plan = self.plan(exchange)
        except VeracityError:
            return None  # score() reports it
        return Started(plan, asyncio.create_task(self.generate(exchange.model, plan.requests)))

    async def score(self, exchange: Exchange, started: Started | None = None) -> TrustScore:
        """The exchange's score; scoring failures are reported in it, never raised.
        ``started``: the perturbed calls of :meth:`start_perturbed`, if they were started."""
        began = time.perf_counter()
        timings: dict[str, float] = {}
        try:
            thresholds = self.thresholds_for(exchange.model)
        except ConfigError as exc:
            score = replace(self.describe(exchange, None), error=str(exc),
                            error_kind="calibration")
            return _timed(score, timings, began)
        score = self.describe(exchange, thresholds)
        try:
            if not exchange.answer or not exchange.answer.strip():
                raise ScoringError("no text answer to score")
            plan = started.plan if started is not None else self.plan(exchange)
            perturbed_sampling = {**score.sampling["perturbed"],
                                  "max_tokens": plan.sampling.max_tokens}
            score = replace(score, prompt=plan.prompt, perturbed_prompts=tuple(plan.ball),
                            sampling={**score.sampling, "perturbed": perturbed_sampling})
            # made after the answer: it is the draft a decode=draft model verifies
            drafted = [replace(r, draft=exchange.answer) for r in plan.requests]
            perturbed = await (started.task if started is not None
                               else self.generate(exchange.model, drafted))
            score = replace(score, model_calls=perturbed.calls,
                            perturbed_answers=tuple(perturbed.answers),
                            tokens={"prompt": perturbed.prompt_tokens,
                                    "completion": perturbed.completion_tokens})
            timings["generation_ms"] = perturbed.ms
            generated = time.perf_counter()
            vectors = await self.embedder.embed([exchange.answer.strip(), *perturbed.answers])
            timings["embedding_ms"] = 1000 * (time.perf_counter() - generated)
        except VeracityError as exc:
            score = replace(score, error=str(exc), error_kind="scoring")
        else:
            gamma = gamma_from_embeddings(vectors[0], vectors[1:], self.settings.form)
            score = judge(score, None if math.isnan(gamma) else gamma, thresholds)
        return _timed(score, timings, began)

    async def generate(self, model: str, requests: list[GenRequest]) -> Perturbed:
        """The perturbed answers (cached ones reused) and the number of calls sent."""
        began = time.perf_counter()
        spec, identity = self.upstream.scoring_key(model)
        keys = [request_key(spec, identity, r) for r in requests]
        found = self.io.generations(keys)
        todo = {k: r for k, r in zip(keys, requests, strict=True) if k not in found}
        outcomes = await self.upstream.perturbed(model, list(todo.values())) if todo else []
        fresh: dict[str, Generation] = {}
        failures = []
        for key, outcome in zip(todo, outcomes, strict=True):
            if not isinstance(outcome, Generation):
                failures.append(str(outcome))
            elif not outcome.text.strip():
                failures.append("the upstream answered a perturbed prompt with no text")
            else:
                fresh[key] = outcome
        self.io.save_generations(spec, fresh)  # real answers only: never an error or empty reply
        if failures:
            raise ScoringError(f"{len(failures)} of {len(requests)} perturbed calls failed: {failures[0]}")
        found.update(fresh)
        return Perturbed([found[k].text.strip() for k in keys], len(todo),
                         1000 * (time.perf_counter() - began),
                         sum(g.prompt_tokens for g in fresh.values()),
                         sum(g.completion_tokens for g in fresh.values()))

    def describe(self, exchange: Exchange, thresholds: Thresholds | None) -> TrustScore:
        """The score's settings, before any result: what is compared and how."""
        s = self.settings
        return TrustScore(
            gamma=None, verdict="unscored",
            thresholds=None if thresholds is None else (thresholds.low, thresholds.high),
            threshold_source=None if thresholds is None else thresholds.source,
            calibration=None if thresholds is None else thresholds.calibration,
            form=s.form, prompt=exchange.prompt(), answer=exchange.answer or "",
            answer_reused=True, perturbed_prompts=(), perturbed_answers=(),
            model=exchange.model, embedder=self.embedder.spec, n=s.n, ball=s.ball, seed=s.seed,
            seconds=0.0, model_calls=0, id=exchange.id,
            sampling={"answer": exchange.sampling(),
                      "perturbed": {"temperature": s.temperature, "seed": s.seed}},
        )


def _timed(score: TrustScore, timings: dict[str, float], began: float) -> TrustScore:
    seconds = time.perf_counter() - began
    return replace(score, seconds=seconds, timings={**timings, "scoring_ms": 1000 * seconds})


def score_json(score: TrustScore) -> JsonObject:
    """The ``veracity`` object of a response: the score in the gateway's wire format."""
    return {
        "id": score.id, "gamma": score.gamma, "verdict": score.verdict,
        "thresholds": None if score.thresholds is None else {
            "low": score.thresholds[0], "high": score.thresholds[1],
            "source": score.threshold_source},
        "p_correct": score.p_correct,
        "p_correct_band": None if score.p_correct_band is None else list(score.p_correct_band),
        "calibration": score.calibration,
        "form": score.form, "n": score.n, "ball": score.ball, "seed": score.seed,
        "model": score.model, "embedder": score.embedder,
        "sampling": {k: dict(v) for k, v in score.sampling.items()},
        "perturbed_edits": [edit(score.prompt, p).to_json() for p in score.perturbed_prompts],
        "perturbed_answers": list(score.perturbed_answers), "model_calls": score.model_calls,
        "tokens": dict(score.tokens),
        "timings": dict(score.timings), "error": score.error, "error_kind": score.error_kind,
        "decision": score.decision, "decision_reason": score.decision_reason,
    }


def _common(a: str, b: str, backwards: bool = False) -> int:
    """Length of the longest common prefix (suffix) of ``a`` and ``b``: a binary search of
    slice comparisons, each done in C (a character loop costs seconds on a long prompt)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        same = a[len(a) - mid:] == b[len(b) - mid:] if backwards else a[:mid] == b[:mid]
        low, high = (mid, high) if same else (low, mid - 1)
    return low


@dataclass(frozen=True)
class Edit:
    """A perturbed prompt as one edit of the prompt (:func:`edit`), as a score carries it."""

    at: int
    cut: int
    insert: str

    def to_json(self) -> JsonObject:
        return {"at": self.at, "cut": self.cut, "insert": self.insert}


def edit(prompt: str, perturbed: str) -> Edit:
    """``perturbed`` as one edit of ``prompt``: from character ``at``, ``cut`` characters
    replaced by ``insert``. A score carries these instead of copies of a prompt that may be long
    (the balls that append: ``at`` is the prompt's length, ``cut`` 0, ``insert`` the suffix).

    >>> edit("abc", "abc ?!")
    Edit(at=3, cut=0, insert=' ?!')
    >>> edit("house", "hoose")
    Edit(at=2, cut=1, insert='o')
    """
    at = len(prompt) if perturbed.startswith(prompt) else _common(prompt, perturbed)
    tail = _common(prompt[at:], perturbed[at:], backwards=True)
    return Edit(at, len(prompt) - at - tail, perturbed[at:len(perturbed) - tail])


def apply_edit(prompt: str, change: Mapping[str, Any]) -> str:
    """The perturbed prompt an edit describes, as a score's JSON carries it."""
    at, cut = int(change["at"]), int(change["cut"])
    return prompt[:at] + str(change["insert"]) + prompt[at + cut:]


def judge(score: TrustScore, gamma: float | None, thresholds: Thresholds) -> TrustScore:
    """The score with gamma's verdict, and P(correct) with its band when a calibration is in
    use."""
    score = replace(score, gamma=gamma, verdict=thresholds.verdict(gamma),
                    error=None if gamma is not None else UNDEFINED,
                    error_kind=None if gamma is not None else "undefined")
    if thresholds.curve is not None:
        score = replace(score, p_correct=thresholds.curve.p_correct(gamma),
                        p_correct_band=thresholds.curve.band(gamma))
    return score
