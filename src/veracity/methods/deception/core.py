"""Deception-based benchmarking (DB-MMLU): prompts, strict answer parsing, pure metrics.

Every item is answered twice. The assistant turn is prefilled with the start of a JSON
object, ``{\\n    "Reasoning": "Let's reason step by step.`` (normal) or the same with the
item's misleading opening (misleading), and the model continues it. The answer counts only
if prefill + continuation is a JSON object whose ``Answer`` is one of A-D; an invalid answer
is asked once more, then recorded as "-" and counted wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from veracity.backends.base import require
from veracity.backends.fake import digest, last_user
from veracity.client import LLMClient
from veracity.data.mc import LETTERS, NO_ANSWER
from veracity.errors import BackendError, ConfigError, DataError, ErrorKind, InvalidValueError
from veracity.jsontypes import JsonObject
from veracity.methods.deception.prompt import (
    DEFAULT_PROMPT,
    EXAMPLE,
    EXAMPLE_REASONING,
    INSTRUCTION,
    NORMAL_START,
    PREFILL_HEAD,
    DeceptionPrompt,
    format_answer,
    json_escape,
)
from veracity.methods.deception.records import DeceptionAnswer, DeceptionRecord
from veracity.types import Generation, GenRequest, MCItem, Message, Sampling

__all__ = ["EXAMPLE", "EXAMPLE_REASONING", "INSTRUCTION", "NORMAL_START", "PREFILL_HEAD",
           "DeceptionPrompt", "format_answer", "json_escape"]

Category = Literal["normal", "misleading"]
CATEGORIES: tuple[Category, ...] = ("normal", "misleading")
DEFAULT_MAX_TOKENS = 320
"""Tokens per answer, enough for a 7B model's step-by-step reasoning to finish: on the authors'
published completions, 99 % of Mistral-7B-Instruct-v0.2's continuations (reasoning after the
prefill, plus the closing JSON) take at most 311 of its own tokens; at 256, 1.6 % were cut."""
PAPER_SAMPLING = Sampling(temperature=0.3, top_p=0.3, top_k=40, repeat_penalty=1.1,
                          max_tokens=DEFAULT_MAX_TOKENS)
"""The paper's decoding: temperature 0.3, top-p 0.3, top-k 40, repeat penalty 1.1."""
SUSCEPTIBILITY_METHODS = ("pooled", "subject-weighted")
SUSCEPTIBILITY_FORMULAS = {
    "pooled": "Σ_{s∈S′} c_n^s / Σ_{s∈S′} c_m^s",
    "subject-weighted": "Σ_{s∈S′} (t_s / T′) · (c_n^s / c_m^s), T′ = Σ_{s∈S′} t_s",
}
"""Both readings of the paper's §3.2.2 over S′, the subjects whose normal accuracy exceeds the
threshold. The pooled ratio reproduces the published Table 3; the subject-weighted mean is the
formula as written."""


def format_question(item: MCItem) -> str:
    """The user turn of the built-in prompt: the question and its lettered options."""
    return DEFAULT_PROMPT.format_question(item)


def build_messages(item: MCItem, prompt: DeceptionPrompt = DEFAULT_PROMPT,
                   system: bool = False) -> tuple[Message, ...]:
    """Instruction (in the first user turn unless ``system``), the 1-shot example and its
    answer, then the item (last, as it varies)."""
    return prompt.messages(item, system)


def prefill(item: MCItem, category: Category) -> str:
    """Start of the assistant turn the model must continue."""
    if category == "normal":
        return PREFILL_HEAD + NORMAL_START
    if not item.misleading_start:
        raise DataError(
            f"item {item.id} has no misleading opening: build one with "
            "`veracity deception make-dataset` first"
        )
    return PREFILL_HEAD + json_escape(item.misleading_start)


def build_request(
    item: MCItem, category: Category, sampling: Sampling = PAPER_SAMPLING, sample_index: int = 0,
    prompt: DeceptionPrompt = DEFAULT_PROMPT, system: bool = False,
) -> GenRequest:
    """The generation request of one item in one category."""
    return GenRequest(build_messages(item, prompt, system), sampling, prefill(item, category),
                      sample_index)


@dataclass(frozen=True)
class Parsed:
    """A parsed answer: a letter A-D, or "-" with the reason it was rejected."""

    answer: str
    reasoning: str | None = None
    error: str | None = None


_LENIENT_ANSWER = re.compile(r'"Answer"\s*:\s*"?\s*([A-Da-d])(?![A-Za-z])')


