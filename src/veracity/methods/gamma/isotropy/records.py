"""Typed record of an isotropy check: one per question, its angles in degrees."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.records import Record, json_object


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value or ())


@dataclass(frozen=True)
class IsotropyRecord(Record):
    """One question's angles (degrees) around its centre: of the perturbed answers' centroid
    and of the perturbed prompts; None where undefined (an empty answer, a zero vector)."""

    id: str
    prompt: str
    answer: str
    answer_angle: float | None
    answer_point_angles: tuple[float | None, ...] = ()
    prompt_angle_mean: float | None = None
    prompt_angle_std: float | None = None
    prompt_centroid_angle: float | None = None
    prompt_angles: tuple[float | None, ...] = ()
    gamma: float | None = None
    n: int = 0
    ball: str = ""
    seed: int = 0
    form: str = "sin"
    model: str = ""
    embedder: str = ""
    perturbed_prompts: tuple[str, ...] = ()
    perturbed_answers: tuple[str, ...] = ()
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> IsotropyRecord:
        """A record as samples.jsonl holds it."""
        typed, rest = cls._split(json_object(data, "isotropy record"))
        typed["id"] = str(typed.get("id", ""))
        for name in ("perturbed_prompts", "perturbed_answers"):
            typed[name] = _strings(typed.get(name))
        for name in ("answer_point_angles", "prompt_angles"):
            typed[name] = tuple(typed.get(name) or ())
        required: dict[str, Any] = {"prompt": "", "answer": "", "answer_angle": None}
        return cls(**required | typed, extra=rest)

    def to_json(self) -> JsonObject:
        """The samples.jsonl shape."""
        out = self._typed_json()
        for name in ("answer_point_angles", "prompt_angles", "perturbed_prompts",
                     "perturbed_answers"):
            out[name] = list(out[name])
        return out | dict(self.extra)
