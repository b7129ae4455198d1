"""A labelled run's per-answer scores and labels, read through the method registry.

The score is the method's primary metric (``MethodSpec.primary_metric``, per item in
samples.jsonl) and its direction ``higher_is_better``; the labels come from the run's
validation.json (``veracity validate METHOD RUN``), else from a ``correct`` field of the
samples themselves. Answers without a score or a label are left out (and counted).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from veracity.errors import DataError
from veracity.method import get_method
from veracity.records import number
from veracity.store import VALIDATION_FILE, RunDir
from veracity.traffic import read_feedback


@dataclass(frozen=True)
class LabelledScores:
    """Scores and labels of one or more runs of one method."""

    method: str
    metric: str
    higher_is_better: bool
    ids: tuple[str, ...]
    values: tuple[float, ...]
    """The metric in its own units."""
    wrong: tuple[bool, ...]
    runs: tuple[str, ...]
    left_out: int
    """Answers with no score (an error) or no label."""

    def u(self) -> np.ndarray:
        """Scores with larger = less trustworthy (DESIGN §3.4: negated when higher is better)."""
        values = np.asarray(self.values, dtype=float)
        return -values if self.higher_is_better else values

    def to_method_units(self, u: float) -> float:
        return -u if self.higher_is_better else u


def _labels(run: RunDir) -> dict[str, bool] | None:
    target = run.path / VALIDATION_FILE
    if not target.is_file():
        return None
    try:
        items = json.loads(target.read_text(encoding="utf-8"))["items"]
        return {str(i["id"]): bool(i["correct"]) for i in items if i.get("correct") is not None}
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"{target} is not a validation file: {exc}") from None


def read_labelled(paths: Sequence[Path]) -> LabelledScores:
    """The scored, labelled answers of runs of one method (pooled)."""
    if not paths:
        raise DataError("give at least one labelled run")
    method_name = ""
    ids: list[str] = []
    values: list[float] = []
    wrong: list[bool] = []
    left_out = 0
    for path in paths:
        run = RunDir.open(path)
        name = run.method
        if method_name and name != method_name:
            raise DataError(f"runs of different methods ('{method_name}', '{name}') cannot be "
                            "calibrated together: their scores mean different things")
        method_name = name
        method = get_method(name)
        labels = _labels(run)
        found_label = False
        for row in run.samples():
            key = str(row.get("id"))
            label = labels.get(key) if labels is not None else row.get("correct")
            value = row.get(method.primary_metric)
            if isinstance(label, bool):
                found_label = True
            try:
                score = number(value) if not isinstance(value, bool) else float(value)
            except (TypeError, ValueError):
                score = None
            if score is None or not isinstance(label, bool) or not np.isfinite(score):
                left_out += 1
                continue
            ids.append(f"{path}:{key}" if len(paths) > 1 else key)
            values.append(score)
            wrong.append(not label)
        if not found_label:
            raise DataError(f"{path} has no labels: run 'veracity validate {name} {path}' first "
                            f"(or give a run whose samples carry 'correct')")
    method = get_method(method_name)
    return LabelledScores(method_name, method.primary_metric, method.higher_is_better,
                          tuple(ids), tuple(values), tuple(wrong), tuple(str(p) for p in paths),
                          left_out)


def traffic_labelled(path: Path, model: str | None = None) -> LabelledScores:
    """The γ and fed-back labels of a gateway's traffic log (``POST /v1/veracity/feedback``),
    optionally of one model. Answers escalated to a stronger model count under that model."""
    rows = read_feedback(path)
    if model is not None:
        rows = [r for r in rows if r.model == model]
    if not rows:
        which = f" for model '{model}'" if model else ""
        raise DataError(f"{path} holds no fed-back labels{which}: send them with POST "
                        "/v1/veracity/feedback {\"id\": ..., \"correct\": true|false}")
    models = sorted({r.model for r in rows})
    if model is None and len(models) > 1:
        raise DataError(f"{path} has labels for several models ({', '.join(models)}): γ means "
                        "something different for each; pick one with --model")
    kept = [r for r in rows if r.gamma is not None and math.isfinite(r.gamma)]
    return LabelledScores("gamma", "gamma", False, tuple(r.id for r in kept),
                          tuple(float(r.gamma) for r in kept if r.gamma is not None),
                          tuple(not r.correct for r in kept), (str(path),), len(rows) - len(kept))
