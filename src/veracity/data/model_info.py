"""Per-model facts a comparison plots against: size and external scores, from a small CSV.

The file has a header; the ``model`` column names the model as the runs do (the ``model`` of
their results), ``params_b`` is its size in billions of parameters, and every other column is an
external score (e.g. ``truthfulqa``). Cells must be numbers; an empty cell means unknown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from veracity.data.mc import _csv_rows
from veracity.errors import DataError

MODEL_COLUMN = "model"
SIZE_COLUMN = "params_b"


@dataclass(frozen=True)
class ModelInfo:
    """Numbers per model and column (None where the cell is empty)."""

    path: Path
    columns: tuple[str, ...]
    values: dict[str, dict[str, float | None]]

    @property
    def scores(self) -> tuple[str, ...]:
        """The external-score columns (everything but the size)."""
        return tuple(c for c in self.columns if c != SIZE_COLUMN)

    def value(self, model: str, column: str) -> float | None:
        return self.values.get(model, {}).get(column)

    def check_models(self, known: Iterable[str]) -> None:
        """Every model the file names must be one of the runs' models (catches typos)."""
        names = sorted(set(known))
        unknown = [m for m in self.values if m not in names]
        if unknown:
            raise DataError(f"{self.path}: no run of model(s) {', '.join(map(repr, unknown))}; "
                            f"the runs' models are {', '.join(map(repr, names))}")


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
