"""Typed, frozen per-item records of each method, and their JSON shape in samples.jsonl.

``from_json`` reads what a run wrote (this release's shape and older ones: an error told by
its ``"model error:"`` prefix before error kinds existed); ``to_json`` writes the same shape
back. Keys a record does not type (added by the numeric control, a calibration or a later
release) are kept in ``extra`` and written after the typed ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from veracity.errors import DataError, ErrorKind

_LEGACY_PREFIX = "model error:"
R = TypeVar("R", bound="Record")


@dataclass(frozen=True)
class RecordError:
    """Why an item has no score: its kind and the message shown to people."""

    kind: ErrorKind
    message: str

    @classmethod
    def from_json(cls, message: Any, kind: Any) -> RecordError | None:
        """The error of a stored record; runs before error kinds told a model's failure by
        the prefix ``"model error:"`` and anything else (an empty answer) had no prefix."""
        if message is None and kind is None:
            return None
        text = "" if message is None else str(message)
        try:
            found = ErrorKind(kind)
        except ValueError:
            found = ErrorKind.REJECTED if text.startswith(_LEGACY_PREFIX) else ErrorKind.UNDEFINED
        return cls(found, text)

    @property
    def no_answer(self) -> bool:
        """The model gave no answer at all (rejected, a server fault, an empty reply)."""
        return self.kind in (ErrorKind.REJECTED, ErrorKind.SERVER, ErrorKind.EMPTY)


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DataError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


class Record:
    """What every typed record offers: its JSON shape both ways."""

    _renamed: ClassVar[Mapping[str, str]] = {}
    """Field name -> JSON key where they differ (``lambda`` is a Python keyword)."""

    extra: Mapping[str, Any]

    @classmethod
    def from_json(cls: type[R], data: Any) -> R:
        """A record as samples.jsonl holds it."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The samples.jsonl shape."""
        raise NotImplementedError

    @classmethod
    def _split(cls, data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(typed values by field name, the remaining keys)."""
        keys = _json_keys(cls)
        typed = {keys[k]: v for k, v in data.items() if k in keys}
        rest = {k: v for k, v in data.items() if k not in keys}
        return typed, rest

    def _typed_json(self) -> dict[str, Any]:
        return {key: getattr(self, name) for key, name in _json_keys(type(self)).items()}


_KEYS: dict[type[Record], dict[str, str]] = {}


def _json_keys(cls: type[Record]) -> dict[str, str]:
    """JSON key -> field name of a record class's typed fields, in order (read once: a
    million records would otherwise walk the dataclass fields two million times)."""
    found = _KEYS.get(cls)
    if found is None:
        names = [f.name for f in fields(cls) if f.name != "extra"]  # type: ignore[arg-type]
        found = _KEYS[cls] = {cls._renamed.get(n, n): n for n in names}
    return found


@dataclass(frozen=True)
class GammaRecord(Record):
    """One prompt's harmonic γ: its answer, the ball and the answers along it."""

    id: str
    prompt: str
    answer: str
    gamma: float | None
    """None = unscored (see ``error``)."""
    form: str = "sin"
    n: int = 0
    ball: str = ""
    seed: int = 0
    model: str = ""
    embedder: str = ""
    perturbed_prompts: tuple[str, ...] = ()
    perturbed_answers: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    error: RecordError | None = None
    replaced_chars: int | None = None
    """Characters of the answers that were not valid text (None: recorded answers)."""
    perturbed_cosines: tuple[float | None, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def p_correct(self) -> float | None:
        """P(correct) from a calibration, when the run had one."""
        value = self.extra.get("p_correct")
        return None if value is None else float(value)

    @property
    def verdict(self) -> str | None:
        """trustworthy / uncertain / untrustworthy / unscored, when the run was calibrated."""
        value = self.extra.get("verdict")
        return None if value is None else str(value)

    @property
    def gamma_null(self) -> float | None:
        """γ of numerical noise alone, when the numeric control ran."""
        value = self.extra.get("gamma_null")
        return None if value is None else float(value)

    @classmethod
    def from_json(cls, data: Any) -> GammaRecord:
        """A record as samples.jsonl holds it."""
        typed, rest = cls._split(_object(data, "gamma record"))
        error = RecordError.from_json(typed.pop("error", None), rest.pop("error_kind", None))
        for name in ("perturbed_prompts", "perturbed_answers", "references"):
            typed[name] = tuple(typed.get(name) or ())
        if typed.get("perturbed_cosines") is not None:
            typed["perturbed_cosines"] = tuple(typed["perturbed_cosines"])
        typed["metadata"] = dict(typed.get("metadata") or {})
        typed["id"] = str(typed.get("id", ""))
        return cls(**typed, error=error, extra=rest)

    def to_json(self) -> dict[str, Any]:
        """The samples.jsonl shape (the one ``--json`` prints)."""
        out = self._typed_json()
        error = out.pop("error")
        cosines = out.pop("perturbed_cosines")
        replaced = out.pop("replaced_chars")
        out |= {"perturbed_prompts": list(self.perturbed_prompts),
                "perturbed_answers": list(self.perturbed_answers),
                "references": list(self.references), "metadata": dict(self.metadata),
                "error": None if error is None else error.message,
                "error_kind": None if error is None else error.kind.value}
        if replaced is not None:
            out["replaced_chars"] = replaced
        if cosines is not None:
            out["perturbed_cosines"] = list(cosines)
        return out | dict(self.extra)


@dataclass(frozen=True)
class DeceptionAnswer:
    """One side (normal or misleading) of a DB-MMLU item: the chosen letter and why.

    Recorded results hold only ``answer`` and ``reasoning``; live runs also the raw text,
    the attempts and the errors of each invalid attempt.
    """

    answer: str
    """A-D, or "-" for no valid answer."""
    reasoning: str | None = None
    raw: str | None = None
    attempts: int | None = None
    """None: a recorded answer (no attempt details)."""
    errors: tuple[str, ...] = ()
    finish_reason: str | None = None
    error_kind: ErrorKind | None = None
    replaced_chars: int = 0

    @property
    def error(self) -> RecordError | None:
        """Why this side has no valid answer (the last attempt's message)."""
        if self.error_kind is None:
            return None
        return RecordError(self.error_kind, self.errors[-1] if self.errors else "")

    @property
    def scored(self) -> bool:
        """Whether the model gave an answer at all (a server fault or empty reply says
        nothing about the model)."""
        return self.error_kind not in (ErrorKind.SERVER, ErrorKind.EMPTY)

    @classmethod
    def from_json(cls, data: Any) -> DeceptionAnswer:
        side = _object(data, "deception answer")
        kind = side.get("error_kind")
        answer = side.get("answer")
        return cls("-" if answer is None else str(answer), side.get("reasoning"), side.get("raw"),
                   side.get("attempts"), tuple(side.get("errors") or ()),
                   side.get("finish_reason"), None if kind is None else ErrorKind(kind),
                   int(side.get("replaced_chars") or 0))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"answer": self.answer, "reasoning": self.reasoning}
        if self.attempts is not None:
            out |= {"raw": self.raw, "attempts": self.attempts, "errors": list(self.errors),
                    "finish_reason": self.finish_reason,
                    "error_kind": None if self.error_kind is None else self.error_kind.value,
                    "replaced_chars": self.replaced_chars}
        return out


