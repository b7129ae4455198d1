"""Isotropy check: angles on hand-computed vectors, then the run and CLI on the fake backend."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.methods.gamma.core import GammaSettings, gamma_from_embeddings
from veracity.methods.gamma.isotropy.core import (
    IsotropyAggregate,
    aggregate,
    angles_deg,
    centroid_angle,
    isotropy_record,
    share_within,
    spread,
)
from veracity.methods.gamma.isotropy.records import IsotropyRecord
from veracity.methods.gamma.isotropy.run import run_isotropy
from veracity.methods.gamma.records import GammaRecord
from veracity.runs.common import Context
from veracity.store import dumps
from veracity.types import Item


def test_angles_on_hand_vectors() -> None:
    got = angles_deg([[1, 0], [1, 0], [1, 0], [2, 0], [0, 0]],
                     [[0, 1], [1, 1], [-1, 0], [3, 0], [1, 0]])
    assert got[:4] == pytest.approx([90.0, 45.0, 180.0, 0.0])
    assert math.isnan(got[4])
    assert angles_deg([1, 0, 0], [1, math.sqrt(3), 0])[0] == pytest.approx(60.0)


def test_centroid_angle() -> None:
    # symmetric points: their mean is the centre's direction
    assert centroid_angle([1, 0], [[1, 1], [1, -1]]) == pytest.approx(0.0)
    assert centroid_angle([1, 0], [[0, 1], [1, 0]]) == pytest.approx(45.0)
    assert centroid_angle([1, 0], [[0, 2], [0, 4]]) == pytest.approx(90.0)


def test_spread_mean_and_population_std() -> None:
    s = spread([1, 0], [[1, 0], [0, 1]])
    assert (s.mean, s.std) == pytest.approx((45.0, 45.0))
    s = spread([1, 0], [[1, 1], [1, -1], [1, 0]])  # 45, 45, 0
    assert s.mean == pytest.approx(30.0)
    assert s.std == pytest.approx(math.sqrt((15**2 * 2 + 30**2) / 3))
    assert s.angles == pytest.approx([45.0, 45.0, 0.0])


def test_share_within_cone() -> None:
    assert share_within([5.0, 10.0, 11.0, 12.0, None], 11.0) == 0.75
    assert math.isnan(share_within([None], 11.0))


def _record(answer: str = "a") -> GammaRecord:
    return GammaRecord("q1", "p", answer, 0.1, "sin", 2, "b", 0, "m", "e", ("p1", "p2"),
                       ("a1", "a2"))


def test_record_angles_and_gamma_agree() -> None:
    prompts = [[1, 0, 0], [1, 1, 0], [1, -1, 0]]
    answers = [[1, 0, 0], [1, 0, 1], [0, 1, 0]]
    r = isotropy_record(_record(), prompts, answers)
    assert r.prompt_angle_mean == pytest.approx(45.0) and r.prompt_angle_std == pytest.approx(0)
    assert r.prompt_centroid_angle == pytest.approx(0.0)
    # mean answer (0.5, 0.5, 0.5): cos = 1/sqrt(3) to (1, 0, 0)
    assert r.answer_angle == pytest.approx(math.degrees(math.acos(1 / math.sqrt(3))))
    assert r.answer_point_angles == pytest.approx([45.0, 90.0])
    # for cos >= 0 the answer angle is arcsin of the sin-form gamma
    gamma = gamma_from_embeddings(answers[0], answers[1:])
    assert math.degrees(math.asin(gamma)) == pytest.approx(r.answer_angle)
    empty = isotropy_record(_record(answer=" "), prompts, [[0, 0, 0], [1, 0, 1], [0, 1, 0]])
    assert empty.answer_angle is None and empty.prompt_angle_mean == pytest.approx(45.0)


def test_aggregate_on_hand_records() -> None:
    records = [
        IsotropyRecord("q", "?", "!", a, prompt_angle_mean=p, prompt_angle_std=1.0,
                       prompt_centroid_angle=2.0)
        for a, p in ((5.0, 10.0), (15.0, 12.0), (None, 8.0))
    ]
    agg = aggregate(records, cone=11.0)
    assert agg.n_items == 3 and agg.cone == 11.0
    assert agg.answer_angle.n == 2 and agg.answer_angle.mean == 10.0
    assert agg.answer_angle.share_within_cone == 0.5
    assert agg.prompt_angle_mean.share_within_cone == pytest.approx(2 / 3)
    assert agg.prompt_angle_mean.median == 10.0 and agg.prompt_angle_mean.max == 12.0
    assert sum(agg.answer_angle.histogram.counts) == 2
    assert agg.angle("prompt_angle_std") == agg.prompt_angle_std
    back = IsotropyAggregate.from_json(json.loads(dumps(agg.to_json())))
    assert back.answer_angle == agg.answer_angle and back.cone == 11.0


def test_run_on_stable_fake_centres_answers_not_prompts(ctx: Context) -> None:
    items = [Item("a", "Who wrote Hamlet?"), Item("b", "What is 2+2?")]
    outcome = run_isotropy(items, "fake/stable", "hash/default", GammaSettings(n=5), ctx, cone=11.0)
    for r in outcome.records_json():
        assert r["answer_angle"] == pytest.approx(0.0, abs=1e-3)  # identical answers
        assert r["prompt_angle_mean"] > 0 and len(r["prompt_angles"]) == 5
        assert r["prompt_angle_std"] == pytest.approx(float(np.std(r["prompt_angles"])))
        assert r["gamma"] == 0.0
    assert outcome.summary.aggregate.answer_angle.share_within_cone == 1.0
    assert outcome.results["settings"]["cone"] == 11.0


def test_cli_isotropy_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "iso"
    args = ["isotropy", "--dataset", "builtin", "--limit", "4", "--model", "fake/unstable",
            "--embedder", "hash/default", "-n", "4", "--cone", "20", "--out", str(out)]
    first = CliRunner().invoke(main, args, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    assert "answer vs mean perturbed answer" in first.output and "cone 20.0°" in first.output
    for name in ("run.json", "samples.jsonl", "results.json", "report.html"):
        assert (out / name).is_file()
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == "isotropy" and results["aggregate"]["n_items"] == 4
    assert results["aggregate"]["answer_angle"]["mean"] > 0
    html = (out / "report.html").read_text()
    assert "Isotropy of the ball" in html and "% ≤ cone" in html
    again = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert json.loads(again.output)["aggregate"]["n_items"] == 4
    bad = CliRunner().invoke(main, [*args[:-2], "--ball", "nope"])
    assert bad.exit_code != 0 and "unknown ball" in bad.output
