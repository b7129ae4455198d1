"""Typed, frozen per-item records of each method, and their JSON shape in samples.jsonl.

``from_json`` reads what a run wrote (this release's shape and older ones: an error told by
its ``"model error:"`` prefix before error kinds existed); ``to_json`` writes the same shape
back. Keys a record does not type (added by the numeric control, a calibration or a later
release) are kept in ``extra`` and written after the typed ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from veracity.errors import DataError, ErrorKind
from veracity.jsontypes import JsonObject

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


def number(value: Any) -> float | None:
    """A stored figure: None for null or NaN."""
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


def json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DataError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class Mean:
    """A mean over the items that have the value, its standard error, and n."""

    mean: float | None
    stderr: float | None
    n: int

    @classmethod
    def from_json(cls, data: Any) -> Mean:
        found = json_object(data, "mean")
        return cls(number(found["mean"]), number(found["stderr"]), int(found["n"]))

    def to_json(self) -> JsonObject:
        return {"mean": self.mean, "stderr": self.stderr, "n": self.n}


class Record:
    """What every typed record offers: its JSON shape both ways."""

    _renamed: ClassVar[Mapping[str, str]] = {}
    """Field name -> JSON key where they differ (``lambda`` is a Python keyword)."""

    extra: Mapping[str, Any]

    @classmethod
    def from_json(cls: type[R], data: Any) -> R:
        """A record as samples.jsonl holds it."""
        raise NotImplementedError

    def to_json(self) -> JsonObject:
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
        """The typed fields by JSON key, values as they are (tuples, nested records): each
        ``to_json`` turns them into JSON."""
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


def read_records(kind: type[R], rows: Sequence[Any] | Any) -> list[R]:
    """Typed records from parsed JSON rows (a run's samples)."""
    return [kind.from_json(row) for row in rows]
