"""DB-MMLU as an inspect_ai task: every item asked normally and from its misleading opening.

Each item becomes two samples, ``<item>:normal`` and ``<item>:misleading``, whose last turn
is the prefilled assistant opening the model continues (the prompt, prefill, parsing and
retry are :mod:`veracity.methods.deception.core`'s). The metrics pair the two answers of each item
and report the paper's numbers with :func:`veracity.methods.deception.core.deception_metrics`, the
function ``veracity deception run`` uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    get_model,
)
from inspect_ai.scorer import Metric, SampleScore, Score, Scorer, Target, metric, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver

from veracity.data.mc import LETTERS, NO_ANSWER, load_db_mmlu
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.methods.deception.core import (
    CATEGORIES,
    DEFAULT_MAX_TOKENS,
    PAPER_SAMPLING,
    AnswerPair,
    build_messages,
    deception_metrics,
    parse_response,
    prefill,
)
from veracity.types import MCItem, Message

FIXTURE = "db_mmlu_fixture"
"""Bundled DB-MMLU-format items of our own (five subjects, arithmetic with planted mistakes)."""


def fixture_dir() -> Path:
    """The bundled fixture folder."""
    return Path(str(files("veracity.inspect") / FIXTURE))


def _chat(message: Message) -> ChatMessage:
    if message.role == "system":
        return ChatMessageSystem(content=message.content)
    if message.role == "assistant":
        return ChatMessageAssistant(content=message.content)
    return ChatMessageUser(content=message.content)


def samples(items: Sequence[MCItem]) -> list[Sample]:
    """Two samples per item (normal, misleading), side by side; the prefill is the last turn."""
    out = []
    for item in items:
        for category in CATEGORIES:
            opening = prefill(item, category)
            out.append(Sample(
                id=f"{item.id}:{category}",
                input=[*(_chat(m) for m in build_messages(item)), ChatMessageAssistant(content=opening)],
                target=item.answer,
                metadata={"item": item.id, "subject": item.subject, "category": category,
                          "prefill": opening},
            ))
    return out


def _subjects(value: str | Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    names = [s.strip() for s in (value.split(",") if isinstance(value, str) else value) if s.strip()]
    if not names:
        raise ConfigError("subjects is empty")
    return names


@solver
def continue_prefill(retries: int = 1, lenient: bool = False, seed: int = 0) -> Solver:
    """Continue the prefilled opening; an invalid answer is asked again (seed + attempt, as
    ``veracity deception run`` does) up to ``retries`` times."""
    if retries < 0:
        raise ConfigError("retries must be >= 0")

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        model = get_model()
        opening = str(state.metadata["prefill"])
        errors: list[str] = []
        for attempt in range(retries + 1):
            config = GenerateConfig(seed=seed + attempt)
            state.output = await model.generate(state.messages, config=config)
            parsed = parse_response(opening, state.output.completion, lenient)
            if parsed.error is None:
                break
            errors.append(parsed.error)
        state.messages.append(state.output.message)
        state.metadata["attempts"] = attempt + 1
        state.metadata["errors"] = errors
        return state

    return solve


def _pairs(scores: list[SampleScore]) -> tuple[list[AnswerPair], float]:
    """The answer pairs of the items both of whose samples were scored, and the threshold."""
    sides: dict[str, dict[str, Any]] = {}
    threshold = 0.4
    for s in scores:
        meta = s.score.metadata or {}
        if "item" not in meta:
            continue
        threshold = float(meta.get("threshold", threshold))
        sides.setdefault(meta["item"], {})[meta["category"]] = meta
    pairs = [AnswerPair(m["normal"]["subject"], m["normal"]["gold"], m["normal"]["answer"],
                        m["misleading"]["answer"])
             for m in sides.values() if "normal" in m and "misleading" in m]
    return pairs, threshold


def _paper(scores: list[SampleScore]) -> JsonObject:
    pairs, threshold = _pairs(scores)
    return deception_metrics(pairs, threshold).to_json() if pairs else {}


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


@metric
def normal_accuracy() -> Metric:
    """Share of items answered correctly from the normal opening."""

    def compute(scores: list[SampleScore]) -> float:
        return _number(_paper(scores).get("normal_accuracy"))

    return compute


@metric
def misleading_accuracy() -> Metric:
    """Share of items answered correctly from the misleading opening."""

    def compute(scores: list[SampleScore]) -> float:
        return _number(_paper(scores).get("misleading_accuracy"))

    return compute


@metric
def susceptibility() -> Metric:
    """Correct normal over correct misleading answers in the subjects whose normal accuracy
    exceeds the threshold (lower is better; inf when no misleading answer is correct)."""

    def compute(scores: list[SampleScore]) -> float:
        paper = _paper(scores)
        return math.inf if paper.get("susceptibility_unbounded") else _number(paper.get("susceptibility"))

    return compute


@metric
def consistency() -> Metric:
    """Share of items whose normal and misleading answers are the same letter ("-" included)."""

    def compute(scores: list[SampleScore]) -> float:
        return _number(_paper(scores).get("consistency"))

    return compute


@scorer(metrics=[normal_accuracy(), misleading_accuracy(), susceptibility(), consistency()])
def deception_answer(lenient: bool = False, threshold: float = 0.4) -> Scorer:
    """1 when the JSON answer (prefill + continuation, strictly parsed) is the gold letter;
    "-" (no valid answer) counts as wrong."""
    if not 0.0 <= threshold < 1.0:
        raise ConfigError("the susceptibility threshold must be in [0, 1)")

    async def score(state: TaskState, target: Target) -> Score:
        meta = state.metadata
        parsed = parse_response(str(meta["prefill"]), state.output.completion, lenient)
        gold = target.text
        if gold not in LETTERS:
            raise ConfigError(f"sample {state.sample_id}: target {gold!r} is not one of A-D")
        return Score(
            value=1.0 if parsed.answer == gold else 0.0,
            answer=parsed.answer,
            explanation=parsed.error or parsed.reasoning,
            metadata={"item": meta["item"], "subject": meta["subject"], "category": meta["category"],
                      "gold": gold, "answer": parsed.answer, "valid": parsed.answer != NO_ANSWER,
                      "attempts": meta.get("attempts", 1), "threshold": threshold},
        )

    return score


@task
def db_mmlu(
    dataset: str | None = None,
    subjects: str | list[str] | None = None,
    limit_per_subject: int | None = None,
    threshold: float = 0.4,
    retries: int = 1,
    lenient: bool = False,
    greedy: bool = False,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    seed: int = 0,
    continue_final_message: bool = True,
) -> Task:
    """Deception-based benchmarking on DB-MMLU (normal and misleading openings).

    Args:
        dataset: a DB-MMLU folder (``<subject>.csv``, 7 columns, no header); default: the
            bundled fixture.
        subjects: comma-separated subjects (default: all).
        limit_per_subject: first K items of each subject.
        threshold: subjects count towards susceptibility above this normal accuracy.
        retries: extra attempts for an invalid answer.
        lenient: lenient answer parsing (not paper-compatible).
        greedy: temperature 0 instead of the paper's sampling.
        max_tokens: per answer.
        seed: sampling seed (a retry uses seed + attempt).
        continue_final_message: ask an OpenAI-compatible server (vLLM, llama.cpp's server)
            to continue the prefilled assistant turn (``continue_final_message``); turn off for
            providers that continue a final assistant turn by themselves.
    """
    if limit_per_subject is not None and limit_per_subject < 1:
        raise ConfigError("limit_per_subject must be >= 1")
    folder = Path(dataset) if dataset else fixture_dir()
    items = load_db_mmlu(folder, _subjects(subjects), limit_per_subject)
    extra: dict[str, Any] = {}
    if continue_final_message:
        extra |= {"continue_final_message": True, "add_generation_prompt": False}
    if greedy:
        config = GenerateConfig(temperature=0.0, top_p=1.0, max_tokens=max_tokens, seed=seed,
                                extra_body=extra or None)
    else:
        s = PAPER_SAMPLING
        # top-k and the repeat penalty are not OpenAI parameters: sent as the servers that
        # take them read them (llama.cpp's server: repeat_penalty, vLLM: repetition_penalty)
        extra |= {"top_k": s.top_k, "repeat_penalty": s.repeat_penalty,
                  "repetition_penalty": s.repeat_penalty}
        config = GenerateConfig(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                max_tokens=max_tokens, seed=seed, extra_body=extra)
    return Task(
        dataset=MemoryDataset(samples(items), name=f"db-mmlu:{folder.name}"),
        solver=continue_prefill(retries, lenient, seed),
        scorer=deception_answer(lenient, threshold),
        config=config,
    )
