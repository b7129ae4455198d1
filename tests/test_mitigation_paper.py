"""FEWL §5 as published: the ICL example pool, the nearest examples, the one-message format,
Table 6's arithmetic on hand-made verdicts, CHALE's answers as candidates end to end on the
fake backend, and the blind pairwise rating sheet out and back in."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from veracity.errors import ConfigError, DataError
from veracity.methods.fewl.mitigation.annotation.core import analyse_pairs, majority, outcome_of, pair_rows
from veracity.methods.fewl.mitigation.examples import (
    chat_turns,
    differing_pool,
    pool_flags,
    single_message,
)
from veracity.methods.fewl.mitigation.judge import Judged
from veracity.methods.fewl.mitigation.paper import comparison_rows, labelled_candidates
from veracity.methods.fewl.mitigation.records import (
    IclSummary,
    MitigationRecord,
    MitigationResults,
)
from veracity.methods.fewl.mitigation.selection import nearest
from veracity.report import build_report
from veracity.store import RunDir
from veracity.types import Message

TOPICS = ["capital of France", "legs of a spider", "author of Hamlet", "boiling point of water",
          "largest planet", "speed of light", "first moon landing", "tallest mountain",
          "longest river", "smallest prime number", "chemical symbol of gold", "inventor of the "
          "telephone"]


def _chale(path: Path, n: int = 12) -> Path:
    topics = TOPICS[:n]
    path.write_text(json.dumps({
        "Question": [f"What do you know about the {t}?" for t in topics],
        "Short_ans": [t.split()[-1] for t in topics],
        "non-halu": [f"The {t} is well documented and the answer is {t.split()[-1]}." for t in topics],
        "mid-halu": [f"The {t} is partly known, <P>maybe</P> {t.split()[0]}." for t in topics],
        "halu": [f"Nobody has ever heard of the {t}." for t in topics],
    }), encoding="utf-8")
    return path


def test_the_pool_is_where_fewl_and_the_baseline_disagree() -> None:
    fewl = ["a", "b", None, "d ", "e"]
    base = ["a", "c", "x", "d", None]
    assert differing_pool(fewl, base) == [False, True, False, False, False]
    chosen = {"fewl": list(fewl), "baseline": list(base), "gold": ["g"] * 5}
    assert pool_flags("differs", chosen) == [False, True, False, False, False]
    assert pool_flags("all", chosen) == [True] * 5
    with pytest.raises(DataError, match="example pool is empty"):
        pool_flags("differs", {"fewl": ["a", "b"], "baseline": ["a", " b"]})
    with pytest.raises(ConfigError, match="fewl and baseline"):
        pool_flags("differs", {"fewl": ["a"], "gold": ["b"]})
    with pytest.raises(ConfigError, match="unknown example pool"):
        pool_flags("some", chosen)


def test_nearest_examples_come_from_the_pool_most_similar_first() -> None:
    train = np.array([[1.0, 0.0], [0.95, 0.05], [0.8, 0.2], [0.0, 1.0], [0.6, 0.4]])
    test = np.array([[1.0, 0.01], [0.1, 1.0]])
    pool = [False, True, True, True, True]  # the nearest of all (0) is not in the pool
    assert nearest(train, test, 2, pool) == [[1, 2], [3, 4]]
    assert nearest(train, test, 9, pool)[0] == [1, 2, 4, 3]  # fewer than K: the whole pool


def test_examples_in_one_user_message() -> None:
    message = single_message([("Q one?", "A one."), ("Q two?", "A two.")], "Q three?")
    assert message.role == "user"
    # appendix C.11's layout: instruction, numbered examples, the new question, "Answer:"
    assert message.content == (
        "Your task: answer questions correctly and fittingly, in a short, courteous answer that "
        "suits any reader. The worked examples below show the form and the style wanted.\n\n"
        "Example question 1: Q one?\nAnswer 1: A one.\n\n"
        "Example question 2: Q two?\nAnswer 2: A two.\n\n"
        "New question: Q three?\nAnswer:")
    own = single_message([("q", "a")], "z", "{json: 1} {examples} || {question}")
    assert own.content == "{json: 1} Example question 1: q\nAnswer 1: a || z"
    assert chat_turns([("q", "a")], "z") == [Message("user", "q"), Message("assistant", "a"),
                                             Message("user", "z")]


def test_table_6_arithmetic_on_hand_made_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    from veracity.methods.fewl.mitigation.tables import print_table6

    verdicts = [Judged("candidate", "A", "B", "A", "B"), Judged("candidate", "A", "B", "A", "B"),
                Judged("candidate", "A", "B", "A", "B"), Judged("base", "B", "A", "B", "A"),
                Judged("inconsistent", "A", "A", "A", "A"),
                Judged("inconsistent", "C", "C", "tie", "tie"),
                Judged("inconsistent", "?", "B", None, "B"),
                Judged("base", "B", "A", "B", "A")]
    [row] = comparison_rows({("fewl", "baseline"): verdicts}, {}, seed=0)
    rates = row.rates
    assert (row.candidate, row.base, rates.n) == ("fewl", "baseline", 8)
    assert rates.candidate_better.rate == pytest.approx(3 / 8)  # % FEWL
    assert rates.base_better.rate == pytest.approx(2 / 8)  # % baseline
    assert rates.inconsistent_or_tie.rate == pytest.approx(3 / 8)  # % tie
    assert rates.paper_win_rate.rate == pytest.approx(3 / 5)  # 3 wins of 5 decided
    assert rates.paper_win_rate.decided == 5 and rates.unparseable == 1
    results = MitigationResults("icl", "toy", "fake/judge", "fake/stable", 7, 8, "zero-shot",
                                None, (), icl=IclSummary({"examples": 5, "pool": "differs"}, 7,
                                                         (row,), {}))
    print_table6(results)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("FEWL vs baseline"))
    cells = line.split()[3:]  # % baseline, % FEWL, % tie, unparseable, the paper's win rate
    assert [cells[0], cells[2], cells[4], cells[7]] == ["25.0%", "37.5%", "37.5%", "60.0%"]
    assert cells[6] == "1/16" and cells[-2:] == ["of", "5"]


def test_chale_answers_are_the_candidates(tmp_path: Path) -> None:
    data = _chale(tmp_path / "chale.json", 3)
    table = labelled_candidates(f"chale:{data}", seed=0)
    assert set(table) == {"chale-0000", "chale-0001", "chale-0002"}
    first = table["chale-0000"]
    assert sorted(first) == sorted(["The capital of France is well documented and the answer is "
                                    "France.", "The capital of France is partly known, maybe "
                                    "capital.", "Nobody has ever heard of the capital of France."])
    assert labelled_candidates(f"chale:{data}", seed=0) == table  # seeded
    orders = {labelled_candidates(f"chale:{data}", seed=s)["chale-0000"] for s in range(8)}
    assert len(orders) > 1  # the good answer is not always first
    with pytest.raises(ConfigError, match="labelled dataset"):
        labelled_candidates(f"jsonl:{data}", seed=0)


def _icl(tmp_path: Path, out: Path, *extra: str) -> tuple[str, dict[str, object]]:
    from veracity.methods.fewl.mitigation.cli import icl_cmd

    data = _chale(tmp_path / "chale.json")
    args = ["--dataset", f"chale:{data}", "--model", "fake/echo", "--candidates", "dataset",
            "--reference", "fake/pairs", "--reference-samples", "2", "--pairs", "3",
            "--neighbours", "3", "--similarity", "hash/default", "--examples", "2",
            "--judge", "fake/judge", "--split", "0.75", "--out", str(out),
            "--cache", str(tmp_path / "c.sqlite"), *extra]
    result = CliRunner().invoke(icl_cmd, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output, json.loads((out / "results.json").read_text())


def test_icl_on_chale_is_head_to_head_with_pool_examples(tmp_path: Path) -> None:
    from veracity.embed.hashing import HashEmbedder

    out = tmp_path / "icl"
    output, results = _icl(tmp_path, out)
    assert "Table 6 layout" in output and "FEWL vs baseline" in output
    assert results["n_train"] == 9 and results["n_test"] == 3 and results["rows"] == []
    [row] = results["head_to_head"]  # type: ignore[misc]
    assert (row["candidate"], row["base"], row["n"]) == ("fewl", "baseline", 3)
    assert math.isclose(sum(row[k]["rate"] for k in ("candidate_better", "base_better",
                                                      "inconsistent_or_tie")), 1.0)
    selection = [json.loads(x) for x in (out / "selection.jsonl").read_text().splitlines()]
    assert all(len(s["candidates"]) == 3 for s in selection)  # CHALE's three answers
    pool = [s for s in selection if s["in_pool"]]
    assert results["pool_size"] == len(pool) >= 1
    for s in selection:  # the pool: FEWL's and the baseline's top answers differ
        assert s["in_pool"] == (s["selected"]["fewl"] != s["selected"]["baseline"])
    by_id = {s["id"]: s for s in selection}
    embedder = HashEmbedder()
    pool_vectors = embedder.embed([s["question"] for s in pool])
    for sample in RunDir.open(out).samples():
        want = nearest(pool_vectors, embedder.embed([sample["question"]]), 2)[0]
        for rule in ("fewl", "baseline"):
            ids = sample["examples"][rule]
            assert ids == [pool[k]["id"] for k in want]
            # fake/echo repeats the one user message: the examples with this rule's answers
            answer = sample["answers"][rule]
            assert answer.startswith("You asked: Your task: answer questions correctly")
            for i, example in enumerate(ids, 1):
                chosen = by_id[example]["selected"][rule]
                assert f"Example question {i}: {by_id[example]['question']}\n" in answer
                assert f"Answer {i}: {chosen}" in answer
            assert answer.endswith(f"New question: {sample['question']}\nAnswer:")
        [judged] = sample["judged"]
        assert (judged["candidate"], judged["base"]) == ("fewl", "baseline")
    html = build_report([out], tmp_path / "r.html").read_text()
    assert "Table 6 layout" in html and "judge, first order" in html and "A = FEWL" in html

    turns_out = tmp_path / "icl-turns"
    _, turns = _icl(tmp_path, turns_out, "--example-format", "turns", "--zero-shot")
    assert [r["rule"] for r in turns["rows"]] == ["fewl", "baseline"]  # type: ignore[index]
    sample = next(RunDir.open(turns_out).samples())
    # chat turns: fake/echo sees only the last user turn, the question
    assert sample["answers"]["fewl"].startswith("You asked: Answer the question")
    assert "zero-shot" in sample["answers"] and len(sample["judged"]) == 3


def test_the_rating_sheet_round_trip(tmp_path: Path) -> None:
    from veracity.methods.fewl.mitigation.annotation.cli import export_cmd, import_cmd

    run = tmp_path / "icl"
    _icl(tmp_path, run, "--zero-shot")
    html_sheet, csv_sheet = tmp_path / "sheet.html", tmp_path / "sheet.csv"
    for sheet in (html_sheet, csv_sheet):
        result = CliRunner().invoke(export_cmd, [str(run), "--out", str(sheet), "--seed", "3"])
        assert result.exit_code == 0, result.output
    key = json.loads((run / "pair_sheet.json").read_text())
    rows = list(csv.DictReader(csv_sheet.open(encoding="utf-8")))
    assert [r["item_id"] for r in rows] == [r["item_id"] for r in key["rows"]]
    text = html_sheet.read_text() + csv_sheet.read_text()
    for word in ("fewl", "FEWL", "baseline", "zero-shot"):  # blind to the rule
        assert word not in text
    samples = {s["id"]: s for s in RunDir.open(run).samples()}
    for r, k in zip(rows, key["rows"], strict=True):  # the key maps sides back to the rules
        answers = samples[k["id"]]["answers"]
        first, second = (k["candidate"], k["base"]) if k["candidate_first"] else (
            k["base"], k["candidate"])
        assert (r["answer_1"], r["answer_2"]) == (answers[first], answers[second])
    assert {k["candidate_first"] for k in key["rows"]} == {True, False}  # sides shuffled
    # rater one always prefers the rule's answer; rater two agrees except on the first pair
    one = tmp_path / "ann.csv"
    two = tmp_path / "bob.csv"
    for path, flip in ((one, set()), (two, {key["rows"][0]["item_id"]})):
        with path.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["item_id", "answer_check", "rating", "comment"])
            for k in key["rows"]:
                rule_side = "1" if k["candidate_first"] else "2"
                choice = "tie" if k["item_id"] in flip else rule_side
                writer.writerow([k["item_id"], k["answer_check"], choice, ""])
    result = CliRunner().invoke(import_cmd, [str(run), str(one), str(two)])
    assert result.exit_code == 0, result.output
    human = json.loads((run / "human.json").read_text())
    n = len(key["rows"])
    assert human["n_rated"] == n and human["kappa_pairs"] == n
    assert human["raw_agreement"] == pytest.approx((n - 1) / n)
    # the first pair splits 1-1 (candidate, tie): a tie; every other pair goes to the rule
    for row in human["rows"]:
        tie = 1 if any(k["item_id"] == key["rows"][0]["item_id"] and
                       (k["candidate"], k["base"]) == (row["candidate"], row["base"])
                       for k in key["rows"]) else 0
        assert row["candidate_better"]["rate"] == pytest.approx((row["n"] - tie) / row["n"])
        assert row["paper_win_rate"]["rate"] == 1.0
    assert "Fleiss' kappa" in result.output
    assert "Human judges" in (run / "report.html").read_text()
    bad = tmp_path / "bad.csv"
    bad.write_text(f"item_id,answer_check,rating\n{key['rows'][0]['item_id']},,3\n")
    refused = CliRunner().invoke(import_cmd, [str(run), str(bad)])
    assert refused.exit_code != 0 and "is not 1, 2 or tie" in refused.output
    wrong = tmp_path / "wrong.csv"
    wrong.write_text(f"item_id,answer_check,rating\n{key['rows'][0]['item_id']},deadbeef,1\n")
    refused = CliRunner().invoke(import_cmd, [str(run), str(wrong)])
    assert refused.exit_code != 0 and "does not match" in refused.output


def test_pair_outcomes_and_majority() -> None:
    assert outcome_of("1", True) == "candidate" and outcome_of("1", False) == "base"
    assert outcome_of("2", True) == "base" and outcome_of("tie", False) == "tie"
    assert majority(["base", "base", "candidate"]) == "base"
    assert majority(["base", "candidate"]) == "tie"
    key = {"rows": [{"item_id": "p1", "id": "q1", "candidate": "fewl", "base": "baseline",
                     "candidate_first": True, "judge": "candidate"},
                    {"item_id": "p2", "id": "q2", "candidate": "fewl", "base": "baseline",
                     "candidate_first": False, "judge": "base"}]}
    result = analyse_pairs(key, {"a": {"p1": "1", "p2": "1"}, "b": {"p1": "1", "p2": "2"},
                                 "c": {"p1": "2", "p2": "1"}})
    [row] = result.rows
    # p1: candidate, candidate, base -> candidate (judge agrees); p2: base, candidate, base -> base
    assert row.candidate_better.rate == 0.5 and row.base_better.rate == 0.5
    assert (row.judge_n, row.judge_rate) == (2, 1.0)
    assert result.to_json()["rows"][0]["judge_agreement"] == {"n": 2, "rate": 1.0}
    # categories candidate/base/tie: p1 counts (2, 1, 0), p2 (1, 2, 0); Fleiss by hand:
    # P_i = (2*1 + 1*0)/(3*2) = 1/3 each; p_j = (3/6, 3/6, 0); P_e = 1/2 -> (1/3 - 1/2)/(1/2)
    assert result.fleiss_kappa == pytest.approx(-1 / 3)
    assert result.raw_agreement == pytest.approx(2 / 6)
    with pytest.raises(DataError, match="no pair"):
        analyse_pairs(key, {"a": {}})
    with pytest.raises(DataError, match="no answer pairs"):
        pair_rows([MitigationRecord.from_json({
            "id": "x", "question": "q", "answers": {"fewl": "same", "baseline": "same"},
            "judged": [{"candidate": "fewl", "base": "baseline"}]})])
