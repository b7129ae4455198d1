"""Figure 3 by people: a rating sheet of a FEWL run's reference answers, each rated 0 (wrong),
1 (partly right) or 2 (right), as the paper's human evaluation did (appendix C.4); the raters'
counts per reference come back beside the judge model's (``fewl validate --judge``).

The sheet is a CSV with a stable ``item_id`` (question id and reference slot) and an
``answer_check`` (a hash of question and answer), so a rating never attaches to another answer.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veracity.errors import DataError
from veracity.jsontypes import JsonObject
from veracity.paths import check_output_file
from veracity.report.sheet import answer_check, filled_rows
from veracity.text import csv_cell

SHEET_FILE = "reference_sheet.json"
HUMAN_FILE = "reference_ratings.json"
SCALE = ("0: wrong", "1: partly right", "2: right")
COLUMNS = ("item_id", "answer_check", "reference", "question", "answer", "rating", "comment",
           "scale")


@dataclass(frozen=True)
class ReferenceRow:
    """One reference answer to rate."""

    item_id: str
    answer_check: str
    reference: str
    question: str
    answer: str


def reference_rows(records: Sequence[Mapping[str, Any]]) -> list[ReferenceRow]:
    """Every non-empty reference answer of the run's questions, in run order."""
    rows = []
    for record in records:
        question = str(record.get("question", ""))
        names = list(record.get("reference_models") or [])
        for slot, text in enumerate(record.get("references") or []):
            if not str(text).strip():
                continue
            name = str(names[slot]) if slot < len(names) else f"#{slot}"
            rows.append(ReferenceRow(f"{record['id']}#{slot}", answer_check(question, str(text)),
                                     name, question, str(text)))
    if not rows:
        raise DataError("the run has no reference answers to rate")
    return rows


def export_references(records: Sequence[Mapping[str, Any]], out: Path) -> list[ReferenceRow]:
    """Write the sheet (CSV) and return its rows."""
    check_output_file(out)
    if out.suffix.lower() != ".csv":
        raise DataError(f"{out}: the reference sheet is a CSV file (.csv)")
    rows = reference_rows(records)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for r in rows:
            writer.writerow([csv_cell(c) for c in (r.item_id, r.answer_check, r.reference,
                                                    r.question, r.answer, "", "",
                                                    " | ".join(SCALE))])
    return rows


def read_reference_ratings(path: Path, checks: Mapping[str, str]) -> dict[str, int]:
    """One rater's 0/1/2 ratings by item id (blank: not rated)."""
    found: dict[str, int] = {}
    for where, item_id, value in filled_rows(path, checks, "a reference answer of this run",
                                             "item '{item_id}' (the sheet was made from a "
                                             "different run)"):
        if not value:
            continue
        if not re.fullmatch(r"[012]", value):
            raise DataError(f"{where}: rating '{value}' is not 0, 1 or 2")
        if item_id in found:
            raise DataError(f"{where}: item '{item_id}' is rated twice")
        found[item_id] = int(value)
    return found


@dataclass(frozen=True)
class ReferenceCount:
    """One reference slot's ratings by people, beside the judge model's."""

    counts: list[int]
    """Ratings 0, 1 and 2 over all raters."""
    judge: Mapping[str, Any] | None
    """The judge's entry for this slot as the run's results.json holds it (None: not judged)."""

    @property
    def mean(self) -> float | None:
        n = sum(self.counts)
        return (self.counts[1] + 2 * self.counts[2]) / n if n else None

    def to_json(self) -> JsonObject:
        return {"counts": list(self.counts), "mean": self.mean, "judge": self.judge}


@dataclass(frozen=True)
class ReferenceCounts:
    """Figure 3 by people (``reference_ratings.json``)."""

    raters: dict[str, int]
    """Ratings each rater gave, by rater."""
    references: dict[str, ReferenceCount]
    judge: str | None
    """The judge model of the run's Figure 3, if it has one."""

    def to_json(self) -> JsonObject:
        return {"raters": dict(self.raters),
                "references": {k: v.to_json() for k, v in self.references.items()},
                "judge": self.judge}


def count_ratings(rows: Sequence[ReferenceRow], raters: Mapping[str, Mapping[str, int]],
                  judge: Mapping[str, Any] | None = None) -> ReferenceCounts:
    """Per reference slot: each rating's count over all raters' ratings and the mean, beside
    the judge's counts when the run has them (Figure 3, ``judge`` as results.json holds it)."""
    slot = {r.item_id: r.reference for r in rows}
    per: dict[str, list[int]] = {}
    for ratings in raters.values():
        for item_id, value in ratings.items():
            per.setdefault(slot[item_id], [0, 0, 0])[value] += 1
    judged = dict((judge or {}).get("references") or {})
    spec = (judge or {}).get("judge")
    return ReferenceCounts(
        {name: len(r) for name, r in raters.items()},
        {name: ReferenceCount(per.get(name, [0, 0, 0]), judged.get(name))
         for name in dict.fromkeys([*(r.reference for r in rows)])},
        None if spec is None else str(spec))