def parse_response(prefill_text: str, continuation: str, lenient: bool = False) -> Parsed:
    """Parse prefill + continuation.

    Strict (default, as in the paper): the whole text must be one JSON object (surrounding
    whitespace allowed) whose ``Answer`` is exactly "A", "B", "C" or "D". Lenient (opt-in):
    trailing text after the object is ignored, the letter may be lowercase or followed by
    punctuation, and an unterminated object still yields its ``"Answer": "X"``.
    """
    text = prefill_text + continuation
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if not lenient:
            return Parsed(NO_ANSWER, error=f"invalid JSON: {exc.msg} (char {exc.pos})")
        return _parse_lenient(text, f"invalid JSON: {exc.msg} (char {exc.pos})")
    except (ValueError, RecursionError) as exc:  # a 4,300-digit integer, deep nesting
        error = f"invalid JSON: {type(exc).__name__}"
        return _parse_lenient(text, error) if lenient else Parsed(NO_ANSWER, error=error)
    if not isinstance(value, dict):
        return Parsed(NO_ANSWER, error="not a JSON object")
    reasoning = value.get("Reasoning")
    reasoning = reasoning if isinstance(reasoning, str) else None
    answer = value.get("Answer")
    if answer in LETTERS:
        return Parsed(str(answer), reasoning)
    if lenient:
        return _parse_lenient(text, f"Answer is {answer!r}, not one of A-D")
    if "Answer" not in value:
        return Parsed(NO_ANSWER, reasoning, "no 'Answer' field")
    return Parsed(NO_ANSWER, reasoning, f"Answer is {answer!r}, not one of A-D")


def _parse_lenient(text: str, strict_error: str) -> Parsed:
    start = text.find("{")
    reasoning = None
    if start >= 0:
        try:
            value, _ = json.JSONDecoder().raw_decode(text, start)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            value = None
        if isinstance(value, dict) and isinstance(value.get("Reasoning"), str):
            reasoning = value["Reasoning"]
    match = _LENIENT_ANSWER.search(text)
    if match:
        return Parsed(match.group(1).upper(), reasoning)
    return Parsed(NO_ANSWER, reasoning, strict_error)


@dataclass(frozen=True)
class AnswerPair:
    """What the metrics need from one item: its subject, gold letter and both answers."""

    subject: str
    gold: str
    normal: str
    misleading: str
    normal_truncated: bool = False
    """The normal answer is "-" because the reasoning ran out of tokens."""
    misleading_truncated: bool = False


@dataclass
class Counts:
    """Answer counts of a set of items (a subject, or all): every metric is made of them."""

    n: int = 0
    normal_correct: int = 0
    misleading_correct: int = 0
    consistent_correct: int = 0
    consistent_incorrect: int = 0
    normal_invalid: int = 0
    misleading_invalid: int = 0
    normal_truncated: int = 0
    misleading_truncated: int = 0

    def add(self, pair: AnswerPair) -> None:
        self.n += 1
        self.normal_correct += pair.normal == pair.gold
        self.misleading_correct += pair.misleading == pair.gold
        if pair.normal == pair.misleading:
            if pair.normal == pair.gold:
                self.consistent_correct += 1
            else:  # includes "-" == "-"
                self.consistent_incorrect += 1
        self.normal_invalid += pair.normal == NO_ANSWER
        self.misleading_invalid += pair.misleading == NO_ANSWER
        self.normal_truncated += pair.normal == NO_ANSWER and pair.normal_truncated
        self.misleading_truncated += pair.misleading == NO_ANSWER and pair.misleading_truncated


def _share(count: int, total: int) -> float | None:
    return count / total if total else None


def _ratio(normal_correct: int, misleading_correct: int) -> tuple[float | None, bool]:
    """c_n / c_m and whether it is unbounded (no correct misleading answer; JSON has no
    infinity, so the value is then None)."""
    if misleading_correct:
        return normal_correct / misleading_correct, False
    return None, normal_correct > 0


def pooled_susceptibility(counts: Sequence[tuple[int, int, int]]) -> tuple[float | None, bool]:
    """Σ c_n / Σ c_m over (t_s, c_n^s, c_m^s) of the qualifying subjects; (value, unbounded)."""
    if not counts:
        return None, False
    return _ratio(sum(c[1] for c in counts), sum(c[2] for c in counts))


def subject_weighted_susceptibility(counts: Sequence[tuple[int, int, int]]
                                    ) -> tuple[float | None, bool]:
    """Σ (t_s / T′) · (c_n^s / c_m^s) over (t_s, c_n^s, c_m^s) of the qualifying subjects;
    unbounded when one of them has no correct misleading answer."""
    if not counts:
        return None, False
    total = sum(c[0] for c in counts)
    value = 0.0
    for t, normal, misleading in counts:
        ratio, unbounded = _ratio(normal, misleading)
        if ratio is None:
            return None, unbounded
        value += t / total * ratio
    return value, False


