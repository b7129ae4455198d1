"""White-box ball: gamma with the prompt's input token embeddings perturbed directly.

Instead of appending characters to the question, each ball point moves the input embedding
of every question token (or, with ``scope="all"``, of every prompt token) by a vector of
length ``radius``, as the precursor paper *Harmonic Machine Learning Models are Robust*
(Kersting et al. 2024) does in input space:

- ``sphere``: per token and point an independent random direction (a normalised Gaussian)
  scaled to ``radius``; point i depends only on (seed, question, i), so a larger N keeps
  the first points.
- ``simplex``: per token the N points are the vertices of a regular simplex of circumradius
  ``radius`` centred on the original embedding, in a random orientation; the offsets sum to
  zero, so the ball's centroid is exactly the original prompt (the paper's simplex
  quadrature of the mean-value integral). Needs N >= 2.

Answers are greedy by default; the centre is generated from the unperturbed embeddings in
the same way, and gamma is computed exactly as for the text ball
(:func:`veracity.methods.gamma.core.score_answers`). Generations are cached per ball point.
Radii are absolute L2 distances in embedding space (the bundled SmolLM2's token embeddings
have norm ~3.2; radius 1 visibly changes some answers). A record's ``perturbed_prompts`` are
what each perturbed question reads as (nearest vocabulary embedding per token), and
``token_change_rate`` is the share of perturbed tokens whose nearest token changed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from veracity.backends.base import Backend, Outcome, require
from veracity.cache import Cache, cache_key
from veracity.client import CachedEmbedder, LLMClient, Progress, request_key
from veracity.errors import CapabilityError, ConfigError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.core import (
    Form,
    GammaSettings,
    check_prompt,
    gamma_record,
    perturbed_cosines,
    score_answers,
)
from veracity.methods.gamma.records import GammaRecord
from veracity.types import GenRequest, Item, Sampling

Shape = Literal["sphere", "simplex"]
Scope = Literal["question", "all"]
SHAPES: tuple[Shape, ...] = ("sphere", "simplex")
SCOPES: tuple[Scope, ...] = ("question", "all")
DEFAULT_RADIUS = 1.0


class PromptEmbeddingsLike(Protocol):
    """What a white-box backend returns for a prompt (see ``HFBackend.prompt_embeddings``)."""

    @property
    def token_ids(self) -> tuple[int, ...]: ...

    @property
    def vectors(self) -> npt.NDArray[np.float32]: ...

    @property
    def question_mask(self) -> npt.NDArray[np.bool_]: ...


@runtime_checkable
class EmbeddingModel(Protocol):
    """A backend that exposes input embeddings and generates from them."""

    spec: str

    def identity(self) -> JsonObject: ...

    def prompt_embeddings(self, request: GenRequest) -> PromptEmbeddingsLike: ...

    def generate_from_embeddings(
        self, requests: Sequence[GenRequest], embeddings: Sequence[npt.ArrayLike]
    ) -> list[Outcome]: ...

    def nearest_tokens(self, vectors: npt.ArrayLike) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def ball_offsets(
    shape: Shape, n: int, n_tokens: int, dim: int, radius: float, seed: int
) -> npt.NDArray[np.float64]:
    """Offsets (n, n_tokens, dim): every (point, token) offset has L2 norm ``radius``.

    ``sphere``: independent uniform directions. ``simplex``: per token, the n vertices of a
    randomly rotated regular simplex centred on 0, so the offsets sum to 0 over points.
    """
    if shape == "sphere":
        out = np.empty((n, n_tokens, dim))
        for i in range(n):
            g = np.random.default_rng([seed, i]).standard_normal((n_tokens, dim))
            out[i] = g / np.linalg.norm(g, axis=1, keepdims=True)
        return radius * out
    if shape == "simplex":
        if n < 2 or n > dim:
            raise ConfigError(f"the simplex ball needs 2 <= N <= {dim} points, got N={n}")
        # rows of I - 1/n are a regular simplex centred on 0 with circumradius sqrt((n-1)/n)
        vertices = (np.eye(n) - 1.0 / n) / math.sqrt((n - 1) / n)
        gauss = np.random.default_rng([seed, n]).standard_normal((n_tokens, dim, n))
        basis, _ = np.linalg.qr(gauss)  # (n_tokens, dim, n) orthonormal columns
        return np.asarray(radius * np.einsum("ij,tdj->itd", vertices, basis), dtype=np.float64)
    raise ConfigError(f"unknown ball shape '{shape}'; known: {', '.join(SHAPES)}")


def _ball_seed(seed: int, shape: str, question: str) -> int:
    digest = hashlib.sha256(f"{seed}\0{shape}\0{question}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big")


def point_key(
    spec: str,
    identity: dict[str, Any],
    request: GenRequest,
    index: int,
    ball: dict[str, Any],
) -> str:
    """Cache key of ball point ``index`` (0 = the centre, shared by every ball) of a request."""
    return cache_key(
        {
            "kind": "whitebox",
            "request": request_key(spec, identity, request),
            "ball": None if index == 0 else {**ball, "point": index},
        }
    )


def _check(n: int, radius: float, shape: str, scope: str) -> None:
    if n < 1:
        raise ConfigError(f"the ball needs at least one point, got n={n}")
    if not math.isfinite(radius) or radius < 0:
        raise ConfigError(f"the embedding ball radius must be a finite number >= 0, got {radius}")
    if shape not in SHAPES:
        raise ConfigError(f"unknown ball shape '{shape}'; known: {', '.join(SHAPES)}")
    if scope not in SCOPES:
        raise ConfigError(f"unknown perturbation scope '{scope}'; known: {', '.join(SCOPES)}")
    if shape == "simplex" and n < 2:
        raise ConfigError("the simplex ball needs at least 2 points")


def check_ball(backend: Backend | LLMClient, n: int, radius: float, shape: str,
               scope: str) -> EmbeddingModel:
    """The white-box model behind ``backend``, once the ball's settings and the backend's
    access to its input embeddings are checked (before any model call)."""
    _check(n, float(radius), shape, scope)
    model = backend.backend if isinstance(backend, LLMClient) else backend
    require(model, "inputs_embeds", "the white-box (embedding) ball")
    if not isinstance(model, EmbeddingModel):
        raise CapabilityError(f"backend '{model.spec}' does not expose its input embeddings")
    return model


def whitebox_gamma(
    items: Sequence[Item],
    backend: Backend | LLMClient,
    embedder: CachedEmbedder,
    n: int = 10,
    radius: float = DEFAULT_RADIUS,
    seed: int = 0,
    form: Form = "sin",
    *,
    shape: Shape = "sphere",
    scope: Scope = "question",
    sampling: Sampling | None = None,
    cache: Cache | None = None,
    progress: Progress | None = None,
) -> list[GammaRecord]:
    """Gamma of each item's answer under the embedding ball; one record per item.

    ``backend`` may be an :class:`LLMClient` (its cache, progress and call counters are
    used) or a bare backend with the ``inputs_embeds`` capability (``hf/...``), which is
    wrapped in one with ``cache`` and ``progress``.
    """
    radius = float(radius)  # 1 and 1.0 must share cache keys
    model = check_ball(backend, n, radius, shape, scope)
    client = backend if isinstance(backend, LLMClient) else LLMClient(backend, cache, progress)
    for item in items:
        check_prompt(item.question, f"item {item.id}")
    sampling = sampling or GammaSettings().sampling
    settings = GammaSettings(n=n, ball="embedding", seed=seed, form=form, sampling=sampling)
    ball = {"shape": shape, "scope": scope, "radius": radius, "seed": seed}
    if shape == "simplex":
        ball["n"] = n  # simplex vertices depend on N; sphere points do not
    identity = client.identity()
    requests = [GenRequest.user(item.question, sampling) for item in items]

    plans = [_plan(model, r, item.question, n, radius, seed, shape, scope) for r, item in
             zip(requests, items, strict=True)]
    keys = [point_key(model.spec, identity, r, j, ball) for r in requests for j in range(n + 1)]
    generations = client.generate_from_embeddings(
        keys, [r for r in requests for _ in range(n + 1)],
        [point for plan in plans for point in plan.points], "whitebox: answers")
    found = dict(zip(keys, generations, strict=True))
    rows = [keys[i * (n + 1) : (i + 1) * (n + 1)] for i in range(len(requests))]

    answers, perturbed = [], []
    for row in rows:
        texts = [found[k].text.strip() for k in row]
        answers.append(texts[0])
        perturbed.append(texts[1:])
    gammas = score_answers(answers, perturbed, embedder, form)
    cosines = perturbed_cosines(answers, perturbed, embedder)
    records = []
    for item, plan, answer, others, value, cos in zip(items, plans, answers, perturbed, gammas,
                                                      cosines, strict=True):
        record = gamma_record(item, answer, plan.readings, others, value, settings, model.spec,
                              embedder.spec)
        record = replace(record, perturbed_cosines=tuple(cos), extra={
            "radius": radius, "shape": shape, "scope": scope,
            "perturbed_tokens": plan.n_tokens, "token_change_rate": plan.change_rate})
        records.append(record)
    return records


@dataclass(frozen=True)
class _Plan:
    """The n + 1 embedding sequences of one prompt (centre first) and what they read as."""

    points: list[npt.NDArray[np.float32]]
    readings: list[str]
    n_tokens: int
    change_rate: float


def _plan(
    model: EmbeddingModel,
    request: GenRequest,
    question: str,
    n: int,
    radius: float,
    seed: int,
    shape: Shape,
    scope: Scope,
) -> _Plan:
    prompt = model.prompt_embeddings(request)
    base = np.asarray(prompt.vectors, dtype=np.float64)
    mask = np.ones(len(base), dtype=np.bool_) if scope == "all" else np.asarray(prompt.question_mask)
    selected = np.flatnonzero(mask)
    offsets = ball_offsets(shape, n, len(selected), base.shape[1], radius, _ball_seed(seed, shape, question))
    points = [base.astype(np.float32)]
    readings, changed = [], 0
    original = [prompt.token_ids[t] for t in selected]
    for i in range(n):
        moved = base.copy()
        moved[selected] += offsets[i]
        points.append(moved.astype(np.float32))
        nearest = model.nearest_tokens(moved[selected].astype(np.float32)) if len(selected) else []
        changed += sum(a != b for a, b in zip(nearest, original, strict=True))
        readings.append(model.decode(nearest))
    rate = changed / (n * len(selected)) if len(selected) else 0.0
    return _Plan(points, readings, len(selected), rate)
