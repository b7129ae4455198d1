"""Reading JSONL files with errors that name the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from veracity.errors import DataError


def read_objects(path: Path, what: str = "dataset file") -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line; a clear DataError on anything else."""
    if not path.is_file():
        raise DataError(f"{what} not found: {path}")
    with path.open(encoding="utf-8-sig") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}, line {number}: invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}, line {number}: expected a JSON object")
            yield number, record