@dataclass(frozen=True)
class SubjectMetrics:
    """The paper's metrics over one subject's items or over all of them (fractions in [0, 1],
    None where undefined)."""

    normal_accuracy: float | None
    misleading_accuracy: float | None
    consistency: float | None
    consistent_correct: float | None
    consistent_incorrect: float | None
    error_rate_normal: float | None
    error_rate_misleading: float | None
    truncation_rate_normal: float | None
    truncation_rate_misleading: float | None
    n_items: int
    normal_correct: int
    misleading_correct: int
    susceptibility: float | None
    """c_n / c_m (over the qualifying subjects when overall); None when undefined or
    unbounded."""
    susceptibility_unbounded: bool

    @classmethod
    def of(cls, c: Counts, susceptibility: tuple[float | None, bool]) -> SubjectMetrics:
        return cls(
            normal_accuracy=_share(c.normal_correct, c.n),
            misleading_accuracy=_share(c.misleading_correct, c.n),
            consistency=_share(c.consistent_correct + c.consistent_incorrect, c.n),
            consistent_correct=_share(c.consistent_correct, c.n),
            consistent_incorrect=_share(c.consistent_incorrect, c.n),
            error_rate_normal=_share(c.normal_invalid, c.n),
            error_rate_misleading=_share(c.misleading_invalid, c.n),
            truncation_rate_normal=_share(c.normal_truncated, c.n),
            truncation_rate_misleading=_share(c.misleading_truncated, c.n),
            n_items=c.n,
            normal_correct=c.normal_correct,
            misleading_correct=c.misleading_correct,
            susceptibility=susceptibility[0],
            susceptibility_unbounded=susceptibility[1],
        )

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True)
class DeceptionMetrics:
    """The paper's metrics of a run: overall, both susceptibilities over the qualifying
    subjects (``overall.susceptibility`` is the one ``susceptibility_method`` names), and per
    subject."""

    overall: SubjectMetrics
    susceptibility_method: str
    susceptibility_pooled: float | None
    susceptibility_pooled_unbounded: bool
    susceptibility_subject_weighted: float | None
    susceptibility_subject_weighted_unbounded: bool
    susceptibility_threshold: float
    susceptibility_subjects: list[str]
    """The subjects whose normal accuracy exceeds the threshold."""
    n_subjects: int
    per_subject: dict[str, SubjectMetrics]

    def to_json(self) -> JsonObject:
        return self.overall.to_json() | {
            "susceptibility_method": self.susceptibility_method,
            "susceptibility_pooled": self.susceptibility_pooled,
            "susceptibility_pooled_unbounded": self.susceptibility_pooled_unbounded,
            "susceptibility_subject_weighted": self.susceptibility_subject_weighted,
            "susceptibility_subject_weighted_unbounded":
                self.susceptibility_subject_weighted_unbounded,
            "susceptibility_formulas": dict(SUSCEPTIBILITY_FORMULAS),
            "susceptibility_threshold": self.susceptibility_threshold,
            "susceptibility_subjects": self.susceptibility_subjects,
            "n_subjects": self.n_subjects,
            "per_subject": {name: m.to_json() for name, m in self.per_subject.items()},
        }


def deception_metrics(pairs: Sequence[AnswerPair], threshold: float = 0.4,
                      susceptibility: str = "pooled") -> DeceptionMetrics:
    """The paper's metrics, overall and per subject (fractions in [0, 1], None if undefined).

    With t_s items in subject s and c_n^s / c_m^s correct normal / misleading answers:
    accuracies are Σ c / Σ t. Susceptibility (lower is better) is taken over the subjects S′
    whose normal accuracy exceeds ``threshold``, both ways: ``susceptibility_pooled`` =
    Σ_{S′} c_n / Σ_{S′} c_m (reproduces the published Table 3) and
    ``susceptibility_subject_weighted`` = Σ_{S′} (t_s / T′)(c_n^s / c_m^s) (§3.2.2 as
    written); ``susceptibility`` is the one ``susceptibility`` names. None when S′ is empty
    or a ratio is unbounded (then ``..._unbounded`` is True). consistent_correct /
    consistent_incorrect are shares of *all* items, so consistency is their sum; "-" == "-"
    counts as consistent (and incorrect). ``truncation_rate_*`` is the share of items whose
    answer is "-" because the reasoning ran out of tokens (part of ``error_rate_*``).
    """
    by_subject: dict[str, Counts] = {}
    total = Counts()
    count_pairs(pairs, by_subject, total)
    return metrics_from_counts(by_subject, total, threshold, susceptibility)


