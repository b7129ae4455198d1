"""The report's human-judges table when the raters decided no pair the model judge decided."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from veracity.methods.fewl.mitigation.paper_report import HUMAN_FILE, human


def _share(rate: float) -> dict[str, Any]:
    return {"rate": rate, "ci95": [rate, rate]}


def test_no_agreement_to_measure_shows_a_dash(tmp_path: Path) -> None:
    row = {"candidate": "fewl", "base": "baseline", "n": 1, "base_better": _share(0.0),
           "candidate_better": _share(0.0), "tie": _share(1.0),
           "paper_win_rate": {**_share(0.0), "decided": 0},
           "judge_agreement": {"rate": None, "n": 0}}
    (tmp_path / HUMAN_FILE).write_text(json.dumps({
        "rows": [row], "raters": [{"rater": "ann", "n_rated": 1}], "fleiss_kappa": -1.0,
        "kappa_pairs": 1, "raw_agreement": 0.0}), encoding="utf-8")
    html = human(SimpleNamespace(path=tmp_path))  # type: ignore[arg-type]
    assert "— of 0" in html and "Human judges" in html
