"""Validating γ against labels: correctness rules, the self-consistency baseline, AUROCs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from data_paths import full_or_fixture
from veracity.backends.fake import FakeBackend, stable
from veracity.cli import main
from veracity.client import LLMClient
from veracity.correctness import (
    Labelled,
    Verdict,
    contains_gold,
    judge_prompt,
    label_answers,
    parse_verdict,
)
from veracity.data.qa import load_items
from veracity.errors import ConfigError, DataError
from veracity.methods.consistency.core import (
    ConsistencySettings,
    consistency_scores,
    normalized_cosine,
    sample_requests,
)
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.run import run_gamma
from veracity.methods.gamma.validation.core import ValidateSettings, aggregate, validate_gamma
from veracity.runs.common import Context
from veracity.stats import auroc, binned_means, bootstrap_aurocs, percentile_ci
from veracity.store import dumps
from veracity.types import GenRequest, Sampling

TQA = "truthfulqa/TruthfulQA.csv"
SMALL = GammaSettings(n=3, sampling=Sampling(temperature=0.0, max_tokens=16))


# --- pure statistics -------------------------------------------------------------------------

def test_auroc_hand_computed() -> None:
    # positives 0.35, 0.8 vs negatives 0.1, 0.4: 0.35 beats 0.1 only, 0.8 beats both -> 3/4
    assert auroc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == pytest.approx(0.75)
    # a tie counts one half: positive 0.5 vs negatives 0.5, 0.2 -> (0.5 + 1) / 2
    assert auroc([0.5, 0.5, 0.2], [True, False, False]) == pytest.approx(0.75)
    assert math.isnan(auroc([0.1, 0.2], [True, True]))


def test_bootstrap_aurocs_are_aurocs_of_resamples() -> None:
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.5, 0.05])
    labels = np.array([False, False, True, True, True, False])
    boot = bootstrap_aurocs([scores, -scores], list(labels), resamples=50, seed=3)
    picks = np.random.default_rng(3).integers(0, 6, size=(50, 6))
    for row, pick in zip(boot, picks, strict=True):
        expected = auroc(list(scores[pick]), list(labels[pick]))
        if math.isnan(expected):
            assert math.isnan(row[0]) and math.isnan(row[1])
        else:
            assert row[0] == pytest.approx(expected)
            assert row[1] == pytest.approx(1 - expected)  # paired: same resample, reversed
    low, high = percentile_ci(boot[:, 0])
    assert low <= auroc(list(scores), list(labels)) <= high


def test_binned_means_hand_computed() -> None:
    bins = binned_means([0.0, 0.05, 0.1, 0.2, 0.3], [1, 2, 3, 4, 5], [0.0, 0.1, 0.2, 0.3])
    assert [b["n"] for b in bins] == [2, 1, 2]  # 0.3 sits on the closed last edge
    assert [b["mean"] for b in bins] == pytest.approx([1.5, 3.0, 4.5])
    assert bins[0]["stderr"] == pytest.approx(0.5) and math.isnan(bins[1]["stderr"])


def test_aggregate_hand_computed() -> None:
    gamma = [0.01, 0.2, 0.3, 0.02, None]
    verdicts = [Verdict(c, "contains") for c in (True, False, True, True, None)]
    baseline = [0.9, 0.95, 0.5, 0.99, 0.7]
    out = aggregate(gamma, verdicts, baseline, ValidateSettings(resamples=200, bins=2))
    # the one incorrect answer (γ 0.2) outranks γ 0.01 and 0.02 but not 0.3
    assert out.gamma.auroc == pytest.approx(2 / 3)
    # baseline flag 1 - score: 0.05 for it vs 0.1, 0.5, 0.01 -> beats only 0.01
    assert out.baseline is not None and out.baseline.auroc == pytest.approx(1 / 3)
    assert out.difference is not None and out.difference.auroc == pytest.approx(1 / 3)
    assert out.gamma.n == 4 and out.gamma.n_incorrect == 1
    assert out.n_labelled == 4 and out.n_unlabelled == 1
    acc = out.accuracy
    assert acc.all.accuracy == pytest.approx(0.75)
    assert acc.below_threshold.accuracy == 1.0 and acc.below_threshold.n == 2
    assert acc.share_below_threshold == pytest.approx(0.5)
    # bins over [0, 0.3]: [0, 0.15) holds 0.01, 0.02; [0.15, 0.3] holds 0.2 (wrong), 0.3
    assert [(b.n, b.accuracy) for b in out.bins] == [(2, 1.0), (2, 0.5)]
    with pytest.raises(DataError, match="--judge"):
        aggregate([0.1], [Verdict(None, None)], None, ValidateSettings())


# --- correctness ----------------------------------------------------------------------------

def test_contains_gold_is_case_insensitive_and_whole_word() -> None:
    assert contains_gold("It is  PARIS, of course.", ["London", "paris"]) == "paris"
    assert contains_gold("thus it goes", ["US"]) is None
    assert contains_gold("The U.S. Army", ["u.s."]) == "u.s."
    assert contains_gold("anything", ["", "  "]) is None


def test_parse_verdict() -> None:
    assert parse_verdict("CORRECT") is True
    assert parse_verdict("Incorrect.") is False
    assert parse_verdict("The answer is correct") is True
    assert parse_verdict("INCORRECT, not CORRECT") is False
    assert parse_verdict("I cannot tell") is None


def test_similarity_rule_contains_rule_and_empty(ctx: Context) -> None:
    items = [
        Labelled("q", "the seeds pass through you", ("The seeds pass through you", "Nothing"),
                 ("You grow watermelons in your stomach",)),
        Labelled("q", "you grow watermelons in your stomach", ("The seeds pass through you",),
                 ("You grow watermelons in your stomach", "You die")),
        Labelled("q", "It is Paris.", ("Paris",)),
        Labelled("q", "It is Lyon.", ("Paris",)),
        Labelled("q", "   ", ("Paris",), ("Lyon",)),
        Labelled("q", "No references here."),
    ]
    verdicts = label_answers(items, embedder=ctx.embedder("hash/default"))
    assert [v.correct for v in verdicts] == [True, False, True, False, False, None]
    assert [v.rule for v in verdicts] == ["tqa-similarity", "tqa-similarity", "contains",
                                          "contains", "empty", None]
    assert verdicts[0].evidence["best_correct"] == pytest.approx(1.0, abs=1e-5)
    assert verdicts[1].evidence["best_incorrect"] == pytest.approx(1.0, abs=1e-5)


def test_judge_sees_references_and_is_cached(ctx: Context) -> None:
    def grader(request: GenRequest) -> str:
        text = request.messages[-1].content
        answer = text.split("Answer to grade: ")[1].split("\n")[0]
        refs = text.split("Correct reference answers: ")[1].split("\n")[0].split("; ")
        if "mumble" in answer:
            return "Hmm, hard to say."
        return "CORRECT" if any(r.lower() in answer.lower() for r in refs) else "INCORRECT"

    backend = FakeBackend(responder=grader)
    ctx.clients["judge"] = LLMClient(backend, ctx.cache)
    items = [Labelled("Capital of France?", "Paris", ("Paris",), ("Lyon",)),
             Labelled("Capital of France?", "Lyon", ("Paris",), ("Lyon",)),
             Labelled("Capital of France?", "mumble", ("Paris",)),
             Labelled("Capital of France?", "", ("Paris",))]
    verdicts = label_answers(items, judge=ctx.client("judge"))
    assert [v.correct for v in verdicts] == [True, False, None, False]
    assert [v.rule for v in verdicts] == ["judge", "judge", None, "empty"]
    assert len(backend.history) == 3  # the empty answer is never sent
    assert all(r.sampling.greedy for r in backend.history)
    assert "Incorrect answers (for contrast): Lyon" in judge_prompt(items[0])
    label_answers(items, judge=ctx.client("judge"))
    assert len(backend.history) == 3  # second time from the cache


# --- baseline -------------------------------------------------------------------------------

def test_normalized_cosine_hand_computed() -> None:
    assert normalized_cosine([1, 0], [[1, 0], [0, 1]]) == pytest.approx(0.75)
    assert normalized_cosine([1, 0], [[-2, 0]]) == pytest.approx(0.0)
    assert normalized_cosine([1, 0], [[0, 0], [3, 0]]) == pytest.approx(0.75)  # zero -> cos 0


def test_sample_requests_and_settings() -> None:
    requests = sample_requests(["a", "b"], ConsistencySettings(m=3, temperature=0.9, seed=4))
    assert [r.sample_index for r in requests] == [1, 2, 3, 1, 2, 3]
    assert [r.messages[0].content for r in requests] == ["a"] * 3 + ["b"] * 3
    assert all(r.sampling.temperature == 0.9 and r.sampling.seed == 4 for r in requests)
    with pytest.raises(ConfigError, match="temperature > 0"):
        ConsistencySettings(temperature=0.0)
    with pytest.raises(ConfigError, match="M >= 1"):
        ConsistencySettings(m=0)


def test_consistency_scores_stable_vs_unstable(ctx: Context) -> None:
    prompts = ["What is 2+2?", "Who wrote Hamlet?"]
    embedder = ctx.embedder("hash/default")
    steady = consistency_scores(prompts, ctx.client("fake/stable"), embedder)
    assert [s.score for s in steady] == pytest.approx([1.0, 1.0])
    assert steady[0].greedy == stable(GenRequest.user(prompts[0]))
    shaky = consistency_scores(prompts, ctx.client("fake/unstable"), embedder,
                               greedy=["given answer", ""])
    assert shaky[0].score is not None and 0.0 < shaky[0].score < 1.0
    assert shaky[1].score is None and len(shaky[1].samples) == 5


# --- end to end ------------------------------------------------------------------------------

@pytest.fixture
def tqa() -> Path:
    """The full TruthfulQA CSV when it is beside the checkout, else 12 rows we wrote."""
    return full_or_fixture(TQA, "qa-small/truthfulqa.csv")


@pytest.fixture
def wq() -> Path:
    """The full WebQuestions test split when present, else 8 questions we wrote."""
    return full_or_fixture("webquestions/main/test.json", "qa-small/webquestions.json")


def tqa_run(ctx: Context, tqa: Path, out: Path, model: str = "fake/unstable") -> Path:
    spec = f"truthfulqa:{tqa}"
    run_gamma(load_items(spec, limit=12), model, "hash/default", SMALL, ctx, out, spec)
    return out


def test_validate_tqa_run_end_to_end(ctx: Context, tqa: Path, tmp_path: Path) -> None:
    run = tqa_run(ctx, tqa, tmp_path / "run")
    backend = ctx.client("fake/unstable").backend
    assert isinstance(backend, FakeBackend)
    before = len(backend.history)
    settings = ValidateSettings(baseline_samples=3, temperature=0.8, resamples=300)
    results = validate_gamma(run, settings, ctx, out=tmp_path / "copy.json")
    sent = backend.history[before:]
    assert len(sent) == 12 * 3
    assert {r.sample_index for r in sent} == {1, 2, 3}
    assert all(r.sampling.temperature == 0.8 and r.sampling.max_tokens == 16 for r in sent)
    saved = json.loads((run / "validation.json").read_text())
    assert saved == json.loads((tmp_path / "copy.json").read_text())
    assert saved["labels"]["rules"] == {"tqa-similarity": 12}
    items = saved["items"]
    scored = [i for i in items if i["gamma"] is not None and i["baseline"] is not None]
    wrong = [not i["correct"] for i in scored]
    assert saved == json.loads(dumps(results.to_json()))
    agg = results.aggregate
    assert agg.gamma.auroc == pytest.approx(auroc([i["gamma"] for i in scored], wrong))
    assert agg.baseline is not None and agg.baseline.auroc == pytest.approx(
        auroc([1 - i["baseline"] for i in scored], wrong))
    assert results.baseline is not None and results.baseline.settings.m == 3
    assert results.model == "fake/unstable"
    again = validate_gamma(run, settings, ctx)
    assert len(backend.history) == before + 36  # baseline samples come from the cache
    assert again.aggregate.gamma == agg.gamma


def test_old_run_reloads_references_from_dataset(ctx: Context, tqa: Path,
                                                 tmp_path: Path) -> None:
    run = tqa_run(ctx, tqa, tmp_path / "run")
    samples = run / "samples.jsonl"
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    stripped = [{k: v for k, v in r.items() if k != "metadata"} for r in records]
    samples.write_text("".join(json.dumps(r) + "\n" for r in stripped))
    fresh = validate_gamma(run, ValidateSettings(baseline_samples=0, resamples=100), ctx)
    assert fresh.aggregate.rules == {"tqa-similarity": 12}
    info = json.loads((run / "run.json").read_text())
    info["config"]["dataset"] = "truthfulqa:moved/TruthfulQA.csv"
    (run / "run.json").write_text(json.dumps(info))
    with pytest.raises(DataError, match="--dataset"):
        validate_gamma(run, ValidateSettings(baseline_samples=0), ctx)
    moved = validate_gamma(run, ValidateSettings(baseline_samples=0, resamples=100,
                                                 dataset=f"truthfulqa:{tqa}"), ctx)
    assert moved.aggregate.gamma == fresh.aggregate.gamma


def test_cli_validate_webquestions_and_report(wq: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    run = tmp_path / "wq"
    args = ["gamma", "--dataset", f"webquestions:{wq}",
            "--limit", "8", "--model", "fake/echo", "--embedder", "hash/default", "-n", "2",
            "--out", str(run), "-q"]
    assert runner.invoke(main, args).exit_code == 0
    result = runner.invoke(main, ["validate", "gamma", str(run), "--baseline-samples", "2",
                                  "--resamples", "200", "-q"])
    assert result.exit_code == 0, result.output
    # fake/echo repeats the question, which never contains the gold answer
    assert "labelled 8 of 8 answers (8 by contains); accuracy 0.000" in result.output
    assert "AUROC for flagging incorrect answers (n = 8: 8 incorrect, 0 correct)" in result.output
    assert "16 model calls" in result.output
    report = (run / "report.html").read_text(encoding="utf-8")
    assert "Validation against labels" in report and "Accuracy against γ" in report
    again = runner.invoke(main, ["validate", "gamma", str(run), "--baseline-samples", "2",
                                 "--resamples", "200", "--json"])
    assert json.loads(again.output)["labels"]["rules"] == {"contains": 8}


def test_cli_validate_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    run = tmp_path / "p"
    assert runner.invoke(main, ["gamma", "What is 2+2?", "--model", "fake/stable", "--embedder",
                                "hash/default", "--out", str(run), "-q"]).exit_code == 0
    result = runner.invoke(main, ["validate", "gamma", str(run)])
    assert result.exit_code != 0 and "no reference answers" in result.output
    recorded = tmp_path / "rec.jsonl"
    recorded.write_text(json.dumps({"prompt": "Capital of France?", "answer": "Paris",
                                    "perturbed_answers": ["Paris"]}) + "\n")
    rec_run = tmp_path / "rec"
    assert runner.invoke(main, ["gamma", "--recorded", str(recorded), "--embedder",
                                "hash/default", "--out", str(rec_run), "-q"]).exit_code == 0
    result = runner.invoke(main, ["validate", "gamma", str(rec_run), "--judge", "fake/constant"])
    assert result.exit_code != 0 and "--baseline-samples 0" in result.output
    result = runner.invoke(main, ["validate", "gamma", str(tmp_path)])
    assert result.exit_code != 0 and "not a veracity run directory" in result.output


def test_items_the_model_rejected_are_left_out_of_validation(ctx: Context, tqa: Path,
                                                            tmp_path: Path) -> None:
    run = tqa_run(ctx, tqa, tmp_path / "run")
    samples = run / "samples.jsonl"
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    records[0] |= {"gamma": None, "error": "model error: prompt too long"}  # a run before kinds
    del records[0]["error_kind"]
    records[1] |= {"gamma": None, "error": "server fault: HTTP 503", "error_kind": "server"}
    samples.write_text("".join(json.dumps(r) + "\n" for r in records))
    results = validate_gamma(run, ValidateSettings(baseline_samples=2, resamples=50), ctx)
    assert results.excluded_model_errors == [records[0]["id"], records[1]["id"]]
    assert len(results.items) == 10
    assert not {records[0]["id"], records[1]["id"]} & {i.id for i in results.items}