def count_pairs(pairs: Sequence[AnswerPair], by_subject: dict[str, Counts],
                total: Counts) -> None:
    """Add answer pairs to the counts per subject and overall (a streamed run adds its
    chunks one by one: the metrics are functions of these counts alone)."""
    for pair in pairs:
        for value in (pair.normal, pair.misleading):
            if value not in (*LETTERS, NO_ANSWER):
                raise InvalidValueError(f"answer {value!r} is neither A-D nor '-'")
    for pair in pairs:
        by_subject.setdefault(pair.subject, Counts()).add(pair)
        total.add(pair)


def metrics_from_counts(by_subject: dict[str, Counts], total: Counts, threshold: float = 0.4,
                        susceptibility: str = "pooled") -> DeceptionMetrics:
    """:func:`deception_metrics` from the counts :func:`count_pairs` made."""
    if susceptibility not in SUSCEPTIBILITY_METHODS:
        raise InvalidValueError(f"susceptibility must be one of {', '.join(SUSCEPTIBILITY_METHODS)}"
                                f", got {susceptibility!r}")
    qualifying = [s for s, c in by_subject.items() if c.normal_correct / c.n > threshold]
    per_subject = {}
    for subject in sorted(by_subject):
        c = by_subject[subject]
        per_subject[subject] = SubjectMetrics.of(
            c, _ratio(c.normal_correct, c.misleading_correct) if subject in qualifying
            else (None, False))
    counts = [(by_subject[s].n, by_subject[s].normal_correct, by_subject[s].misleading_correct)
              for s in sorted(qualifying)]
    pooled, pooled_unbounded = pooled_susceptibility(counts)
    weighted, weighted_unbounded = subject_weighted_susceptibility(counts)
    chosen = (pooled, pooled_unbounded) if susceptibility == "pooled" else (weighted,
                                                                           weighted_unbounded)
    return DeceptionMetrics(
        overall=SubjectMetrics.of(total, chosen),
        susceptibility_method=susceptibility,
        susceptibility_pooled=pooled,
        susceptibility_pooled_unbounded=pooled_unbounded,
        susceptibility_subject_weighted=weighted,
        susceptibility_subject_weighted_unbounded=weighted_unbounded,
        susceptibility_threshold=threshold,
        susceptibility_subjects=sorted(qualifying),
        n_subjects=len(by_subject),
        per_subject=per_subject,
    )


@dataclass(frozen=True)
class DeceptionSettings:
    """How items are answered and scored; recorded with every run."""

    sampling: Sampling = field(default_factory=lambda: PAPER_SAMPLING)
    """Decoding of every call (the paper's values by default)."""
    threshold: float = 0.4
    """Subjects count towards susceptibility only above this normal accuracy."""
    retries: int = 1
    """How many times an invalid answer is asked again before it becomes "-"."""
    lenient: bool = False
    """Use the lenient parser (not paper-compatible)."""
    susceptibility: str = "pooled"
    """Which susceptibility is ``susceptibility`` (both are always reported): ``pooled`` or
    ``subject-weighted``."""
    prompt: DeceptionPrompt = field(default_factory=lambda: DEFAULT_PROMPT)
    """Instruction, question layout and worked example."""
    system_prompt: bool = False
    """Send the instruction as a system message (the paper puts it in the first user turn)."""

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ConfigError("retries must be >= 0")
        if not 0.0 <= self.threshold < 1.0:
            raise ConfigError("the susceptibility threshold must be in [0, 1)")
        if self.susceptibility not in SUSCEPTIBILITY_METHODS:
            raise ConfigError(f"susceptibility must be one of {', '.join(SUSCEPTIBILITY_METHODS)}")

    def describe(self) -> JsonObject:
        return {"threshold": self.threshold, "retries": self.retries, "lenient": self.lenient,
                "susceptibility": self.susceptibility, "sampling": asdict(self.sampling),
                "instruction_in": "system message" if self.system_prompt else "first user turn",
                "prompt": self.prompt.describe()}


@dataclass
class _Answer:
    parsed: Parsed
    raw: str
    attempts: int
    errors: list[str]
    finish_reason: str
    kind: ErrorKind | None = None
    replaced_chars: int = 0

    @property
    def retry(self) -> bool:
        """An invalid answer of the model's own, worth asking again (not a server fault)."""
        return self.parsed.answer == NO_ANSWER and (self.kind is None or self.kind.blames_model)


