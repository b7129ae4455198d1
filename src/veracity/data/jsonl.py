"""Reading dataset files (text, JSON, JSONL, CSV) with errors that name the file and line.

JSON is read strictly: no NaN / Infinity, no number too large for a float or an integer of
more than 4,300 digits, no nesting deep enough to exhaust the stack, and no lone UTF-16
surrogate (``"\\ud800"``), which is not text and cannot be written back as UTF-8.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from veracity.errors import DataError
from veracity.text import lone_surrogate


def read_text(path: Path, what: str = "dataset file") -> str:
    """The whole file as UTF-8 text (a byte-order mark is dropped), or a clear DataError."""
    if not path.is_file():
        raise DataError(f"{what} not found: {path}")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None


def text_lines(path: Path, what: str = "dataset file") -> Iterator[str]:
    """The lines of :func:`read_text`'s text (newlines translated to ``\\n``, kept), read one
    at a time, with the same errors: a bad byte is named by its offset in the file."""
    if not path.is_file():
        raise DataError(f"{what} not found: {path}")
    try:
        with path.open("rb") as fh:
            offset = 0
            for raw in fh:
                if offset == 0 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8):]  # offsets count from after it, as there
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:  # "\n" never ends a multi-byte character
                    raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte "
                                    f"{offset + exc.start})") from None
                offset += len(raw)
                if "\r" not in text:
                    yield text
                    continue
                parts = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
                yield from (part + "\n" for part in parts[:-1])
                if parts[-1]:
                    yield parts[-1]
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None


def csv_reader(path: Path, what: str = "dataset file") -> csv.DictReader[str]:
    """A strict DictReader over the file: an unclosed quote is an error, not one huge cell."""
    return csv.DictReader(io.StringIO(read_text(path, what), newline=""), strict=True)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is too large")
    return value


def _bad_string(value: Any) -> str | None:
    """Field path (``options[2]``) of the first string holding a lone surrogate, if any."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, str):
            if lone_surrogate(node) is not None:
                return where or "value"
        elif isinstance(node, dict):
            for key, child in node.items():
                if lone_surrogate(key) is not None:
                    return f"{where}.{key!r}" if where else "a key"
                stack.append((f"{where}.{key}" if where else key, child))
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(node))
    return None


def load_json(text: str, where: str, surrogates: bool = False) -> Any:
    """Parse strict JSON text; a DataError naming ``where`` (file, line) and the field.
    ``surrogates`` lets lone surrogates through (run files keep model text as it came)."""
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float)
    except json.JSONDecodeError as exc:
        line = f", line {exc.lineno}" if "\n" in text.strip() else ""
        raise DataError(f"{where}{line}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:  # NaN, huge numbers, integers over 4,300 digits
        raise DataError(f"{where}: invalid JSON ({str(exc).split(';')[0]})") from None
    field = None if surrogates else _bad_string(value)
    if field is not None:
        raise DataError(f"{where}, field {field}: holds a lone UTF-16 surrogate (\\ud800-\\udfff), "
                        "which is not text; fix the file")
    return value


def _objects(lines: Iterable[str], path: Path, surrogates: bool,
             ) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record = load_json(line, f"{path}, line {number}", surrogates)
        if not isinstance(record, dict):
            raise DataError(f"{path}, line {number}: expected a JSON object")
        yield number, record


def read_objects(path: Path, what: str = "dataset file", surrogates: bool = False,
                 ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line; a clear DataError on anything else."""
    yield from _objects(io.StringIO(read_text(path, what)), path, surrogates)


def line_objects(path: Path, what: str = "dataset file") -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`read_objects` reading one line at a time, with its very errors."""
    yield from _objects(text_lines(path, what), path, False)


def stream_objects(path: Path, what: str = "dataset file", surrogates: bool = False,
                   ) -> Iterator[tuple[int, dict[str, Any]]]:
    """Like :func:`read_objects`, reading one line at a time: memory does not grow with the
    file."""
    if not path.is_file():
        raise DataError(f"{what} not found: {path}")
    try:
        with path.open(encoding="utf-8-sig", newline=None) as fh:
            yield from _objects(fh, path, surrogates)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None


def load_json_file(path: Path, what: str = "dataset file") -> Any:
    """A whole JSON file (a list or an object), strictly parsed."""
    return load_json(read_text(path, what), str(path))
