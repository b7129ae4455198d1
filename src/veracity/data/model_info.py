"""Per-model facts a comparison plots against: size and external scores, from a small CSV,
or the DB-MMLU paper's Table 1 (``paper``).

The file has a header; the ``model`` column names the model as the runs do (the ``model`` of
their results), ``params_b`` is its size in billions of parameters, and every other column is an
external score (e.g. ``truthfulqa``). Cells must be numbers; an empty cell means unknown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from veracity.data.mc import _csv_rows
from veracity.errors import DataError

MODEL_COLUMN = "model"
SIZE_COLUMN = "params_b"

PAPER = "paper"
"""``--model-info paper`` names Table 1 (a CSV file named so is reached as ./paper)."""
SOURCE = "DB-MMLU paper, Table 1 (scores from the Hugging Face Open LLM Leaderboard)"

# model: size in billions, MMLU (5-shot), TruthfulQA; None where Table 1 prints "-"
TABLE1: dict[str, tuple[float, float | None, float | None]] = {
    "Gemma-1.1-2b-it": (2.51, 37.65, 45.82),
    "Phi-2": (2.78, 58.11, 44.47),
    "Phi-3-mini-4k-instruct": (3.82, 69.08, 59.88),
    "Phi-3-medium-4k-instruct": (14.0, 77.83, 57.71),
    "Mistral-7b-instruct-v0.2": (7.24, 60.78, 68.26),
    "Meta-Llama-3-8B-Instruct": (8.08, 67.07, 51.56),
    "DeciLM-7B-instruct": (7.04, 60.24, 49.75),
    "Aya-23-8B": (8.03, None, None),
    "Solar-10.7B-Instruct": (10.7, 66.21, 71.43),
    "StarChat2-15B-v0.1": (16.0, None, None),
}


@dataclass(frozen=True)
class ModelInfo:
    """Numbers per model and column (None where the cell is empty)."""

    path: Path
    columns: tuple[str, ...]
    values: dict[str, dict[str, float | None]]
    loose: bool = False
    """Match a run's model when a listed name is part of it, ignoring case and punctuation
    (the longest such name wins); built-in tables name models, not specs."""

    @property
    def scores(self) -> tuple[str, ...]:
        """The external-score columns (everything but the size)."""
        return tuple(c for c in self.columns if c != SIZE_COLUMN)

    def row(self, model: str) -> str | None:
        """The listed model a run's model is (None: not listed)."""
        if model in self.values or not self.loose:
            return model if model in self.values else None
        found = [name for name in self.values if _bare(name) and _bare(name) in _bare(model)]
        return max(found, key=lambda name: len(_bare(name)), default=None)

    def value(self, model: str, column: str) -> float | None:
        name = self.row(model)
        return None if name is None else self.values[name].get(column)

    def check_models(self, known: Iterable[str]) -> None:
        """Every model the file names must be one of the runs' models (catches typos); a
        built-in table lists more models than any one comparison has, so it is not checked."""
        if self.loose:
            return
        names = sorted(set(known))
        unknown = [m for m in self.values if m not in names]
        if unknown:
            raise DataError(f"{self.path}: no run of model(s) {', '.join(map(repr, unknown))}; "
                            f"the runs' models are {', '.join(map(repr, names))}")


def _bare(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _number(cell: str, where: str) -> float | None:
    text = cell.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{where}: {cell!r} is not a number") from None
    if not math.isfinite(value):
        raise DataError(f"{where}: {cell!r} is not a finite number")
    return value


def read_model_info(path: Path) -> ModelInfo:
    """Read and validate a model-info CSV (plain or gzipped)."""
    rows = _csv_rows(path)
    header = next(rows, None)
    if header is None:
        raise DataError(f"{path}: empty file (expected a header such as 'model,params_b,truthfulqa')")
    columns = [c.strip() for c in header[1]]
    if MODEL_COLUMN not in columns:
        raise DataError(f"{path}: no '{MODEL_COLUMN}' column in the header {columns}")
    if len(set(columns)) != len(columns) or "" in columns:
        raise DataError(f"{path}: column names must be unique and non-empty, got {columns}")
    value_columns = tuple(c for c in columns if c != MODEL_COLUMN)
    if not value_columns:
        raise DataError(f"{path}: no column besides '{MODEL_COLUMN}' (e.g. {SIZE_COLUMN}, truthfulqa)")
    values: dict[str, dict[str, float | None]] = {}
    for row, cells in rows:
        where = f"{path}, row {row}"
        if len(cells) != len(columns):
            raise DataError(f"{where}: {len(cells)} cells for {len(columns)} columns")
        record = dict(zip(columns, cells, strict=True))
        model = record[MODEL_COLUMN].strip()
        if not model:
            raise DataError(f"{where}: empty model name")
        if model in values:
            raise DataError(f"{where}: model {model!r} is listed twice")
        values[model] = {c: _number(record[c], f"{where}, column '{c}'") for c in value_columns}
    if not values:
        raise DataError(f"{path}: no model rows under the header")
    return ModelInfo(path, value_columns, values)


def paper_model_info() -> ModelInfo:
    """Table 1 as model info, matching a run's model when the table's name is part of it
    (``llamacpp/models/Phi-3-mini-4k-instruct-Q8_0.gguf`` is Phi-3-mini-4k-instruct)."""
    values = {model: {SIZE_COLUMN: size, "mmlu": mmlu, "truthfulqa": tqa}
              for model, (size, mmlu, tqa) in TABLE1.items()}
    return ModelInfo(Path(SOURCE), (SIZE_COLUMN, "mmlu", "truthfulqa"), values, loose=True)
