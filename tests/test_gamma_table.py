"""Table 8 (models x domains), its rankings and Figures 1, 3-4, on three hand-made runs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.methods.gamma.core import Threshold, aggregate
from veracity.methods.gamma.records import GammaRecord
from veracity.methods.gamma.validation.core import import_ratings
from veracity.methods.gamma.validation.table import ALL_MODELS, rating_bins, table8
from veracity.report import build_report
from veracity.store import RunDir

PAPER = Threshold(0.05, "paper-code")


def make_run(path: Path, model: str, domain: str, gammas: list[float],
             ratings: list[int] | None = None, rubric: str = "auto",
             threshold: Threshold = PAPER) -> RunDir:
    """A gamma run written by hand, rated by one rater through ``import_ratings``."""
    records = [{"id": f"q{k}", "prompt": f"question {k}", "answer": f"answer {k}", "gamma": g,
                "form": "paper-code", "model": model, "embedder": "hash/default"}
               for k, g in enumerate(gammas)]
    run = RunDir.create(path, "gamma", {"model": model, "dataset": f"jsonl:{domain}.jsonl",
                                        "settings": {"form": "paper-code"}})
    run.write_samples(records)
    run.write_results({
        "method": "gamma", "model": model, "embedder": "hash/default",
        "dataset": f"jsonl:{domain}.jsonl", "domain": domain,
        "settings": {"form": "paper-code", "ball": "ascii-control", "n": 10},
        "aggregate": aggregate([GammaRecord.from_json(r) for r in records], threshold,
                               "paper-code").to_json(),
    })
    run.finish({})
    if ratings is not None:
        sheet = path / "rater.csv"
        sheet.write_text("item_id,rating\n" + "".join(f"q{k},{r}\n" for k, r in enumerate(ratings)),
                         encoding="utf-8")
        import_ratings(path, [sheet], threshold.value, 10, rubric, None, threshold.form)
    return run


@pytest.fixture
def three(tmp_path: Path) -> list[RunDir]:
    return [
        make_run(tmp_path / "a", "m1", "Web QA", [0.0, 0.02, 0.1], [5, 4, 3]),
        make_run(tmp_path / "b", "m1", "TruthfulQA", [0.2, 0.3], [2, 2]),
        make_run(tmp_path / "c", "m2", "Web QA", [0.01, 0.01, 0.01, 0.5]),
    ]


def test_table8_pivot_by_hand(three: list[RunDir]) -> None:
    data = table8(three)
    assert data.domains == ["Web QA", "TruthfulQA"] and data.models == ["m1", "m2"]
    web = data.cells["m1"]["Web QA"]
    assert web.mean_gamma == pytest.approx(0.04) and web.share_below == pytest.approx(2 / 3)
    assert web.R == pytest.approx(4.0) and web.R_below == pytest.approx(4.5)
    assert web.n_rated == 3 and asdict(web.threshold) == {"value": 0.05, "form": "paper-code",
                                                          "given": 0.05, "given_form": "paper-code"}
    tqa = data.cells["m1"]["TruthfulQA"]
    assert tqa.mean_gamma == pytest.approx(0.25) and tqa.share_below == 0.0
    assert "TruthfulQA" not in data.cells["m2"]
    m2 = data.cells["m2"]["Web QA"]
    assert m2.mean_gamma == pytest.approx(0.1325) and m2.share_below == pytest.approx(0.75)
    assert m2.R is None
    # by R: m1 = (4.0 x 3 + 2.0 x 2) / 5 = 3.2; m2 has no ratings
    by_r = data.by_rating
    assert [r.model for r in by_r.order] == ["m1"]
    assert [r.score for r in by_r.order] == pytest.approx([3.2])
    # by %γ<0.05: m1 = (2/3 x 3 + 0 x 2) / 5 = 0.4; m2 = 0.75
    by_c = data.by_certified.order
    assert [r.model for r in by_c] == ["m2", "m1"]
    assert [r.score for r in by_c] == pytest.approx([0.75, 0.4])
    assert by_c[1].domains == 2


def test_different_rubrics_and_thresholds_are_not_pooled(tmp_path: Path) -> None:
    mine = tmp_path / "mine.txt"
    mine.write_text("".join(f"{k}: our level {k}\n" for k in range(6)), encoding="utf-8")
    runs = [make_run(tmp_path / "a", "m1", "Web QA", [0.0, 0.1], [5, 3]),
            make_run(tmp_path / "b", "m2", "Web QA", [0.0, 0.1], [5, 1], str(mine),
                     Threshold(0.05, "sin"))]
    data = table8(runs)
    assert data.by_rating.order == ()
    assert "rubric" in str(data.by_rating.not_pooled)
    assert "threshold" in str(data.by_certified.not_pooled)


def test_figure1_data_has_a_pooled_row(three: list[RunDir]) -> None:
    binned = rating_bins(three, bins=2)
    assert set(binned) == {"m1", ALL_MODELS}
    # Web QA: γ 0, 0.02, 0.1 -> bins [0, 0.05), [0.05, 0.1]; ratings 5, 4 | 3
    web = binned["m1"]["Web QA"]
    assert [(b["n"], b["mean"]) for b in web] == [(2, 4.5), (1, 3.0)]
    assert binned[ALL_MODELS]["Web QA"] == web  # m2 has no ratings to pool


def test_report_shows_table8_and_json(three: list[RunDir], tmp_path: Path) -> None:
    out = build_report([r.path for r in three], tmp_path / "report.html")
    html = out.read_text(encoding="utf-8")
    for text in ("Table 8: models × domains", "⟨γ⟩ 0.0400 ± ", "R 4.00 ± 0.58",
                 "ranked by certified trustworthiness", "1. m2 (75.0%, 1 domain)",
                 "Figures 3–4", "Figure 1: rating against γ"):
        assert text in html, text
    result = CliRunner().invoke(main, ["report", *(str(r.path) for r in three), "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)["gamma"]  # keyed by method
    assert data["cells"]["m2"]["Web QA"]["share_below"] == pytest.approx(0.75)
