"""Adversarial gamma search (paper section 5; the authors' ``follow_anharmonic_gradient``).

From a prompt p, each step draws N candidates p + " " + 1-3 random characters (the
``charset`` ball, by default code points up to 500 as in the authors' code), measures gamma
of every candidate (its own answer plus N answers on its own ball: N x (N + 1) generations,
sent as one batch and cached), and moves to the candidate with the largest gamma (smallest
with ``descend``). Like the authors' walker it always moves, even downhill; the best point
seen is reported separately. Every step is recorded, so the trajectory shows where the
model starts to hallucinate.
"""

from __future__ import annotations

import hashlib
import math
import random
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from veracity.backends.fake import babble, digest, last_user
from veracity.checks import MAX_N, check_count
from veracity.client import CachedEmbedder, LLMClient
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.attack.records import AttackPoint, AttackStep
from veracity.methods.gamma.core import Form, GammaSettings, check_prompt, measure_gamma
from veracity.methods.gamma.paraphrase import PARAPHRASE
from veracity.methods.gamma.records import GammaRecord
from veracity.perturb import resolve_ball
from veracity.types import GenRequest, Item, Sampling

OnStep = Callable[[AttackStep], None]
ATTACK_MAX_N = 100
"""Candidates per step without ``allow_large_n``: a step costs n x (n + 1) generations."""


@dataclass(frozen=True)
class AttackSettings:
    """How the search walks; every field is recorded with the results."""

    steps: int = 20
    """Maximum number of moves."""
    n: int = 10
    """Candidates per step, and ball points per gamma."""
    charset: str = "utf8"
    """Ball that draws the candidates (``utf8``: codes 0-500; any ball, or ``utf8:LOW-HIGH``)."""
    ball: str = "utf8"
    """Ball that measures gamma of each candidate: random UTF-8 (codes 0-500), as the paper's
    section 5 measures it ("not by using ASCII control-characters ... but by adding random
    UTF-8"); the authors' walker draws candidates and gamma balls from the same family."""
    descend: bool = False
    """Walk towards the smallest gamma instead (find a stable rewording)."""
    seed: int = 0
    """Seeds both balls."""
    max_calls: int | None = None
    """Stop before a step whose generations would take the total above this."""
    form: Form = "sin"
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=64))
    paraphraser: str | None = None
    """Model that writes the gamma ball when ``ball`` is ``paraphrase``."""
    allow_large_n: bool = False
    """Allow n above ATTACK_MAX_N (a step costs n x (n + 1) generations)."""

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ConfigError(f"steps must be >= 0, got {self.steps}")
        if self.n < 1:
            raise ConfigError(f"the search needs at least one candidate per step, got n={self.n}")
        check_count("n", self.n, ATTACK_MAX_N, self.allow_large_n, hard_limit=MAX_N)
        if self.charset == PARAPHRASE:
            raise ConfigError("candidates are drawn from a character ball, not 'paraphrase'")
        resolve_ball(self.charset)
        if self.ball != PARAPHRASE:
            resolve_ball(self.ball)
        if self.max_calls is not None and self.max_calls < 1:
            raise ConfigError(f"--max-calls must be >= 1, got {self.max_calls}")

    def gamma_settings(self) -> GammaSettings:
        return GammaSettings(n=self.n, ball=self.ball, seed=self.seed, form=self.form,
                             sampling=self.sampling, paraphraser=self.paraphraser,
                             allow_large_n=self.allow_large_n)

    def describe(self) -> JsonObject:
        out: JsonObject = {
            "steps": self.steps,
            "n": self.n,
            "charset": self.charset,
            "ball": self.ball,
            "direction": "descend" if self.descend else "ascend",
            "seed": self.seed,
            "max_calls": self.max_calls,
            "form": self.form,
            "temperature": self.sampling.temperature,
            "max_tokens": self.sampling.max_tokens,
        }
        return out | ({"paraphraser": self.paraphraser} if self.ball == PARAPHRASE else {})