@dataclass(frozen=True)
class DeceptionRecord(Record):
    """One DB-MMLU item answered normally and from its misleading opening."""

    id: str
    subject: str
    question: str
    options: tuple[str, ...]
    gold: str
    misleading_start: str | None
    model: str
    normal: DeceptionAnswer
    misleading: DeceptionAnswer
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        """Whether the item counts in the metrics (both sides got an answer)."""
        return self.normal.scored and self.misleading.scored

    @classmethod
    def from_json(cls, data: Any) -> DeceptionRecord:
        typed, rest = cls._split(_object(data, "deception record"))
        typed["options"] = tuple(typed.get("options") or ())
        typed["normal"] = DeceptionAnswer.from_json(typed["normal"])
        typed["misleading"] = DeceptionAnswer.from_json(typed["misleading"])
        typed["id"] = str(typed["id"])
        return cls(**typed, extra=rest)

    def to_json(self) -> dict[str, Any]:
        out = self._typed_json()
        out |= {"options": list(self.options), "normal": self.normal.to_json(),
                "misleading": self.misleading.to_json()}
        return out | dict(self.extra)


@dataclass(frozen=True)
class FewlAnswer:
    """One answer set's score on one question."""

    answer: str | None
    truthfulness: float | None
    penalty: float | None
    fewl: float | None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """``variants`` (validate: every ablation), ``choice`` (rank: the option it matches)."""

    @classmethod
    def from_json(cls, data: Any) -> FewlAnswer:
        entry = dict(_object(data, "FEWL answer"))
        return cls(entry.pop("answer", None), entry.pop("truthfulness", None),
                   entry.pop("penalty", None), entry.pop("fewl", None), entry)

    def to_json(self) -> dict[str, Any]:
        return {"answer": self.answer, "truthfulness": self.truthfulness,
                "penalty": self.penalty, "fewl": self.fewl} | dict(self.extra)


