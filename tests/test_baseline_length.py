"""The length baseline: counted by the model's tokenizer where the backend reports it, by the
stated fallback otherwise; the CLI end to end (live and recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import veracity
from veracity.cli import main
from veracity.errors import PermanentError
from veracity.methods.length.core import LengthSettings, answer_length, fallback_tokens
from veracity.methods.length.run import score_greedy, summarise
from veracity.types import Generation, Item, TokenLogprob


def test_counted_by_the_model_where_it_can_else_words_and_punctuation() -> None:
    assert fallback_tokens("Paris, of course.") == 5
    assert fallback_tokens("") == 0
    with_tokens = Generation("Paris", logprobs=(TokenLogprob("Par", -0.1), TokenLogprob("is", -0.1)))
    assert answer_length(with_tokens) == (2, "model")
    assert answer_length(Generation("Paris is nice", completion_tokens=7)) == (7, "model")
    assert answer_length(Generation("Paris is nice")) == (3, "words")


def test_scoring_given_answers_and_the_summary() -> None:
    items = [Item(str(k), f"Q{k}?") for k in range(4)]
    greedy = [Generation("a b c", completion_tokens=3, finish_reason="length"),
              Generation("a"), Generation("  "), PermanentError("rejected")]
    records = score_greedy(items, greedy, LengthSettings())
    assert [r.score for r in records] == [3.0, 1.0, None, None]
    assert records[1].counted_by == "words" and records[0].counted_by == "model"
    found = summarise(records)
    assert found.mean_score == pytest.approx(2.0) and found.n_unscored == 2
    assert found.n_cut_at_max_tokens == 1 and found.counted_by == {"model": 1, "words": 1}
    assert type(found).from_json(json.loads(json.dumps(found.to_json()))) == found


def test_cli_live_and_recorded_end_to_end(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "live"
    result = runner.invoke(main, ["length", "--dataset", "builtin", "--limit", "3", "-m",
                                  "fake/constant", "--no-cache", "-q", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [r["score"] for r in rows] == [1.0, 1.0, 1.0]
    assert "length-items" in (out / "report.html").read_text()
    recorded = tmp_path / "answers.jsonl"
    recorded.write_text(json.dumps({"prompt": "p", "answer": "Paris, France."}) + "\n"
                        + json.dumps({"prompt": "q", "answer": "x", "tokens": 9}) + "\n")
    result = runner.invoke(main, ["length", "--recorded", str(recorded), "--json",
                                  "--no-cache", "-q", "--out", str(tmp_path / "rec")])
    assert result.exit_code == 0, result.output
    assert [r["score"] for r in json.loads(result.output)] == [4.0, 9.0]


def test_public_api() -> None:
    assert veracity.length(["Q?"], "fake/stable", cache=False).records[0].score == 8.0
