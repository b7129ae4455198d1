"""P(True): reading the probability of "True" from next-token alternatives on hand-computed
numbers, the verdict word where there are none, a user's prompt file, a scripted backend whose
P(True) is known, the CLI end to end (live and recorded)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import veracity
from veracity.backends.base import Capabilities
from veracity.backends.fake import FakeBackend
from veracity.cli import main
from veracity.client import LLMClient
from veracity.errors import ConfigError
from veracity.methods.p_true.core import PTrueSettings, fill, load_prompt, read_verdict
from veracity.methods.p_true.fake import self_judge
from veracity.methods.p_true.run import run_p_true
from veracity.runs.common import Context
from veracity.stats import auroc
from veracity.types import Item, TokenLogprob

LOG = math.log


def test_probability_of_true_between_the_two_options() -> None:
    tokens = [TokenLogprob("**", LOG(0.9), (("**", LOG(0.9)),)),  # no option here: read on
              TokenLogprob("True", LOG(0.5), (("True", LOG(0.5)), (" true", LOG(0.1)),
                                              ("False", LOG(0.2)), ("Maybe", LOG(0.2))))]
    found = read_verdict("**True**", tokens)
    assert found.source == "logprobs" and found.position == 1
    assert found.p_true == pytest.approx(0.6) and found.p_false == pytest.approx(0.2)
    assert found.score == pytest.approx(0.75)


def test_verdict_word_where_there_are_no_log_probabilities() -> None:
    assert read_verdict("True, it is.", None).score == 1.0
    assert read_verdict("It is false", ()).score == 0.0
    assert read_verdict("Perhaps", None).score is None
    # alternatives that name neither word fall back to the text
    assert read_verdict("False", [TokenLogprob("F", LOG(0.5))]).source == "verdict"


def test_prompt_file_replaces_the_built_in_one(tmp_path: Path) -> None:
    mine = tmp_path / "prompt.txt"
    mine.write_text("Q: {question}\nA: {answer}\nTrue or False? {not a placeholder}")
    template, source = load_prompt(mine)
    assert fill(template, "x?", "y") == "Q: x?\nA: y\nTrue or False? {not a placeholder}"
    assert source.startswith("prompt.txt (sha256 ")
    (tmp_path / "bad.txt").write_text("no placeholders")
    with pytest.raises(ConfigError, match=r"\{question\} and \{answer\}"):
        load_prompt(tmp_path / "bad.txt")


ANSWERS = {"Capital of France?": "Paris", "Capital of Spain?": "Lisbon",
           "Two plus two?": "four", "Largest planet?": "Mars"}
P_TRUE = {"Paris": 0.9, "four": 0.8, "Lisbon": 0.3, "Mars": 0.1}


def test_scripted_self_judge_gives_known_p_true_and_separates_wrong_answers() -> None:
    backend = FakeBackend(responder=self_judge(P_TRUE, ANSWERS), name="p-true-script")
    items = [Item(str(k), q) for k, q in enumerate(ANSWERS)]
    with Context(cache=None) as ctx:
        ctx.clients[backend.spec] = LLMClient(backend, None, ctx.progress)
        records = list(run_p_true(items, backend.spec, PTrueSettings(), ctx, None,
                                  "script").records)
    # " False" holds 0.9 of the rest: P(True) / (P(True) + P(False)) = p / (p + 0.9 (1 - p))
    for record in records:
        p = P_TRUE[record.answer]
        assert record.score == pytest.approx(p / (p + 0.9 * (1 - p)))
        assert record.p_true == pytest.approx(p) and record.source == "logprobs"
    wrong = [r.answer in ("Lisbon", "Mars") for r in records]
    assert auroc([1 - float(r.score) for r in records], wrong) == 1.0  # type: ignore[arg-type]
    # two calls per question: the greedy answer, the question about it
    assert len(backend.history) == 8


class NoLogprobs(FakeBackend):
    capabilities = Capabilities(prefill=True, seed=True, max_concurrency=8)


def test_backend_without_log_probabilities_gives_the_parsed_verdict() -> None:
    backend = NoLogprobs(responder=self_judge(P_TRUE, ANSWERS), name="p-true-words")
    with Context(cache=None) as ctx:
        ctx.clients[backend.spec] = LLMClient(backend, None, ctx.progress)
        records = run_p_true([Item("1", "Capital of France?"), Item("2", "Largest planet?")],
                             backend.spec, PTrueSettings(), ctx, None, "script").records
    assert [r.score for r in records] == [1.0, 0.0]
    assert all(r.source == "verdict" for r in records)
    assert all(r.logprobs is None for r in backend.history)  # never asked


def test_cli_live_and_recorded_end_to_end(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "live"
    result = runner.invoke(main, ["p-true", "--dataset", "builtin", "--limit", "2", "-m",
                                  "fake/stable", "--no-cache", "-q", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    # the babbling fake names neither True nor False: unscored, and said why
    assert len(rows) == 2 and all(r["error"] == "the reply names neither True nor False"
                                  for r in rows)
    assert "p-true-items" in (out / "report.html").read_text()
    recorded = tmp_path / "verdicts.jsonl"
    recorded.write_text(json.dumps({
        "prompt": "Capital of France?", "answer": "Paris", "verdict": "True",
        "verdict_logprobs": [{"token": "True", "logprob": LOG(0.6),
                              "top_logprobs": [{"token": "True", "logprob": LOG(0.6)},
                                               {"token": "False", "logprob": LOG(0.2)}]}]})
        + "\n" + json.dumps({"prompt": "Largest planet?", "answer": "Mars"}) + "\n")
    result = runner.invoke(main, ["p-true", "--recorded", str(recorded), "--no-cache", "-q"])
    assert result.exit_code != 0 and "no recorded 'verdict'" in result.output
    result = runner.invoke(main, ["p-true", "--recorded", str(recorded), "-m", "fake/constant",
                                  "--json", "--no-cache", "-q", "--out", str(tmp_path / "rec")])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found[0]["score"] == pytest.approx(0.75) and found[0]["model"] == "recorded"
    assert found[1]["model"] == "fake/constant" and found[1]["score"] is None


def test_public_api() -> None:
    result = veracity.p_true(["Capital of France?"], "fake/constant", cache=False)
    assert result.records[0].answer == "4"
