"""The self-consistency method in its own folder: record round trip, hand-computed summary,
a run end to end on a fake backend (CLI, report with its drill-down, public API) and its
validation against references."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import veracity
from veracity.backends.fake import FakeBackend
from veracity.cli import main
from veracity.method import get_method
from veracity.methods.consistency.records import ConsistencyRecord
from veracity.methods.consistency.run import summarise, validate_consistency
from veracity.runs.common import Context
from veracity.types import GenRequest


def _record(score: float | None, **kw: object) -> ConsistencyRecord:
    return ConsistencyRecord(id="q", prompt="p", answer="a", score=score, **kw)  # type: ignore[arg-type]


def test_record_round_trip_keeps_unknown_keys() -> None:
    data = {"id": 7, "prompt": "p", "answer": "a", "score": 0.75, "samples": ["x", "y"],
            "cosines": [1.0, 0.5], "m": 2, "temperature": 0.7, "seed": 0, "model": "m",
            "embedder": "e", "references": ["a"], "error": None, "later_field": 1}
    record = ConsistencyRecord.from_json(data)
    assert record.id == "7" and record.samples == ("x", "y") and record.extra == {"later_field": 1}
    assert record.to_json() == data | {"id": "7"}


def test_summary_on_hand_computed_scores() -> None:
    found = summarise([_record(0.5), _record(1.0), _record(None)])
    assert found.n_scored == 2 and found.n_unscored == 1
    assert found.mean_score == pytest.approx(0.75)
    # sample std of (0.5, 1.0) = 0.353553..., over sqrt(2)
    assert found.stderr == pytest.approx(0.25)
    assert sum(found.histogram.counts) == 2


def _responder(request: GenRequest) -> str:
    """Capital questions always get the same right answer; others vary with every sample."""
    question = request.messages[-1].content
    if "capital" in question:
        return "Paris is the capital of France."
    return f"maybe {request.sample_index} or {request.sample_index * 7} or something else"


def test_api_run_validate_and_report(tmp_path: Path) -> None:
    backend = FakeBackend(responder=_responder)
    prompts = ["What is the capital of France?", "Who wrote Hamlet?",
               "Name the capital city of France.", "Who painted the Mona Lisa?"]
    result = veracity.consistency(prompts, backend, "hash/default", m=3, cache=False,
                                  out=tmp_path / "run")
    scores = [r.score for r in result.records]
    assert scores[0] == pytest.approx(1.0) and scores[2] == pytest.approx(1.0)
    assert all(s is not None and s < 1.0 for s in (scores[1], scores[3]))
    assert len(result.records[1].samples) == 3 and len(result.records[1].cosines) == 3
    # each score is (mean cosine + 1) / 2 of its own cosines
    for record in result.records:
        assert record.score == pytest.approx((sum(record.cosines) / 3 + 1) / 2)
    samples = (tmp_path / "run" / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    assert ConsistencyRecord.from_json(json.loads(samples[1])) == result.records[1]

    # the references come from the dataset; here they are added to the stored records
    rows = [json.loads(line) for line in samples]
    for row, gold in zip(rows, (["Paris"], ["Shakespeare"], ["Paris"], ["Leonardo"]), strict=True):
        row["references"] = gold
    (tmp_path / "run" / "samples.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ctx = Context(cache=None)
    try:
        found = validate_consistency(tmp_path / "run", ctx, resamples=200)
    finally:
        ctx.close()
    assert found.n_labelled == 4 and found.accuracy == pytest.approx(0.5)
    # the two wrong answers are exactly the two inconsistent ones: a perfect flag
    assert found.auroc.auroc == pytest.approx(1.0)
    assert [i.verdict.correct for i in found.items] == [True, False, True, False]
    saved = json.loads((tmp_path / "run" / "validation.json").read_text(encoding="utf-8"))
    assert saved["auroc"]["n_incorrect"] == 2 and saved["items"][1]["correct"] is False


def test_cli_run_report_and_registration(tmp_path: Path) -> None:
    out = tmp_path / "c"
    result = CliRunner().invoke(main, ["consistency", "-m", "fake/unstable", "-e", "hash/default",
                                       "--dataset", "builtin", "--limit", "3", "-M", "2",
                                       "--no-cache", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "mean score" in result.output and "9 model calls" in result.output  # 3 greedy + 3 x 2
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Self-consistency baseline" in html and 'veracityDrills.register("consistency"' in html
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["method"] == "consistency"
    spec = get_method("consistency")
    assert spec.higher_is_better and spec.primary_metric == "score"
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["n_items"] == 3 and not math.isnan(results["mean_score"])
    bad = CliRunner().invoke(main, ["consistency", "--temperature", "0", "x"])
    assert bad.exit_code != 0