@dataclass(frozen=True)
class FewlRecord(Record):
    """One question's FEWL: references, pairs, expertise weights and each answer set's score."""

    _renamed: ClassVar[Mapping[str, str]] = {"weights": "lambda"}

    id: str
    question: str
    value: float | None
    """FEWL of the first answer set (select: of the chosen candidate); None = unscored."""
    answer: str | None
    references: tuple[str, ...] = ()
    reference_models: tuple[str, ...] = ()
    pairs: tuple[Mapping[str, str], ...] = ()
    pairs_attempts: int = 0
    pairs_failed: bool = False
    scored: bool = True
    pairs_error: str | None = None
    pairs_raw: str | None = None
    expertise: tuple[float | None, ...] = ()
    weights: tuple[float | None, ...] = ()
    """λ per reference (``lambda`` in JSON)."""
    neighbours: tuple[str, ...] = ()
    neighbour_cosine: tuple[float | None, ...] = ()
    answers: Mapping[str, FewlAnswer] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> FewlRecord:
        typed, rest = cls._split(_object(data, "FEWL record"))
        for name in ("references", "reference_models", "pairs", "expertise", "weights",
                     "neighbours", "neighbour_cosine"):
            typed[name] = tuple(typed.get(name) or ())
        typed["answers"] = {k: FewlAnswer.from_json(v)
                            for k, v in _object(typed.get("answers", {}), "answers").items()}
        typed["id"] = str(typed["id"])
        return cls(**typed, extra=rest)

    def to_json(self) -> dict[str, Any]:
        out = self._typed_json()
        for name in ("references", "reference_models", "expertise", "lambda", "neighbours",
                     "neighbour_cosine"):
            out[name] = list(out[name])
        out["pairs"] = [dict(p) for p in self.pairs]
        out["answers"] = {k: v.to_json() for k, v in self.answers.items()}
        return out | dict(self.extra)


@dataclass(frozen=True)
class Row(Record):
    """A record this release does not type (an attack step, an isotropy item): its JSON
    object as is."""

    data: Mapping[str, Any]
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> Row:
        return cls(dict(_object(data, "record")))

    def to_json(self) -> dict[str, Any]:
        return dict(self.data)


def read_records(kind: type[R], rows: Sequence[Any] | Any) -> list[R]:
    """Typed records from parsed JSON rows (a run's samples)."""
    return [kind.from_json(row) for row in rows]
