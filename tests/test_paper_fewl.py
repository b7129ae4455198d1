"""The FEWL paper's settings: J diversified references from one call (§4.1, C.6), `fewl
validate --preset paper` (5 answers, 25 pairs, C.1/C.3), and the warning when every multi row
would repeat the single row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from data_paths import FIXTURES
from veracity.backends.fake import FakeBackend
from veracity.client import LLMClient
from veracity.data.labelled import load_labelled
from veracity.methods.fewl.modes import run_fewl_validate
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.reference_list import list_prompt, parse_list
from veracity.methods.fewl.run import FewlSettings
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.types import GenRequest

CHALE = f"chale:{FIXTURES / 'formats' / 'chale.json'}"


def test_parse_list_reads_numbered_answers_and_leaves_gaps_empty() -> None:
    reply = ("Here you go:\n1. Paris is the capital.\n2) The capital is Paris,\nwhich sits on the "
             "Seine.\n**4.** Lyon.\n1. a repeat\n9. too many")
    assert parse_list(reply, 5) == ["Paris is the capital.",
                                    "The capital is Paris, which sits on the Seine.", "",
                                    "Lyon.", ""]
    assert parse_list("no numbers at all", 2) == ["", ""]
    assert "5 different answers" in list_prompt("Why?", 5) and "Question: Why?" in list_prompt(
        "Why?", 5)


def _lister(calls: list[str]) -> Any:
    def reply(request: GenRequest) -> str:
        text = request.messages[-1].content
        calls.append(text)
        question = text.rsplit("Question: ", 1)[-1]
        return "\n".join(f"{k}. answer {k} to {question}" for k in range(1, 6))
    return reply


def test_one_call_asks_each_reference_once_for_five_answers(cache: Any) -> None:
    items = load_labelled(CHALE)
    calls: list[str] = []
    settings = FewlSettings(references=("test/lister",), reference_samples=5,
                            reference_mode="one-call", pairs_model="fake/pairs",
                            pairs=PairSettings(r=3), similarity="hash/default", neighbours=1)
    with Context(cache=cache) as ctx:
        ctx.clients["test/lister"] = LLMClient(FakeBackend(responder=_lister(calls)))
        outcome = run_fewl_validate(items, settings, ctx, None, "chale")
    assert len(calls) == len(items)  # one request per question, not five
    assert all("5 different answers" in c for c in calls)
    record = outcome.records[0]
    assert len(record.references) == 5
    assert record.references[2].startswith("answer 3 to ")


def _validate(tmp_path: Path, *args: str) -> Any:
    from veracity.methods.fewl.cli import fewl

    return CliRunner().invoke(fewl, ["validate", "--dataset", CHALE, "--reference", "fake/pairs",
                                     "--neighbours", "1", "--similarity", "hash/default",
                                     "--cache", str(tmp_path / "cache.db"), *args],
                              catch_exceptions=False)


def test_validate_preset_paper_is_printed_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = _validate(tmp_path, "--preset", "paper", "--pairs", "4", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "preset paper: reference-samples=5, reference-mode=one-call" in result.output
    assert "(given explicitly: pairs=4)" in result.output
    assert "the paper's is Vectara's HHEM cross-encoder (C.3)" in result.output
    config = RunDir.open(out).info["config"]
    assert config["preset"]["applied"] == {"reference_samples": 5, "reference_mode": "one-call"}
    assert config["preset"]["overridden"] == {"pairs": 4}
    settings = json.loads((out / "run.json").read_text())["config"]["settings"]
    assert (settings["reference_samples"], settings["reference_mode"], settings["R"]) == (
        5, "one-call", 4)
    # without explicit --pairs the preset's 25 is used (C.1 asks for 25 pairs)
    from veracity.methods.fewl.cli import PAPER_PRESET
    assert PAPER_PRESET["pairs"] == 25 and PAPER_PRESET["reference_samples"] == 5


def test_validate_preset_paper_wants_one_reference(tmp_path: Path) -> None:
    result = _validate(tmp_path, "--preset", "paper", "--reference", "fake/stable")
    assert result.exit_code != 0 and "exactly one --reference" in result.output


def test_one_reference_answer_warns_that_multi_repeats_single(tmp_path: Path) -> None:
    result = _validate(tmp_path, "--pairs", "2", "--out", str(tmp_path / "w"))
    assert result.exit_code == 0, result.output
    assert "the multi rows repeat the single ones" in result.output
    quiet = _validate(tmp_path, "--pairs", "2", "--reference-samples", "2", "--out",
                      str(tmp_path / "q"))
    assert "the multi rows repeat" not in quiet.output


def test_the_prompts_carry_the_appendixs_instructions_and_layout() -> None:
    from veracity.methods.fewl.mitigation.examples import single_message
    from veracity.methods.fewl.mitigation.judge import JUDGE_PROMPT, judge_prompt
    from veracity.methods.fewl.pairs import pair_prompt
    from veracity.methods.fewl.run import FewlSettings as Settings

    # C.1: R wrong answers (25 in the paper), each with a high-level negation that is not the
    # wrong answer plus "not", worded differently each time, in a numbered template
    pairs = pair_prompt("Are birds mammals?", Settings().pairs.r)
    assert Settings().pairs.r == 25 and "Write 25 pairs" in pairs
    for clause in ("intentionally wrong", "negates that wrong answer at a high level",
                   'only the word "not" inserted', "Vary the way", "1. Wrong:", "1. Corrected:"):
        assert clause in pairs, clause
    # C.10: helpful, truthful and harmless; A, B and a "not sure" C as three replies; the letter
    # alone; no rule the paper lacks
    judged = judge_prompt("Is it safe?", "Yes.", "No.")
    assert "helpful, truthful and harmless" in judged and "letter only, A, B or C" in judged
    assert judged.index("A. Chatbot: Yes.") < judged.index("B. Chatbot: No.") < judged.index(
        "C. Chatbot: not sure.") < judged.index("Your choice, A, B or C?")
    assert "length" not in JUDGE_PROMPT and "style" not in JUDGE_PROMPT
    # C.11: the instruction, numbered example questions and answers, the new question, "Answer:"
    icl = single_message([("Q1?", "A1."), ("Q2?", "A2.")], "Q3?").content
    assert icl.startswith("Your task: answer questions correctly")
    assert "Example question 2: Q2?\nAnswer 2: A2." in icl and icl.endswith(
        "New question: Q3?\nAnswer:")


def test_figure3_by_people_a_0_1_2_sheet_beside_the_judge(tmp_path: Path) -> None:
    import csv

    from veracity.cli import main

    run = tmp_path / "run"
    made = _validate(tmp_path, "--pairs", "2", "--reference-samples", "2", "--judge",
                     "fake/stable", "--out", str(run))
    assert made.exit_code == 0, made.output
    sheet = tmp_path / "refs.csv"
    out = CliRunner().invoke(main, ["fewl", "annotate", "export", str(run), "--references",
                                    "--out", str(sheet)])
    assert out.exit_code == 0, out.output
    with sheet.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and rows[0]["scale"] == "0: wrong | 1: partly right | 2: right"
    assert {r["reference"] for r in rows} == {"fake/pairs#0", "fake/pairs#1"}
    # one rater: 2 for every #0 answer, 0 for #1 but the first, which gets 1
    rated = tmp_path / "ann.csv"
    firsts = [r for r in rows if r["reference"].endswith("#1")]
    with rated.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["item_id", "answer_check", "rating"])
        for r in rows:
            value = "2" if r["reference"].endswith("#0") else ("1" if r is firsts[0] else "0")
            writer.writerow([r["item_id"], r["answer_check"], value])
    back = CliRunner().invoke(main, ["fewl", "annotate", "import", str(run), str(rated),
                                     "--references"])
    assert back.exit_code == 0, back.output
    result = json.loads((run / "reference_ratings.json").read_text())
    n0 = sum(r["reference"].endswith("#0") for r in rows)
    assert result["references"]["fake/pairs#0"]["counts"] == [0, 0, n0]
    assert result["references"]["fake/pairs#1"]["counts"] == [len(firsts) - 1, 1, 0]
    assert result["references"]["fake/pairs#0"]["mean"] == 2.0
    assert result["references"]["fake/pairs#0"]["judge"] is not None  # beside the judge's counts
    bad = tmp_path / "bad.csv"
    bad.write_text(f"item_id,rating\n{rows[0]['item_id']},5\n", encoding="utf-8")
    refused = CliRunner().invoke(main, ["fewl", "annotate", "import", str(run), str(bad),
                                        "--references"])
    assert refused.exit_code != 0 and "not 0, 1 or 2" in refused.output


def test_theorem_3_4_under_constant_expertise_the_best_source_scores_highest() -> None:
    """A synthetic check of Theorem 3.4: answers from a finite space (Assumption 3.2), each
    reference right with its own probability and otherwise a wrong answer drawn from the right
    one (3.3), constant weights λ (3.1); in expectation FEWL ranks the always-right source
    first and the others by how often they are right, under every divergence."""
    import numpy as np

    from veracity.methods.fewl.core import DIVERGENCES, fewl_terms

    rng = np.random.default_rng(0)
    questions, options, k = 4000, 6, 3
    gold = rng.integers(0, options, questions)

    def answers(p_right: float) -> np.ndarray:
        wrong = (gold + rng.integers(1, options, questions)) % options  # never the gold one
        return np.where(rng.random(questions) < p_right, gold, wrong)

    references = np.stack([answers(p) for p in (0.8, 0.5, 0.3)], axis=1)  # (Q, J)
    weights = np.tile([0.5, 0.3, 0.2], (questions, 1))  # constant expertise
    neighbours = (np.arange(questions)[:, None] + rng.integers(1, questions, (questions, k))) \
        % questions
    means = {}
    for divergence in DIVERGENCES:
        for p_source in (1.0, 0.7, 0.4):
            h = answers(p_source)
            sims = (h[:, None] == references).astype(float)
            lazy = (h[:, None, None] == references[neighbours]).astype(float)  # (Q, K, J)
            terms = fewl_terms(weights, sims, lazy, np.ones_like(lazy, dtype=bool), divergence)
            means[(divergence, p_source)] = float(np.mean(terms.fewl))
        assert means[(divergence, 1.0)] > means[(divergence, 0.7)] > means[(divergence, 0.4)], (
            divergence, means)
