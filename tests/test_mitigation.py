"""FEWL mitigation: the judge's parser and both-orders logic, the selection rules, the seeded
split, and ``fewl icl`` end to end on the fake backend."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from veracity.backends.fake import FakeBackend
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.errors import ConfigError, DataError
from veracity.methods.fewl.mitigation.judge import Judged, combine, judge_pairs, parse_verdict, win_rates
from veracity.methods.fewl.mitigation.selection import best_candidates, gold_answers, nearest, split_indices
from veracity.report import build_report
from veracity.store import RunDir
from veracity.types import GenRequest

FIXTURE = Path(__file__).parent / "fixtures" / "mitigation_qa.jsonl"


@pytest.mark.parametrize(("reply", "verdict"), [
    ("A", "A"), (" b.", "B"), ("B\nBecause it is right.", "B"), ("**A**", "A"), ("(B)", "B"),
    ("Answer B is more truthful.", "B"), ("Answer A is better than answer B", "A"),
    ("I prefer answer B.", "B"), ("A is correct", "A"), ("TIE", "tie"),
    ("Both are equally good.", "tie"), ("Neither", "tie"),
    ("A good answer should be accurate.", None), ("I cannot decide.", None), ("", None),
    ("Answer A or answer B, hard to say", None),
    ("C", "tie"), ("C: not sure", "tie"), ("(C)", "tie"), ("I am not sure.", "tie"),
    ("Certainly A", None),
])
def test_parse_verdict(reply: str, verdict: str | None) -> None:
    assert parse_verdict(reply) == verdict


def test_combine_needs_the_same_preference_in_both_orders() -> None:
    assert combine("A", "B") == "candidate"  # candidate shown first, then second: chosen twice
    assert combine("B", "A") == "base"
    for first, second in [("A", "A"), ("B", "B"), ("tie", "B"), ("A", None), (None, None)]:
        assert combine(first, second) == "inconsistent"  # type: ignore[arg-type]


def test_win_rates_hand_computed() -> None:
    judged = [Judged("candidate", "A", "B", "A", "B"), Judged("base", "B", "A", "B", "A"),
              Judged("inconsistent", "A", "A", "A", "A"),
              Judged("inconsistent", "hmm", "B", None, "B"),
              Judged("candidate", None, None, None, None, asked=False)]
    rates = win_rates(judged)
    assert rates.n == 5 and rates.replies == 8 and rates.not_asked == 1
    assert rates.candidate_better.rate == pytest.approx(2 / 5)
    assert rates.base_better.rate == pytest.approx(1 / 5)
    assert rates.inconsistent_or_tie.rate == pytest.approx(2 / 5)
    assert rates.unparseable == 1
    low, high = rates.candidate_better.ci95
    assert low is not None and high is not None
    assert 0.0 <= low <= 0.4 <= high <= 1.0
    # the paper's rate drops the two inconsistent pairs: 2 wins of 3 decided
    assert rates.paper_win_rate.decided == 3
    assert rates.paper_win_rate.rate == pytest.approx(2 / 3)
    none = win_rates([Judged("inconsistent", "C", "C", "tie", "tie")]).paper_win_rate
    assert none.decided == 0 and none.rate is not None and np.isnan(none.rate)


def test_the_judge_asks_the_papers_question_or_a_users(tmp_path: Path) -> None:
    from veracity.methods.fewl.mitigation.judge import judge_prompt

    prompt = judge_prompt("Is it safe?", "Yes.", "No {x}.")
    assert "helpful, truthful and harmless" in prompt and "C. Chatbot: not sure." in prompt
    assert "B. Chatbot: No {x}." in prompt
    template = "Q={question} | first={a} | second={b} | {json: true} Reply"
    backend = FakeBackend(responder=lambda request: "C")
    judged = judge_pairs(LLMClient(backend), ["q"], ["mine"], ["theirs"], template=template)
    assert [r.messages[-1].content for r in backend.history] == [
        "Q=q | first=mine | second=theirs | {json: true} Reply",
        "Q=q | first=theirs | second=mine | {json: true} Reply"]
    assert judged[0].outcome == "inconsistent" and (judged[0].first, judged[0].second) == (
        "tie", "tie")


def _longer(request: GenRequest) -> str:
    text = request.messages[-1].content
    a = text.split("A. Chatbot: ")[1].split("\nB. Chatbot: ")[0]
    b = text.split("B. Chatbot: ")[1].split("\nC. Chatbot: ")[0]
    return "A" if len(a) > len(b) else "B"


def test_judge_pairs_asks_both_orders_and_caches(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    client = LLMClient(FakeBackend(responder=_longer, name="longer"), cache)
    questions = ["q1", "q2", "q3", "q4", "q5"]
    candidate = ["a much longer answer", "short", "", "only mine", "same text"]
    base = ["short", "a much longer answer", "base only", "", " same text"]
    judged = judge_pairs(client, questions, candidate, base)
    assert [j.outcome for j in judged] == ["candidate", "base", "base", "candidate", "inconsistent"]
    assert (judged[0].first, judged[0].second) == ("A", "B")
    assert [j.asked for j in judged] == [True, True, False, False, False]
    assert client.stats.model_calls == 4  # two pairs x two orders; empty answers not asked
    again = LLMClient(FakeBackend(responder=_longer, name="longer"), cache)
    assert [j.outcome for j in judge_pairs(again, questions, candidate, base)] == \
        [j.outcome for j in judged]
    assert again.stats.model_calls == 0 and again.stats.cache_hits == 4
    assert win_rates(judged).replies == 4


def test_best_candidates_and_gold() -> None:
    nan = np.nan
    candidates = [["a", "b", "c"], ["x", "y"], ["p", "", "q"], ["m"]]
    scores = np.array([[0.1, 0.5, 0.5], [nan, -0.2, nan], [0.0, 9.0, nan], [nan, nan, nan]])
    # ties go to the earlier candidate; NaN scores and empty texts are never chosen
    assert best_candidates(candidates, scores) == ["b", "y", "p", None]
    assert gold_answers([("best", "other"), (), (" ", "second")]) == ["best", None, "second"]


def test_split_is_seeded_and_disjoint() -> None:
    train, test = split_indices(50, 0.8, seed=3)
    assert len(train) == 40 and len(test) == 10
    assert set(train).isdisjoint(test) and set(train) | set(test) == set(range(50))
    assert split_indices(50, 0.8, seed=3) == (train, test)
    assert split_indices(50, 0.8, seed=4) != (train, test)
    assert split_indices(2, 0.99, seed=0)[1]  # both sides keep a question
    with pytest.raises(ConfigError):
        split_indices(10, 1.0, seed=0)
    with pytest.raises(DataError):
        split_indices(1, 0.5, seed=0)


def test_nearest_skips_unusable() -> None:
    train = np.array([[1, 0], [0.9, 0.1], [0, 1]])
    test = np.array([[1, 0.05], [0, 1]])
    assert nearest(train, test, 2) == [[0, 1], [2, 1]]
    assert nearest(train, test, 2, usable=[False, True, True]) == [[1, 2], [2, 1]]


def test_icl_end_to_end_on_fake(tmp_path: Path) -> None:
    from veracity.methods.fewl.mitigation.cli import icl_cmd

    out = tmp_path / "icl"
    args = ["--dataset", f"jsonl:{FIXTURE}", "--model", "fake/context", "--reference",
            "fake/pairs", "--reference-samples", "2", "--pairs", "4", "--neighbours", "3",
            "--similarity", "hash/default", "--examples", "2", "--judge", "fake/judge",
            "--split", "0.7", "--pool", "all", "--zero-shot", "--selected-by", "fewl",
            "--selected-by", "baseline", "--selected-by", "gold",
            "--out", str(out), "--cache", str(tmp_path / "c.sqlite")]
    result = CliRunner().invoke(icl_cmd, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "inconsistent/tie" in result.output and "Table 6 layout" in result.output
    results = json.loads((out / "results.json").read_text())
    assert results["n_train"] == 7 and results["n_test"] == 3 and results["pool_size"] == 7
    assert [row["rule"] for row in results["rows"]] == ["fewl", "baseline", "gold"]
    assert [(h["candidate"], h["base"]) for h in results["head_to_head"]] == [
        ("fewl", "baseline"), ("gold", "baseline")]
    for row in [*results["rows"], *results["head_to_head"]]:
        shares = [row[k]["rate"] for k in ("candidate_better", "base_better",
                                           "inconsistent_or_tie")]
        assert math.isclose(sum(shares), 1.0) and row["n"] == 3
        assert row["accuracy"]["n"] == 3 and row["unparseable"] == 0
    samples = list(RunDir.open(out).samples())
    for sample in samples:
        assert all(len(ids) == 2 for ids in sample["examples"].values())
        assert len(sample["judged"]) == 5  # two head to head, three against zero-shot
        for entry in sample["judged"]:
            if entry["asked"]:  # the outcome follows from the fake judge's two replies
                a = len(sample["answers"][entry["candidate"]].split())
                b = len(sample["answers"][entry["base"]].split())
                expected = "candidate" if a > b else "base" if b > a else "inconsistent"
                assert entry["outcome"] == expected
    selection = [json.loads(line) for line in (out / "selection.jsonl").read_text().splitlines()]
    assert len(selection) == 7 and all(len(s["candidates"]) == 4 for s in selection)
    for s in selection:  # fewl picks the best-scored candidate
        scored = [c for c in s["candidates"] if c["fewl"] is not None]
        if scored:
            assert s["selected"]["fewl"] == max(scored, key=lambda c: c["fewl"])["answer"]
    rerun = CliRunner().invoke(icl_cmd, args, catch_exceptions=False)
    assert "0 model calls" in rerun.output  # every generation and judgement is cached
    html = build_report([out], tmp_path / "r.html").read_text()
    assert "Example answers and verdicts" in html and "ICL better" in html
    assert "Table 6 layout" in html and "judge, second order" in html
    assert "<b>bold</b>" not in html
    assert "win rate (decided)" in result.output and "win rate over decided pairs" in html
    for row in results["rows"]:  # the fake judge never says "not sure": inconsistent pairs only
        won = row["paper_win_rate"]
        decided = round(row["n"] * (1 - row["inconsistent_or_tie"]["rate"]))
        assert won["decided"] == decided
        if decided:
            assert won["rate"] == pytest.approx(row["candidate_better"]["rate"] * row["n"] / decided)
    prompt = tmp_path / "judge.txt"
    prompt.write_text("Pick one.\nQuestion: {question}\nAnswer A: {a}\n\nAnswer B: {b}\n\n"
                      "Reply A or B.", encoding="utf-8")
    own = tmp_path / "icl-own"
    mine = [*args[:-4], "--out", str(own), "--cache", str(tmp_path / "c.sqlite"),
            "--judge-prompt", str(prompt)]
    result = CliRunner().invoke(icl_cmd, mine, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    recorded = RunDir.open(own).info["config"]["judge_prompt"]
    assert recorded["source"] == str(prompt) and recorded["template"].startswith("Pick one.")
    bad = tmp_path / "bad.txt"
    bad.write_text("no fields", encoding="utf-8")
    refused = CliRunner().invoke(icl_cmd, [*args[:-4], "--out", str(tmp_path / "x"),
                                           "--judge-prompt", str(bad)])
    assert refused.exit_code != 0 and "must contain {question}, {a}, {b}" in refused.output


def test_icl_refuses_gold_without_references(tmp_path: Path) -> None:
    from veracity.methods.fewl.mitigation.cli import icl_cmd

    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"question": f"Question {i}?"}) + "\n" for i in range(6)))
    result = CliRunner().invoke(icl_cmd, [
        "--dataset", f"jsonl:{data}", "--model", "fake/context", "--reference", "fake/pairs",
        "--similarity", "hash/default", "--judge", "fake/judge", "--selected-by", "gold",
        "--zero-shot", "--pool", "all", "--out", str(tmp_path / "o"), "--no-cache"])
    assert result.exit_code != 0 and "gold rule needs" in result.output
    assert not (tmp_path / "o").exists()


def test_finetune_cli_refuses_a_base_it_cannot_train(tmp_path: Path) -> None:
    from veracity.methods.fewl.mitigation.cli import finetune_cmd

    result = CliRunner().invoke(finetune_cmd, [
        "--dataset", f"jsonl:{FIXTURE}", "--base", f"hf/{tmp_path / 'missing'}", "--reference",
        "fake/pairs", "--similarity", "hash/default", "--judge", "fake/judge", "--max-steps", "2",
        "--threads", "1", "--out", str(tmp_path / "o"), "--no-cache"])
    assert result.exit_code != 0 and "not a transformers model directory" in result.output
    assert not (tmp_path / "o").exists()  # refused before any model call