def visible(text: str, keep: str = "") -> str:
    """``text`` with invisible characters (controls, format marks, unusual spaces) spelled
    out as \\xNN / \\uNNNN, so an appended suffix can be read; ``keep`` lists exceptions."""
    out = []
    for char in text:
        if unicodedata.category(char)[0] in "CZ" and char != " " and char not in keep:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def calls_per_point(settings: AttackSettings) -> int:
    """Generations one gamma needs: the answer and N perturbed answers (plus N paraphrases)."""
    return settings.n + 1 + (settings.n if settings.ball == PARAPHRASE else 0)


def step_cost(settings: AttackSettings) -> int:
    """Generations one step asks for (an upper bound: repeated requests are sent once)."""
    return settings.n * calls_per_point(settings)


def candidates(prompt: str, n: int, charset: str, seed: int, step: int) -> list[str]:
    """The N candidates of one step; the same (prompt, charset, seed, step) gives the same list.

    Seeded apart from the gamma ball, so a candidate is never a ball point of its parent.
    """
    digest = hashlib.sha256(
        f"attack\0{seed}\0{step}\0{charset}\0{prompt}".encode("utf-8", "surrogatepass")
    ).digest()
    return resolve_ball(charset)(prompt, n, random.Random(int.from_bytes(digest[:8], "big")))


def choose(gammas: Sequence[float | None], descend: bool = False) -> int:
    """Index of the largest gamma (smallest when descending); unscored ones rank last,
    ties go to the first."""
    if not gammas:
        raise ConfigError("no candidates to choose from")
    scored = [(g, i) for i, g in enumerate(gammas) if g is not None and not math.isnan(g)]
    if not scored:
        return 0
    if descend:
        return min(scored, key=lambda pair: (pair[0], pair[1]))[1]
    return min(scored, key=lambda pair: (-pair[0], pair[1]))[1]


@dataclass
class AttackResult:
    """The trajectory (one record per step, step 0 = the start) and why it stopped."""

    steps: list[AttackStep]
    stop_reason: str
    requested_calls: int


def _step_record(
    step: int, record: GammaRecord, start: str, calls: int,
    others: Sequence[GammaRecord] = (), chosen: int | None = None,
) -> AttackStep:
    return AttackStep(
        id=f"step-{step}",
        step=step,
        prompt=record.prompt,
        suffix=record.prompt[len(start):] if record.prompt.startswith(start) else None,
        answer=record.answer,
        gamma=record.gamma,
        perturbed_prompts=record.perturbed_prompts,
        perturbed_answers=record.perturbed_answers,
        chosen=chosen,
        candidates=tuple(AttackPoint(r.prompt, r.answer, r.gamma) for r in others),
        requested_calls=calls,
        model=record.model,
        embedder=record.embedder,
        form=record.form,
        ball=record.ball,
        error=None if record.error is None else record.error.message,
    )


def walk_attack(
    prompt: str,
    client: LLMClient,
    embedder: CachedEmbedder,
    settings: AttackSettings = AttackSettings(),
    paraphraser: LLMClient | None = None,
    on_step: OnStep | None = None,
) -> AttackResult:
    """Walk from ``prompt`` along the largest (or smallest) gamma; ``on_step`` sees each step."""
    check_prompt(prompt, "attack start")
    gamma_settings = settings.gamma_settings()
    budget = settings.max_calls
    cost = calls_per_point(settings)
    if budget is not None and cost > budget:
        raise ConfigError(
            f"--max-calls {budget} is below the {cost} generations needed to score the start"
        )
    [start] = measure_gamma([Item("step-0", prompt)], client, embedder, gamma_settings, paraphraser)
    calls = cost
    steps = [_step_record(0, start, prompt, calls)]
    if on_step is not None:
        on_step(steps[0])
    current = prompt
    reason = "steps"
    for step in range(1, settings.steps + 1):
        if budget is not None and calls + step_cost(settings) > budget:
            reason = "budget"
            break
        pool = candidates(current, settings.n, settings.charset, settings.seed, step)
        items = [Item(f"step-{step}-candidate-{j}", c) for j, c in enumerate(pool)]
        records = measure_gamma(items, client, embedder, gamma_settings, paraphraser)
        calls += step_cost(settings)
        best = choose([r.gamma for r in records], settings.descend)
        current = records[best].prompt
        steps.append(_step_record(step, records[best], prompt, calls, records, best))
        if on_step is not None:
            on_step(steps[-1])
    drift = similarity_to_first([s.answer for s in steps], embedder)
    steps = [replace(s, similarity_to_start=value) for s, value in zip(steps, drift, strict=True)]
    return AttackResult(steps, reason, calls)


