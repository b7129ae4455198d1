"""Recorded generations for γ (JSONL: prompt, answer, perturbed_answers per line), read and
checked line by line; a bad line is a DataError naming the line and the field.

A line may carry ``published_gamma`` (a number) and ``source`` (text): the γ a publication
printed for those answers, shown beside ours. ``--recorded paper`` names the packaged file of
the γ paper's Tables 1 and 2, whose full answers the paper prints."""

from __future__ import annotations

import math
from importlib.resources import files
from pathlib import Path
from typing import Any

from veracity.data.jsonl import read_objects
from veracity.errors import DataError
from veracity.jsontypes import JsonObject
from veracity.text import short

PAPER = "paper"
"""``--recorded paper``: Tables 1 and 2 of the γ paper (a file named so is reached as ./paper)."""


def resolve_recorded(spec: str | Path) -> Path:
    """The recorded file a ``--recorded`` value names (``paper``: the packaged tables)."""
    if isinstance(spec, str) and spec == PAPER:
        return Path(str(files("veracity.data") / "paper_gamma_tables.jsonl"))
    return Path(spec)


def read_recorded(path: Path) -> list[dict[str, Any]]:
    """Recorded generations: JSONL with prompt, answer, perturbed_answers per line."""
    rows = [recorded_row(path, number, row) for number, row in read_objects(path, "recorded file")]
    if not rows:
        raise DataError(f"{path}: no records")
    return rows


def recorded_row(path: Path, number: int, row: dict[str, Any]) -> JsonObject:
    """One line of a recorded file, checked (a DataError naming the line and field)."""
    where = f"{path}, line {number}"
    for name in ("prompt", "answer", "perturbed_answers"):
        if name not in row:
            raise DataError(f"{where}: missing field '{name}'")
    if not isinstance(row["prompt"], str) or not row["prompt"].strip():
        raise DataError(f"{where}, field 'prompt': expected a non-empty string, got "
                        f"{short(row['prompt'])}")
    if not isinstance(row["answer"], str):
        raise DataError(f"{where}, field 'answer': expected a string, got "
                        f"{type(row['answer']).__name__}")
    perturbed = _strings(row, "perturbed_answers", where)
    if not perturbed:
        raise DataError(f"{where}, field 'perturbed_answers': expected a non-empty list")
    if "perturbed_prompts" in row and len(_strings(row, "perturbed_prompts", where)) != len(
            perturbed):
        raise DataError(f"{where}, field 'perturbed_prompts': {len(row['perturbed_prompts'])} "
                        f"prompts for {len(perturbed)} perturbed answers")
    published = row.get("published_gamma")
    if published is not None and (isinstance(published, bool) or not isinstance(
            published, int | float) or not math.isfinite(published)):
        raise DataError(f"{where}, field 'published_gamma': expected a number, got "
                        f"{short(published)}")
    for name in ("model", "ball", "source"):
        if name in row and (not isinstance(row[name], str) or not row[name].strip()):
            raise DataError(f"{where}, field '{name}': expected a non-empty string")
    identifier = row.get("id", f"line-{number}")
    if isinstance(identifier, bool) or not isinstance(identifier, str | int):
        raise DataError(f"{where}, field 'id': expected a string or an integer")
    row["id"] = str(identifier)
    return row


def _strings(row: dict[str, Any], name: str, where: str) -> list[str]:
    value = row[name]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{where}, field '{name}': expected a list of strings, got "
                        f"{type(value).__name__}")
    return value
