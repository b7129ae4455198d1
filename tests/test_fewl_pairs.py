"""The pair prompt, the robust parser on messy replies, and generation with retries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from veracity.backends.base import Capabilities
from veracity.backends.fake import FakeBackend
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.errors import BackendError, ConfigError
from veracity.methods.fewl.pairs import (
    Pair,
    PairSettings,
    generate_pairs,
    pair_prompt,
    parse_pairs,
)
from veracity.types import Generation, GenRequest


def test_prompt_asks_for_r_numbered_pairs() -> None:
    prompt = pair_prompt("  Who wrote Hamlet? ", 7)
    assert "Write 7 pairs" in prompt and "Number the pairs 1 to 7" in prompt
    assert "1. Wrong:" in prompt and "1. Corrected:" in prompt
    assert prompt.endswith("\n\nQuestion: Who wrote Hamlet?")


def test_clean_template() -> None:
    text = "1. Wrong: Marlowe wrote it.\n1. Corrected: Shakespeare wrote it.\n" \
           "2. Wrong: It was written in 1900.\n2. Corrected: It dates from about 1600."
    assert parse_pairs(text) == [Pair("Marlowe wrote it.", "Shakespeare wrote it."),
                                 Pair("It was written in 1900.", "It dates from about 1600.")]


def test_missing_numbers_preamble_and_trailing_chatter() -> None:
    text = ("Sure! Here are some pairs for you:\n\nWrong: Paris is in Spain.\n"
            "Corrected: Paris is in France.\n\nWrong: Paris has no river.\n"
            "Corrected: The Seine flows through Paris.\nI hope this helps! Let me know.")
    assert parse_pairs(text) == [Pair("Paris is in Spain.", "Paris is in France."),
                                 Pair("Paris has no river.", "The Seine flows through Paris.")]


def test_markdown_paper_labels_and_one_line_pairs() -> None:
    text = ('**1. Wrong Answer:** "The moon is made of cheese."\n'
            "**1. Non-Wrong Answer:** The moon is made of rock.\n"
            "2) wrong answer 2: Water boils at 50 C | correct answer: Water boils at 100 C\n"
            "- Incorrect: Bats are birds. Corrected: Bats are mammals.")
    assert parse_pairs(text) == [
        Pair("The moon is made of cheese.", "The moon is made of rock."),
        Pair("Water boils at 50 C", "Water boils at 100 C"),
        Pair("Bats are birds.", "Bats are mammals."),
    ]


def test_all_wrongs_then_all_corrections_pair_by_number() -> None:
    text = "1. Wrong: A\n2. Wrong: B\n3. Wrong: C\n2. Corrected: not-B\n1. Corrected: not-A"
    assert parse_pairs(text) == [Pair("A", "not-A"), Pair("B", "not-B")]


def test_number_on_its_own_line_and_mismatched_numbers() -> None:
    text = "1.\nWrong: A\nCorrected: not-A\n2. Wrong: B\n3. Corrected: not-B"
    # a correction without a same-numbered wrong answer pairs with the one just before it
    assert parse_pairs(text) == [Pair("A", "not-A"), Pair("B", "not-B")]


def test_junk_is_dropped_and_limit_applies() -> None:
    text = ("1. Wrong: <an intentionally wrong answer>\n1. Corrected: <the corrected answer>\n"
            "2. Corrected: an orphan correction\n"
            "3. Wrong: X\n3. Corrected: not X\n4. Wrong: X\n4. Corrected: not x\n"
            "5. Wrong: 2 + 2 = 4.\n5. Corrected: 2+2=4\n6. Wrong: dangling\n"
            "7. Wrong: Y\n7. Corrected: not Y\n8. Wrong: Z\n8. Corrected: not Z")
    # placeholders, an orphan correction, a duplicate (case-insensitive), a pair whose two
    # sides are the same, and a wrong answer without correction are all dropped
    expected = [Pair("X", "not X"), Pair("Y", "not Y"), Pair("Z", "not Z")]
    assert parse_pairs(text) == expected
    assert parse_pairs(text, limit=2) == expected[:2]


def test_invented_next_question_and_copied_example_are_ignored() -> None:
    text = ("1. Wrong: Saturn is the largest planet in the Solar System.\n"
            "1. Corrected: Jupiter is the largest planet in the Solar System.\n"
            "2. Wrong: Rome is in Spain.\n2. Corrected: Rome is in Italy.\n\n"
            "Question: What is the capital of Russia?\n"
            "1. Wrong: Moscow is in Peru.\n1. Corrected: Moscow is in Russia.")
    assert parse_pairs(text) == [Pair("Rome is in Spain.", "Rome is in Italy.")]


def test_same_number_pairs_with_the_latest_wrong_answer() -> None:
    text = "1. Wrong:1. Wrong: w1\n1. Corrected: c1"
    assert parse_pairs(text) == [Pair("w1", "c1")]


def test_unparseable_reply_gives_no_pairs() -> None:
    assert parse_pairs("") == []
    assert parse_pairs("1. Paris is in Spain.\n2. Paris is in France.") == []
    assert parse_pairs("The answer is correct, it is wrong to say otherwise.") == []


def test_settings_validation() -> None:
    with pytest.raises(ConfigError):
        PairSettings(r=0)
    assert PairSettings(r=10).sampling(0).max_tokens == 48 * 10 + 64
    assert PairSettings(temperature=0.0).sampling(1).temperature == 0.7


def _responder(request: GenRequest) -> str:
    prompt = request.messages[-1].content
    if "never" in prompt:
        return "I cannot help with that."
    if "flaky" in prompt and request.sample_index == 0:
        return "!error transient"
    if "late" in prompt and request.sample_index < 2:
        return "no numbered pairs here"
    # a prefill-capable backend returns only the continuation of "1. Wrong:"
    assert request.prefill == "1. Wrong:"
    return " w1\n1. Corrected: c1\n2. Wrong: w2\n2. Corrected: c2"


def test_generation_retries_then_reports(cache: Cache) -> None:
    backend = FakeBackend(responder=_responder)
    client = LLMClient(backend, cache)
    questions = ["fine question", "flaky question", "late question", "never question"]
    outcome = generate_pairs(client, questions, PairSettings(r=2, retries=2))
    assert [len(p) for p in outcome.pairs] == [2, 2, 2, 0]
    assert outcome.attempts == [1, 2, 3, 3]
    assert outcome.failed() == [3]
    assert outcome.raw[3] == "1. Wrong:I cannot help with that."
    assert outcome.errors[:3] == [None, None, None]
    assert outcome.errors[3] == ("0 pair(s) parsed after 3 attempt(s), fewer than the 1 "
                                 "required; the model's text is in pairs_raw")
    # one batched call per attempt; each retry uses a new sample_index
    indices = sorted({r.sample_index for r in backend.history})
    assert indices == [0, 1, 2]
    calls = len(backend.history)
    again = generate_pairs(client, questions, PairSettings(r=2, retries=2))
    assert again.pairs == outcome.pairs
    # only the request whose error was not cached reaches the model again, once
    assert len(backend.history) - calls == 1
    assert {r.sample_index for r in backend.history[calls:]} == {0}


class _Truncating:
    """A prefill-capable backend whose replies ran out of tokens."""

    spec = "test/truncating"
    capabilities = Capabilities(prefill=True)

    def identity(self) -> dict[str, Any]:
        return {}

    def generate(self, requests: Sequence[GenRequest]) -> list[Generation | BackendError]:
        text = " w1\n1. Corrected: c1\n2. Wrong: w2\n2. Corrected: the Seine flows thr"
        return [Generation(text, finish_reason="length") for _ in requests]

    def close(self) -> None:
        pass


def test_a_reply_cut_by_the_token_budget_loses_its_last_line() -> None:
    outcome = generate_pairs(LLMClient(_Truncating()), ["q"], PairSettings(r=2))
    assert outcome.pairs == [[Pair("w1", "c1")]]