def similarity_to_first(answers: Sequence[str], embedder: CachedEmbedder) -> list[float | None]:
    """Cosine of each answer's embedding to the first one's (None where either is empty)."""
    vectors = np.asarray(embedder.embed(list(answers)), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1)
    out: list[float | None] = []
    for answer, vector, norm in zip(answers, vectors, norms, strict=True):
        if not answer.strip() or not answers[0].strip() or norm == 0 or norms[0] == 0:
            out.append(None)
        else:
            out.append(float(np.clip(vector @ vectors[0] / (norm * norms[0]), -1.0, 1.0)))
    return out


@dataclass(frozen=True)
class AttackBrief:
    """One point of a trajectory as results.json names it: where and what γ."""

    step: int
    prompt: str
    suffix: str | None
    answer: str
    gamma: float | None
    similarity_to_start: float | None

    @classmethod
    def of(cls, s: AttackStep) -> AttackBrief:
        return cls(s.step, s.prompt, s.suffix, s.answer, s.gamma, s.similarity_to_start)


@dataclass(frozen=True)
class Trajectory:
    """Start, final and best point of a search, how it stopped and how it moved."""

    start: AttackBrief
    final: AttackBrief
    best: AttackBrief
    steps_taken: int
    stop_reason: str
    requested_calls: int
    uphill_moves: int
    downhill_moves: int

    def to_json(self) -> JsonObject:
        return {"start": asdict(self.start), "final": asdict(self.final),
                "best": asdict(self.best), "steps_taken": self.steps_taken,
                "stop_reason": self.stop_reason, "requested_calls": self.requested_calls,
                "uphill_moves": self.uphill_moves, "downhill_moves": self.downhill_moves}


@dataclass(frozen=True)
class AttackResults:
    """An adversarial search's results.json: the setup and its trajectory."""

    model: str
    embedder: str
    settings: AttackSettings
    trajectory: Trajectory

    def to_json(self) -> JsonObject:
        return {"method": "attack", "model": self.model, "embedder": self.embedder,
                "settings": self.settings.describe(), **self.trajectory.to_json()}


def aggregate(result: AttackResult, descend: bool = False) -> Trajectory:
    """Start, final and best point of a trajectory (best = largest gamma, smallest if descending)."""
    steps = result.steps
    best = steps[choose([s.gamma for s in steps], descend)]
    gammas = [s.gamma for s in steps]
    moves = [
        b - a for a, b in zip(gammas, gammas[1:], strict=False) if a is not None and b is not None
    ]
    return Trajectory(
        start=AttackBrief.of(steps[0]),
        final=AttackBrief.of(steps[-1]),
        best=AttackBrief.of(best),
        steps_taken=len(steps) - 1,
        stop_reason=result.stop_reason,
        requested_calls=result.requested_calls,
        uphill_moves=sum(1 for m in moves if m > 0),
        downhill_moves=sum(1 for m in moves if m < 0),
    )


def fake_slope(request: GenRequest) -> str:
    """A gamma landscape with a slope: each character outside printable ASCII in the prompt
    makes every answer word more likely to depend on the exact prompt (certain from 12 on),
    so appending exotic characters raises gamma and an adversarial search can climb."""
    prompt = last_user(request)
    noise = sum(1 for c in prompt if not " " <= c <= "~")
    clean = "".join(c for c in prompt if " " <= c <= "~").strip()
    words = babble(clean).split()
    for i in range(len(words)):
        if digest(f"{prompt}#{i}") % 12 < noise:
            words[i] = babble(f"{prompt}#{i}", 1)
    return " ".join(words)