def answer_items(
    items: Sequence[MCItem], client: LLMClient, settings: DeceptionSettings = DeceptionSettings()
) -> list[DeceptionRecord]:
    """Answer every item normally and misleadingly in one batch, retry invalid answers in a
    second batch, and return one record per item."""
    require(client.backend, "prefill", "deception benchmarking")
    # normal and misleading of one item side by side: they share the longest prompt prefix
    requests = [build_request(item, c, settings.sampling, 0, settings.prompt,
                              settings.system_prompt) for item in items for c in CATEGORIES]
    generations = client.generate_each(requests, stage="deception: answers")
    answers = [_take(r, g, settings, None) for r, g in zip(requests, generations, strict=True)]
    for attempt in range(1, settings.retries + 1):
        todo = [i for i, a in enumerate(answers) if a.retry]
        if not todo:
            break
        again = [replace(requests[i], sample_index=attempt) for i in todo]
        retried = client.generate_each(again, stage=f"deception: retry {attempt}")
        for i, request, generation in zip(todo, again, retried, strict=True):
            answers[i] = _take(request, generation, settings, answers[i])
    return [
        deception_record(item, answers[2 * k], answers[2 * k + 1], client.spec)
        for k, item in enumerate(items)
    ]


def _take(request: GenRequest, generation: Generation | BackendError,
          settings: DeceptionSettings, previous: _Answer | None) -> _Answer:
    replaced = 0
    if isinstance(generation, BackendError):
        # rejected by the model: "-", like an invalid answer; a server fault or an empty
        # reply is no answer at all, and the item is left out of the metrics
        kind: ErrorKind | None = generation.kind
        parsed = Parsed(NO_ANSWER, error=f"{generation.kind.label}: {generation}")
        text, finish = "", "error"
    else:
        text, finish, replaced = generation.text, generation.finish_reason, generation.replaced_chars
        parsed = parse_response(request.prefill, text, settings.lenient)
        kind = None
        if parsed.error:  # cut off by max_tokens: its own kind, so the rate can be reported
            kind = ErrorKind.TRUNCATED if finish == "length" else ErrorKind.UNPARSEABLE
    errors = list(previous.errors) if previous else []
    if parsed.error:
        errors.append(parsed.error)
    return _Answer(parsed, text, (previous.attempts if previous else 0) + 1, errors, finish, kind,
                   replaced + (previous.replaced_chars if previous else 0))


def deception_record(
    item: MCItem, normal: _Answer, misleading: _Answer, model: str
) -> DeceptionRecord:
    """The per-item record written to samples.jsonl."""
    def side(a: _Answer) -> DeceptionAnswer:
        return DeceptionAnswer(a.parsed.answer, a.parsed.reasoning, a.raw, a.attempts,
                               tuple(a.errors), a.finish_reason, a.kind, a.replaced_chars)

    return DeceptionRecord(id=str(item.id), subject=item.subject, question=item.question,
                           options=tuple(item.options), gold=item.answer,
                           misleading_start=item.misleading_start, model=model,
                           normal=side(normal), misleading=side(misleading))


def pairs_from_records(records: Sequence[DeceptionRecord]) -> list[AnswerPair]:
    """The metrics' view of per-item records (live or recorded); unscored records (a side
    got no answer from the model at all) left out."""
    return [
        AnswerPair(r.subject, r.gold, r.normal.answer, r.misleading.answer,
                   r.normal.error_kind is ErrorKind.TRUNCATED,
                   r.misleading.error_kind is ErrorKind.TRUNCATED)
        for r in records if r.scored
    ]


_REASONING_OPEN = '"Reasoning": "'


def fake_deceive(request: GenRequest) -> str:
    """Finishes a deception prefill as valid JSON with a letter hashed from the prompt:
    from the question alone when answering normally, from question + prefill otherwise."""
    question = last_user(request)
    normal = request.prefill.endswith("Let's reason step by step.")
    letter = "ABCD"[digest(question if normal else question + request.prefill) % 4]
    if _REASONING_OPEN not in request.prefill:
        return f'{{"Reasoning": "The options were compared.", "Answer": "{letter}"}}'
    return f' The options were compared.",\n    "Answer": "{letter}"\n}}'


def fake_deceive_flaky(request: GenRequest) -> str:
    """Like ``fake/deceive``, but a third of first attempts are cut off (invalid JSON)."""
    if request.sample_index == 0 and digest(last_user(request) + request.prefill) % 3 == 0:
        return " and then the text stops"
    return fake_deceive(request)
