"""The public API of all three methods on the fake backend and the hash embedder: typed
results that agree with the CLI and the run functions, and score-only entry points."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import veracity
from veracity.errors import DataError, ErrorKind
from veracity.methods.deception.core import deception_metrics, pairs_from_records
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import FewlSettings
from veracity.methods.gamma.core import gamma_from_embeddings
from veracity.registry import load_embedder

SMOKE = Path(__file__).parent / "fixtures" / "db-mmlu-smoke"
FAST_FEWL = FewlSettings(reference_samples=3, pairs=PairSettings(r=4), neighbours=2)
QUESTIONS = ["Who wrote Hamlet?", "What is 2+2?", "What is the capital of France?"]


def test_gamma_returns_typed_records_matching_the_cli_and_the_maths() -> None:
    records = veracity.gamma(["What is 2+2?", "Who wrote Hamlet?"], model="fake/unstable",
                             embedder="hash/default", n=4, cache=False)
    assert all(isinstance(r, veracity.GammaRecord) for r in records)
    first = records[0]
    assert first.n == 4 and len(first.perturbed_answers) == 4 and first.error is None
    embedder = load_embedder("hash/default")
    vectors = embedder.embed([first.answer, *first.perturbed_answers])
    assert first.gamma == pytest.approx(gamma_from_embeddings(vectors[0], vectors[1:]))
    assert first.gamma is not None and first.gamma > 0
    cli = CliRunner().invoke(veracity_main(), ["gamma", "What is 2+2?", "Who wrote Hamlet?",
                                               "-m", "fake/unstable", "-e", "hash/default",
                                               "-n", "4", "--no-cache", "--json", "-q"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.output) == [r.to_json() for r in records]
    assert veracity.GammaRecord.from_json(records[1].to_json()) == records[1]
    [stable] = veracity.gamma("What is 2+2?", model="fake/stable", embedder="hash/default",
                              n=3, cache=False)
    assert stable.gamma == 0.0


def test_gamma_summary_of_a_run_directory(tmp_path: Path) -> None:
    from veracity.methods.gamma.run import run_gamma
    from veracity.runs.common import Context
    from veracity.types import Item

    items = [Item("a", "What is 2+2?"), Item("b", "Say nothing")]
    run = run_gamma(items, "fake/stable", "hash/default", veracity_settings(), Context(),
                    tmp_path / "run").run
    assert run is not None
    summary = veracity.GammaSummary.from_results(run.results)
    assert (summary.n_items, summary.n_scored, summary.mean, summary.median) == (2, 2, 0.0, 0.0)
    assert summary.stderr == 0.0 and summary.share_below_threshold == 1.0


def test_gamma_of_an_empty_answer_is_a_typed_error() -> None:
    [record] = veracity.gamma("Say nothing", model="fake/empty", embedder="hash/default", n=2,
                              cache=False)
    assert record.gamma is None and record.error is not None
    assert record.error.kind in (ErrorKind.UNDEFINED, ErrorKind.EMPTY)


def test_deception_live_on_the_fixture(tmp_path: Path) -> None:
    result = veracity.deception(f"db-mmlu:{SMOKE}", model="fake/deceive", greedy=True,
                                cache=tmp_path / "c.sqlite", out=tmp_path / "run")
    assert all(isinstance(r, veracity.DeceptionRecord) for r in result.records)
    assert {r.subject for r in result.records} == {"marketing", "sociology"}
    assert all(r.normal.attempts == 1 and r.normal.answer in "ABCD-" for r in result.records)
    metrics = deception_metrics(pairs_from_records(result.records), 0.4).to_json()
    assert result.results == result.results | metrics
    assert result.run is not None and result.run.method == "deception"
    again = veracity.deception(f"db-mmlu:{SMOKE}", model="fake/deceive", greedy=True,
                               cache=tmp_path / "c.sqlite")
    assert again.records == tuple(result.records) and again.run is None  # read back from the run


def _csv(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def test_score_deception_of_recorded_answers_by_hand(tmp_path: Path) -> None:
    gold = [row[-1] for row in csv.reader((SMOKE / "marketing.csv").open(encoding="utf-8"))]
    assert gold == ["A", "C"]
    wrong = {"A": "B", "C": "D"}
    # normal: both correct; misleading: the first fooled, the second held
    rows = [[g, "r", g, "m", wrong[g] if i == 0 else g] for i, g in enumerate(gold)]
    results = tmp_path / "Recorded"
    results.mkdir()
    (results / "marketing.csv").write_text(_csv(rows), encoding="utf-8")
    scored = veracity.score_deception(results, f"db-mmlu:{SMOKE}")
    r = scored.results
    assert r["model"] == "Recorded" and r["n_items"] == 2
    assert (r["normal_accuracy"], r["misleading_accuracy"]) == (1.0, 0.5)
    summary = veracity.DeceptionSummary.from_results(scored.results)
    assert (summary.normal_accuracy, summary.misleading_accuracy) == (1.0, 0.5)
    assert summary.susceptibility == 2.0 and not summary.susceptibility_unbounded  # 2 / 1
    assert summary.consistency == 0.5 and summary.per_subject["marketing"].n_items == 2
    assert scored.records[0].misleading.answer == wrong[gold[0]]
    assert scored.records[0].normal.attempts is None  # recorded: no attempt details


def test_fewl_of_models_and_of_given_answers_agree(tmp_path: Path) -> None:
    live = veracity.fewl(QUESTIONS, ["fake/stable", "fake/unstable"], ["fake/pairs"],
                         similarity="hash/default", settings=FAST_FEWL, cache=False)
    assert set(live.results["models"]) == {"fake/stable", "fake/unstable"}
    assert all(isinstance(r, veracity.FewlRecord) for r in live.records)
    first = live.records[0]
    entry = first.answers["fake/stable"]
    assert entry.fewl == pytest.approx(entry.truthfulness - entry.penalty)  # type: ignore[operator]
    assert sum(first.weights) == pytest.approx(1.0)  # type: ignore[arg-type]
    given = {name: [str(r.answers[name].answer) for r in live.records]
             for name in ("fake/stable", "fake/unstable")}
    scored = veracity.score_fewl(QUESTIONS, given, ["fake/pairs"], similarity="hash/default",
                                 settings=FAST_FEWL, cache=False, out=tmp_path / "run")
    for name in given:
        assert scored.results["models"][name]["mean"] == pytest.approx(
            live.results["models"][name]["mean"])
    assert scored.run is not None
    assert scored.run.info["config"]["answers"][0] == {"name": "fake/stable", "model": None,
                                                       "path": None, "given": True}
    with pytest.raises(DataError, match="2 answers for 3 questions"):
        veracity.score_fewl(QUESTIONS, {"short": ["a", "b"]}, ["fake/pairs"],
                            similarity="hash/default", settings=FAST_FEWL, cache=False)


def veracity_settings():  # type: ignore[no-untyped-def]
    from veracity.methods.gamma.core import GammaSettings

    return GammaSettings(n=3)


def veracity_main():  # type: ignore[no-untyped-def]
    from veracity.cli import main

    return main
