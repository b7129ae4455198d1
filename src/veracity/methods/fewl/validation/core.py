"""The table ``fewl validate`` prints and stores: its rows (the paper's ablations) and the
measurement accuracy of each cell combined over repeats."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from veracity.methods.fewl.core import measurement_accuracy
from veracity.methods.fewl.records import AccuracyCell, Comparison

TABLE_ROWS: tuple[tuple[str, str], ...] = (
    ("single", "Single"),
    ("single_penalty", "Single + Penalty"),
    ("multi_uniform_no_penalty", "Multi + No Penalty (uniform λ, §4.1)"),
    ("multi_expertise_no_penalty", "Multi + No Penalty (expertise λ, C.8)"),
    ("single_best_no_penalty", "Single-best + No Penalty (C.8)"),
    ("fewl", "FEWL"),
    ("fewl_uniform", "FEWL (uniform λ)"),
    ("fewl_ideal", "FEWL (ideal λ)"),
)
"""The rows of Tables 1, 3 and 10 (plus C.8 and Table 2's weightings), variant -> label."""


def accuracy_cell(better: npt.ArrayLike, worse: npt.ArrayLike) -> AccuracyCell:
    """:func:`~veracity.methods.fewl.core.measurement_accuracy` as one repeat's cell."""
    found = measurement_accuracy(better, worse)
    return AccuracyCell(float(found["accuracy"]), int(found["n"]), int(found["ties"]))


def combine_repeats(tables: Sequence[Mapping[str, Comparison]]) -> dict[str, Comparison]:
    """Per cell: ``accuracy`` = the mean over repeats, ``std`` = their sample standard
    deviation (None for one repeat), ``repeats`` = each repeat's accuracy; n and ties of the
    first repeat."""
    out: dict[str, Comparison] = {}
    for comparison, first in tables[0].items():
        merged: dict[str, dict[str, AccuracyCell]] = {}
        for div, cells in first.cells.items():
            merged[div] = {}
            for variant, cell in cells.items():
                values = tuple(t[comparison].cells[div][variant].accuracy for t in tables)
                finite = [v for v in values if not math.isnan(v)]
                mean = float(np.mean(finite)) if finite else math.nan
                std = float(np.std(finite, ddof=1)) if len(finite) > 1 else None
                merged[div][variant] = replace(cell, accuracy=mean, std=std, repeats=values)
        out[comparison] = Comparison(first.identical_skipped, merged)
    return out
