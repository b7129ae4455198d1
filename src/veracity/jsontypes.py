"""The JSON that veracity writes, as a type mypy checks.

Serialisers (``to_json``, ``identity``, ``describe``) return :data:`JsonObject`: anything
``json.dumps`` could not write (an array, a path, a dataclass) is a type error where it is
built rather than a crash when the run is saved. Between layers, dataclasses travel instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JsonValue: TypeAlias = (
    None | bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"]
)
JsonObject: TypeAlias = dict[str, JsonValue]
