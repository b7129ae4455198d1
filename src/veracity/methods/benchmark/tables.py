"""The benchmark's tables, made at the end from the stored per-item rows (each record's scores
and labels): one per label source, with the fused row, risk–coverage curves, reliability
diagrams, and warnings where the label sources disagree."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from veracity.labels import disagreement
from veracity.methods.benchmark.records import (
    FUSED,
    BenchmarkRecord,
    LabelTable,
    SignalInfo,
)
from veracity.methods.benchmark.settings import BenchmarkSettings
from veracity.metrics import CALIBRATORS, fused_scores, metric_table, reliability, risk_coverage

DISAGREE = 0.10
"""Label sources that disagree on more than this share of items get a warning."""


class Rows:
    """The run's per-item scores and labels, kept chunk by chunk (a tally of the driver): what
    the tables are made from, and nothing else of the records."""

    def __init__(self) -> None:
        self.scores: list[Mapping[str, float | None]] = []
        self.labels: list[Mapping[str, bool | None]] = []

    def add(self, records: Sequence[BenchmarkRecord]) -> None:
        for record in records:
            self.scores.append(record.scores)
            self.labels.append(record.labels)

    def __len__(self) -> int:
        return len(self.scores)

    def values(self, signal: str) -> list[float | None]:
        return [row.get(signal) for row in self.scores]

    def by_source(self) -> dict[str, list[bool | None]]:
        """Each label source's labels of every item, sources in the order first met."""
        sources: list[str] = []
        for row in self.labels:
            sources += [s for s in row if s not in sources]
        return {s: [row.get(s) for row in self.labels] for s in sources}


def _usable(v: float | None) -> bool:
    return v is not None and math.isfinite(float(v))


def tables(rows: Rows, signals: Sequence[SignalInfo], settings: BenchmarkSettings
           ) -> dict[str, LabelTable]:
    """One table per label source (items every signal scored and the source labelled), with
    the fused row, curves and reliability diagrams."""
    out: dict[str, LabelTable] = {}
    baselines = [s.name for s in signals if s.baseline]
    columns = {s.name: rows.values(s.name) for s in signals}
    for source, found in rows.by_source().items():
        keep = [k for k in range(len(rows)) if found[k] is not None
                and all(_usable(v[k]) for v in columns.values())]
        y = np.array([1.0 if found[k] else 0.0 for k in keep])
        head = (len(rows), len(keep), int((y == 0).sum()), float(y.mean()) if y.size else None)
        if not signals or y.size < settings.folds or y.min(initial=1) == y.max(initial=0):
            out[source] = LabelTable(*head, problem="needs both right and wrong answers on at "
                                                    f"least {settings.folds} scored items")
            continue
        scores = {}
        for s in signals:
            values = np.array([columns[s.name][k] for k in keep], dtype=np.float64)
            scores[s.name] = -values if s.higher_is_better else values
        if len(scores) > 1:
            scores[FUSED] = fused_scores(scores, y, settings.folds, settings.seed)
        table = metric_table(scores, y, baselines, settings.resamples, settings.folds,
                             settings.seed, settings.level)
        out[source] = LabelTable(
            *head, reference=table.reference, rows=table.rows,
            curves={name: tuple(float(r) for r in risk_coverage(u, y)[1])
                    for name, u in scores.items()},
            reliability={name: {how: tuple(reliability(table.calibrated[name][how], y))
                                for how in CALIBRATORS} for name in scores},
            order=tuple(sorted(table.rows, key=lambda n: -_value(table.rows[n]["auroc"].value))))
    return out


def _value(v: float) -> float:
    return -math.inf if math.isnan(v) else v


def warnings_of(labels: Mapping[str, Sequence[bool | None]],
                found: Mapping[str, LabelTable]) -> list[str]:
    """Label sources that disagree on more than 10 % of items, or rank the signals differently."""
    notes = []
    names = list(labels)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both, differ = disagreement(labels[a], labels[b])
            if both and differ / both > DISAGREE:
                notes.append(f"label sources {a} and {b} disagree on {differ} of {both} answers "
                             f"({differ / both:.0%}): the verdict depends on the label rule")
    orders = {s: [n for n in t.order if n != FUSED] for s, t in found.items() if t.order}
    first = next(iter(orders.items()), None)
    if first is not None:
        for source, order in orders.items():
            if order != first[1]:
                notes.append(f"the methods' order by AUROC under {source} ({', '.join(order)}) "
                             f"differs from under {first[0]} ({', '.join(first[1])})")
    return notes
