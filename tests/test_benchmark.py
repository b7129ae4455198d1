"""``veracity benchmark`` end to end on the fake backend: the equal budget counted at the
client, the cache shared with a γ run, score-only runs, the label sources and the exports."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("sklearn")

from veracity.cli import main  # noqa: E402
from veracity.data.qa import load_builtin  # noqa: E402
from veracity.errors import ConfigError  # noqa: E402
from veracity.method import Signal, SignalRequest  # noqa: E402
from veracity.methods.benchmark import core  # noqa: E402
from veracity.methods.benchmark.core import BenchmarkSettings  # noqa: E402
from veracity.methods.benchmark.records import (  # noqa: E402
    BenchmarkSummary,
    LabelTable,
    SignalInfo,
)
from veracity.methods.benchmark.run import (  # noqa: E402
    leaderboard_csv,
    run_benchmark,
    score_recorded,
)
from veracity.methods.gamma.core import GammaSettings  # noqa: E402
from veracity.methods.gamma.run import run_gamma  # noqa: E402
from veracity.metrics import METRICS, Estimate  # noqa: E402
from veracity.runs.common import Context  # noqa: E402
from veracity.types import GenRequest  # noqa: E402

FAST = {"resamples": 200, "folds": 3}


def test_each_method_spends_its_share_of_the_budget_counted_at_the_client(ctx: Context) -> None:
    items = load_builtin()[:9]
    settings = BenchmarkSettings(budget=4, labels=("contains",), methods=("gamma", "consistency"),
                                 **FAST)
    outcome = run_benchmark(items, "fake/unstable", "hash/default", settings, ctx, None, "builtin")
    costs = outcome.results["costs"]
    assert costs["greedy answers"]["requests"] == 9  # one shared greedy answer per question
    assert costs["gamma"]["requests"] == 9 * 3  # N = K - 1
    assert costs["consistency"]["requests"] == 9 * 3  # M = K - 1
    assert costs["gamma"]["requests_per_question"] == 3
    # what was counted is what the backend saw
    backend = ctx.client("fake/unstable").backend
    assert len(backend.history) == 9 + 27 + 27  # type: ignore[attr-defined]


def test_a_method_that_overspends_is_refused(ctx: Context, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    def greedy_method(ctx: Context, request: SignalRequest) -> list[Signal]:
        client = ctx.client(request.model or "")
        asked = [GenRequest.user(f"{item.question} #{k}") for item in request.items
                 for k in range(request.budget)]  # one call too many per question
        client.generate(asked)
        return [Signal("greedy", tuple(0.0 for _ in request.items), False, False)]

    monkeypatch.setattr(core, "signal_function", lambda method: greedy_method)
    settings = BenchmarkSettings(budget=3, methods=("consistency",), **FAST)
    with pytest.raises(ConfigError, match="over its budget of 2 per question"):
        run_benchmark(load_builtin()[:5], "fake/unstable", "hash/default", settings, ctx, None,
                      "builtin")


def test_a_benchmark_after_a_gamma_run_makes_no_new_greedy_call(ctx: Context) -> None:
    items = load_builtin()[:6]
    run_gamma(items, "fake/unstable", "hash/default", GammaSettings(n=10), ctx)
    client = ctx.client("fake/unstable")
    calls_before = client.stats.model_calls
    settings = BenchmarkSettings(budget=11, methods=("gamma", "length", "logprob"), **FAST)
    outcome = run_benchmark(items, "fake/unstable", "hash/default", settings, ctx, None,
                            "builtin")
    costs = outcome.results["costs"]
    assert costs["greedy answers"]["requests"] == 6
    assert costs["greedy answers"]["model_calls"] == 0  # the γ run's centre answers
    assert costs["gamma"]["model_calls"] == 0  # and its perturbed answers
    assert costs["length"]["requests"] == 0
    # the cached answers carry no log-probabilities: logprob asks for them, and pays
    assert costs["logprob"]["requests"] == costs["logprob"]["model_calls"] == 6
    assert client.stats.model_calls == calls_before + 6


def _recorded(tmp_path: Path) -> Path:
    """Right answers whose samples repeat them, wrong ones whose samples wander: the
    self-consistency signal separates them perfectly."""
    rows = []
    for k in range(12):
        right = k % 2 == 0
        answer = f"answer number {k}"
        samples = [answer] * 3 if right else [f"something else {k} {j}" for j in range(3)]
        rows.append({"id": f"q{k}", "question": f"question {k}?", "answer": answer,
                     "samples": samples, "references": [answer if right else "nope"],
                     "correct": right})
    path = tmp_path / "recorded.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_score_only_on_a_recorded_file(ctx: Context, tmp_path: Path) -> None:
    settings = BenchmarkSettings(labels=("contains",), **FAST)
    outcome = score_recorded(_recorded(tmp_path), "hash/default", settings, ctx,
                             tmp_path / "run")
    results = outcome.results
    assert ctx.model_calls() == 0
    assert {s["method"] for s in results["skipped"]} == {"gamma", "fewl", "logprob", "p-true"}
    table = results["tables"]["recorded"]
    assert table["n"] == 12 and table["n_wrong"] == 6
    assert table["metrics"]["consistency"]["auroc"] == 1.0
    assert table["metrics"]["consistency"]["prr"] == pytest.approx(1.0)
    # contains agrees with the recorded labels here
    assert results["tables"]["contains"]["metrics"]["consistency"]["auroc"] == 1.0
    samples = [json.loads(line) for line in
               (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert samples[0]["labels"] == {"recorded": True, "contains": True}
    assert set(samples[0]["scores"]) == {"consistency", "length", "semantic-entropy"}
    # right answers: one meaning cluster; wrong ones: three
    assert table["metrics"]["semantic-entropy"]["auroc"] == 1.0


def test_a_run_directory_held_by_another_run_is_refused_before_any_model_call(
        ctx: Context, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, pathlib\n"
         "from veracity.runlock import claim_run_dir\n"
         "claim_run_dir(pathlib.Path(sys.argv[1])); print('held', flush=True); sys.stdin.read()",
         str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        settings = BenchmarkSettings(budget=3, labels=("contains",), methods=("consistency",),
                                     **FAST)
        with pytest.raises(ConfigError, match=f"in use by another run \\(pid {holder.pid} "):
            run_benchmark(load_builtin()[:3], "fake/unstable", "hash/default", settings, ctx,
                          out, "builtin")
    finally:
        holder.communicate("")
    backend = ctx.client("fake/unstable").backend
    assert backend.history == []  # type: ignore[attr-defined]


def test_cli_tables_json_keys_run_directory_and_report(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    # fake/unstable babbles 8 of 24 words: about a third of its answers contain "paris"
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{k}", "question": f"Question {k}?",
                                             "references": ["paris"]}) + "\n"
                                 for k in range(12)), encoding="utf-8")
    result = CliRunner().invoke(main, [
        "benchmark", "--dataset", f"jsonl:{questions}", "--model", "fake/unstable",
        "--embedder", "hash/default", "--budget", "3", "--labels", "contains,exact",
        "--labels", "rouge-l", "--resamples", "200", "--folds", "3", "--out", str(out),
        "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert set(found["tables"]) == {"contains", "exact", "rouge-l"}
    contains = found["tables"]["contains"]
    assert 0 < contains["n_wrong"] < contains["n"] == 12
    for row in contains["metrics"].values():
        assert {"auroc", "prr", "auprc", "aurc", "e_aurc", "ece", "brier"} <= set(row)
    assert "fused" in contains["metrics"]
    # exact: a babbled sentence never equals "paris"
    assert found["tables"]["exact"]["n_wrong"] == 12 and "problem" in found["tables"]["exact"]
    assert any("disagree" in w for w in found["warnings"])
    for name in ("samples.jsonl", "benchmark.json", "benchmark.csv", "report.html"):
        assert (out / name).is_file(), name
    report = (out / "report.html").read_text(encoding="utf-8")
    verdict = report.index("best signal")
    assert verdict < report.index("Every answer")
    assert "risk–coverage curves, labels contains" in report
    assert "reliability diagrams, labels contains" in report
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 12
    assert set(records[0]["scores"]) == {
        "gamma", "consistency", "length", "logprob.mean", "logprob.min", "logprob.entropy",
        "logprob.perplexity", "semantic-entropy"}
    # babble names neither True nor False: P(True) is left out, saying why
    assert {"method": "p-true", "reason": "no question could be scored"} in found["skipped"]
    costs = found["costs"]
    assert costs["greedy answers"]["requests_per_question"] == 1
    assert costs["logprob"]["requests"] == costs["length"]["requests"] == 0
    assert costs["p-true"]["requests_per_question"] == 1
    assert costs["semantic-entropy"]["requests_per_question"] == 2
    # charged for its samples, which are the very draws self-consistency asked for
    assert costs["semantic-entropy"]["model_calls"] == 0
    assert set(records[0]["labels"]) == {"contains", "exact", "rouge-l"}


def test_cli_prints_the_leaderboard(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "benchmark", "--recorded", str(_recorded(tmp_path)), "--embedder", "hash/default",
        "--resamples", "200", "--folds", "3"])
    assert result.exit_code == 0, result.output
    assert "labels: recorded: 12 of 12 answers" in result.output
    assert "consistency" in result.output
    assert "skipped gamma" in result.output


def test_leaderboard_csv_cannot_run_formulas() -> None:
    est = Estimate(-0.5, -0.6, -0.4)
    table = LabelTable(4, 4, 2, 0.5, reference="@x",
                       rows={"=HYPERLINK(1)": {k: est for k in METRICS}})
    summary = BenchmarkSummary(None, "hash/default", "prompts", 4, BenchmarkSettings(), METRICS,
                               (SignalInfo("=HYPERLINK(1)", "x", False, True),), (), {},
                               {"=1+2": table}, ())
    rows = list(csv.reader(io.StringIO(leaderboard_csv(summary))))
    assert rows[1][:5] == ["'=1+2", "'=HYPERLINK(1)", "4", "2", "'@x"]
    assert rows[1][5] == "-0.5"  # numbers stay numbers
    assert rows[1][8] == ""  # no difference: an empty cell


def test_disagreeing_label_sources_are_warned_about(ctx: Context, tmp_path: Path) -> None:
    path = _recorded(tmp_path)
    sheet = tmp_path / "sheet.csv"
    # a person who marks every other answer the opposite way
    sheet.write_text("id,correct\n" + "".join(f"q{k},{'1' if k % 2 else '0'}\n"
                                              for k in range(12)), encoding="utf-8")
    settings = BenchmarkSettings(labels=(f"sheet:{sheet}",), **FAST)
    results = score_recorded(path, "hash/default", settings, ctx, None).results
    assert any("disagree on 12 of 12" in w for w in results["warnings"])


def test_a_validated_gamma_report_says_how_well_gamma_separates_on_its_first_screen(
        tmp_path: Path) -> None:
    runner = CliRunner()
    run = tmp_path / "g"
    assert runner.invoke(main, ["gamma", "--dataset", "builtin", "--limit", "8", "--model",
                                "fake/unstable", "--embedder", "hash/default", "-n", "2",
                                "--out", str(run), "-q"]).exit_code == 0
    result = runner.invoke(main, ["validate", "gamma", str(run), "--baseline-samples", "2",
                                  "--resamples", "200", "-q"])
    assert result.exit_code == 0, result.output
    report = (run / "report.html").read_text(encoding="utf-8")
    said = report.index("AUROC of γ for flagging wrong answers")
    assert said < report.index("Every answer")
    assert "self-consistency baseline (M=2" in report[said:report.index("Every answer")]


def test_every_signal_target_loads_through_the_registry() -> None:
    from veracity.method import methods, signal_function

    assert core.chosen_methods(()) == ["gamma", "fewl", "consistency", "logprob", "length",
                                       "semantic-entropy", "p-true"]
    for method in methods():
        if getattr(method, "signal", ""):
            assert callable(signal_function(method))
    with pytest.raises(ConfigError, match="cannot be benchmarked"):
        core.chosen_methods(("deception",))


def test_a_second_run_resumes_from_the_cache_with_no_model_call(ctx: Context) -> None:
    items = load_builtin()[:5]
    settings = BenchmarkSettings(budget=3, **FAST)
    first = run_benchmark(items, "fake/unstable", "hash/default", settings, ctx, None, "builtin")
    again = run_benchmark(items, "fake/unstable", "hash/default", settings, ctx, None, "builtin")
    assert sum(c["model_calls"] for c in first.results["costs"].values()) > 0
    assert all(c["model_calls"] == 0 for c in again.results["costs"].values())
    assert [r.scores for r in again.records] == [r.scores for r in first.records]


def test_fewl_joins_when_references_are_given_at_its_share_of_the_budget(ctx: Context) -> None:
    from veracity.methods.fewl.modes import budget_split, run_fewl
    from veracity.methods.fewl.pairs import PairSettings
    from veracity.methods.fewl.run import AnswerSource, FewlSettings

    items = load_builtin()[:8]
    references = ("fake/pairs", "fake/stable")
    settings = BenchmarkSettings(budget=6, methods=("fewl", "length"), references=references,
                                 **FAST)
    outcome = run_benchmark(items, "fake/unstable", "hash/default", settings, ctx, None,
                            "builtin")
    # K - 1 = 5 calls a question: one pair call, J = 2 answers from each of the 2 references
    assert budget_split(6, 2) == (2, 0)
    cost = outcome.summary.costs["fewl"]
    assert cost.requests == 8 * (1 + 2 * 2) and cost.per_question(8) == 5
    history = {spec: len(ctx.client(spec).backend.history)  # type: ignore[attr-defined]
               for spec in references}
    assert history == {"fake/pairs": 8 * (1 + 2), "fake/stable": 8 * 2}
    info = next(s for s in outcome.summary.signals if s.name == "fewl")
    assert info.method == "fewl" and info.higher_is_better and not info.baseline
    assert info.n_scored == 8 and info.settings["J"] == 2
    # the very values FEWL's own run gives the same greedy answers with the same settings
    own = run_fewl(items, [AnswerSource("greedy", texts=tuple(r.answer for r in outcome.records))],
                   FewlSettings(references=references, reference_samples=2,
                                pairs=PairSettings(retries=0), max_tokens=64,
                                similarity="hash/default", question_embedder="hash/default",
                                neighbours=7), ctx)
    assert [r.scores["fewl"] for r in outcome.records] == pytest.approx(
        [r.value for r in own.records], rel=1e-12)


def test_fewl_is_left_out_without_references_or_budget(ctx: Context) -> None:
    items = load_builtin()[:6]
    plain = run_benchmark(items, "fake/unstable", "hash/default",
                          BenchmarkSettings(budget=3, methods=("fewl", "length"), **FAST), ctx,
                          None, "builtin").summary
    assert plain.skipped[0].method == "fewl" and "--reference" in plain.skipped[0].reason
    short = run_benchmark(items, "fake/unstable", "hash/default",
                          BenchmarkSettings(budget=3, methods=("fewl", "length"),
                                            references=("fake/pairs", "fake/stable"), **FAST),
                          ctx, None, "builtin").summary
    assert "needs a budget of at least 4" in short.skipped[0].reason
    assert [s.name for s in short.signals] == ["length"]


def test_cli_reference_models_bring_fewl_into_the_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "benchmark", "--recorded", str(_recorded(tmp_path)), "--embedder", "hash/default",
        "--reference", "fake/pairs", "--reference", "fake/stable", "--budget", "6",
        "--resamples", "200", "--folds", "3", "--no-cache", "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["settings"]["references"] == ["fake/pairs", "fake/stable"]
    assert "fewl" in found["tables"]["recorded"]["metrics"]
    assert found["costs"]["fewl"]["requests_per_question"] == 5  # the budget's K - 1
    assert "fewl" not in {s["method"] for s in found["skipped"]}
