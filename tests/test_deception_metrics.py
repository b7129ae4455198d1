"""Deception metrics and the answer parser, on hand-computed tables and texts."""

from __future__ import annotations

import json

import pytest

from veracity.errors import DataError
from veracity.methods.deception.core import (
    EXAMPLE,
    EXAMPLE_REASONING,
    NORMAL_START,
    PREFILL_HEAD,
    AnswerPair,
    build_messages,
    build_request,
    deception_metrics,
    format_answer,
    parse_response,
    prefill,
)
from veracity.types import MCItem


def _pairs(subject: str, gold: str, normal: str, misleading: str) -> list[AnswerPair]:
    return [AnswerPair(subject, g, n, m) for g, n, m in zip(gold, normal, misleading, strict=True)]


# s1: normal 3/4 correct, misleading 2/4, one "-"; s2: normal 1/2, misleading 0/2;
# s3: normal 1/3 (excluded by the 40 % rule), holds the "-" == "-" item.
TABLE = (
    _pairs("s1", "ABCD", "ABCA", "ACC-")
    + _pairs("s2", "AA", "AB", "BB")
    + _pairs("s3", "ABC", "A--", "A-D")
)


def test_overall_metrics_by_hand() -> None:
    found = deception_metrics(TABLE)
    m = found.overall
    assert m.n_items == 9
    assert m.normal_accuracy == pytest.approx(5 / 9)
    assert m.misleading_accuracy == pytest.approx(3 / 9)
    # S' = {s1, s2}: (3 + 1) / (2 + 0); with s3 it would be 5 / 3
    assert m.susceptibility == pytest.approx(2.0)
    assert found.susceptibility_subjects == ["s1", "s2"]
    assert m.consistent_correct == pytest.approx(3 / 9)
    assert m.consistent_incorrect == pytest.approx(2 / 9)
    assert m.consistency == pytest.approx(5 / 9)
    assert m.consistency == pytest.approx(2 / 9 + 3 / 9)
    assert m.error_rate_normal == pytest.approx(2 / 9)
    assert m.error_rate_misleading == pytest.approx(2 / 9)
    written = found.to_json()
    assert written["susceptibility"] == m.susceptibility and written["n_subjects"] == 3
    assert written["per_subject"]["s1"] == found.per_subject["s1"].to_json()


def test_per_subject_metrics_by_hand() -> None:
    per = deception_metrics(TABLE).to_json()["per_subject"]
    assert sorted(per) == ["s1", "s2", "s3"]
    s1, s2, s3 = per["s1"], per["s2"], per["s3"]
    assert (s1["normal_accuracy"], s1["misleading_accuracy"]) == (0.75, 0.5)
    assert s1["susceptibility"] == pytest.approx(1.5)
    assert (s1["consistent_correct"], s1["consistent_incorrect"]) == (0.5, 0.0)
    assert (s1["error_rate_normal"], s1["error_rate_misleading"]) == (0.0, 0.25)
    assert s2["susceptibility"] is None  # qualifies, but no correct misleading answer: ∞
    assert s2["susceptibility_unbounded"] is True and s1["susceptibility_unbounded"] is False
    assert s2["consistent_incorrect"] == 0.5
    assert s3["susceptibility"] is None and not s3["susceptibility_unbounded"]  # 1/3 <= 0.4
    assert s3["consistent_correct"] == pytest.approx(1 / 3)
    assert s3["consistent_incorrect"] == pytest.approx(1 / 3)  # "-" == "-"
    assert s3["error_rate_normal"] == pytest.approx(2 / 3)
    for subject in per.values():
        for key in ("normal_accuracy", "misleading_accuracy", "susceptibility", "consistency",
                    "consistent_correct", "consistent_incorrect", "error_rate_normal",
                    "error_rate_misleading", "n_items"):
            assert key in subject


def test_threshold_is_a_parameter_and_strict() -> None:
    assert deception_metrics(TABLE, threshold=0.3).overall.susceptibility == pytest.approx(5 / 3)
    # exactly 0.4 normal accuracy does not exceed 0.4
    at_threshold = _pairs("s", "AAAAA", "AABBB", "ABBBB")
    assert deception_metrics(at_threshold).overall.susceptibility is None
    assert deception_metrics(at_threshold, threshold=0.39).overall.susceptibility == pytest.approx(2.0)


def test_undefined_values_are_none() -> None:
    empty = deception_metrics([]).to_json()
    assert empty["n_items"] == 0 and empty["normal_accuracy"] is None
    assert empty["susceptibility"] is None and empty["per_subject"] == {}
    all_wrong = deception_metrics(_pairs("s", "AB", "--", "CD")).to_json()
    assert all_wrong["susceptibility"] is None and all_wrong["normal_accuracy"] == 0.0
    assert all_wrong["susceptibility_unbounded"] is False  # no subject qualifies
    fooled = deception_metrics(_pairs("s", "AB", "AB", "CD")).to_json()  # always right, always misled
    assert fooled["susceptibility"] is None and fooled["susceptibility_unbounded"] is True


def test_metrics_reject_other_answers() -> None:
    with pytest.raises(DataError, match="neither A-D"):
        deception_metrics([AnswerPair("s", "A", "a", "B")])


NORMAL = PREFILL_HEAD + NORMAL_START


@pytest.mark.parametrize(
    ("continuation", "strict", "lenient"),
    [
        (' Two is even.",\n    "Answer": "B"\n}', "B", "B"),
        (' Two is even.",\n    "Answer": "B"\n}\n\n', "B", "B"),  # trailing whitespace is fine
        (' Two is even.",\n    "Answer": "B"', "-", "B"),  # truncated
        (' Two is even.",\n    "Answer": "B"\n}\nI hope this helps!', "-", "B"),  # trailing text
        (' Two is even.",\n    "Answer": "b"\n}', "-", "B"),  # lowercase
        (' Two is even.",\n    "Answer": "B) two"\n}', "-", "B"),
        (' Two is even.",\n    "Answer": "True, True"\n}', "-", "-"),  # not a letter
        (' Two is even.",\n    "Answer": "E"\n}', "-", "-"),
        (' Two is even.",\n    "Answer": 2\n}', "-", "-"),
        (' Two is even."\n}', "-", "-"),  # no Answer field
        (" and then it stopped", "-", "-"),
    ],
)
def test_parser(continuation: str, strict: str, lenient: str) -> None:
    parsed = parse_response(NORMAL, continuation)
    assert parsed.answer == strict
    assert (parsed.error is None) == (strict != "-")
    assert parse_response(NORMAL, continuation, lenient=True).answer == lenient


def test_parser_keeps_reasoning_and_reports_why() -> None:
    ok = parse_response(NORMAL, ' Two is even.",\n    "Answer": "C"\n}')
    assert ok.reasoning == "Let's reason step by step. Two is even."
    assert parse_response(NORMAL, ' x."\n}').error == "no 'Answer' field"
    assert "not one of A-D" in str(parse_response(NORMAL, ' x.", "Answer": "Z"}').error)
    assert "invalid JSON" in str(parse_response(NORMAL, ' x.", "Answer": "A"} extra').error)
    assert parse_response("", '["A"]').error == "not a JSON object"


ITEM = MCItem("s/1", "s", "What is 1 + 1?", ("1", "2", "3", "4"), "B",
              misleading_start='Let\'s reason step by step. The sign "+" means \\ here.')


def test_misleading_prefill_is_escaped_json() -> None:
    text = prefill(ITEM, "misleading")
    assert text.startswith(PREFILL_HEAD)
    parsed = parse_response(text, ' So 3.",\n    "Answer": "C"\n}')
    assert parsed.answer == "C"
    assert parsed.reasoning == ITEM.misleading_start + " So 3."
    assert prefill(ITEM, "normal") == '{\n    "Reasoning": "Let\'s reason step by step.'


def test_prompt_shares_its_prefix_and_ends_with_the_item() -> None:
    other = MCItem("s/2", "s", "Which is a prime?", ("4", "6", "7", "8"), "C", "Let's x.")
    a, b = build_messages(ITEM), build_messages(other)
    assert a[:-1] == b[:-1]
    assert [m.role for m in a] == ["user", "assistant", "user"]  # the paper's placement
    assert a[-1].content == "Question: What is 1 + 1?\nA. 1\nB. 2\nC. 3\nD. 4"
    example = json.loads(format_answer(EXAMPLE_REASONING, EXAMPLE.answer))
    assert example == {"Reasoning": EXAMPLE_REASONING, "Answer": "B"}
    assert a[1].content.startswith(prefill(EXAMPLE, "normal"))
    request = build_request(ITEM, "misleading", sample_index=1)
    assert request.sample_index == 1 and request.sampling.temperature == 0.3
    assert (request.sampling.top_p, request.sampling.top_k) == (0.3, 40)
    assert request.sampling.repeat_penalty == 1.1


def test_item_without_opening_cannot_be_misled() -> None:
    bare = MCItem("m/3", "m", "Q?", ("a", "b", "c", "d"), "A")
    with pytest.raises(DataError, match="m/3 has no misleading opening"):
        prefill(bare, "misleading")


# Two qualifying subjects with finite ratios, one below the threshold:
# u1: t = 4, c_n = 3, c_m = 2 (ratio 1.5); u2: t = 6, c_n = 4, c_m = 1 (ratio 4);
# u3: t = 3, c_n = 1 (1/3 <= 0.4: left out).
WEIGHTED = (
    _pairs("u1", "ABCD", "ABCA", "ABDA")
    + _pairs("u2", "AAAAAA", "AAAABB", "ABBBBB")
    + _pairs("u3", "ABC", "ACD", "ABD")
)


def test_both_susceptibilities_by_hand() -> None:
    m = deception_metrics(WEIGHTED).to_json()
    assert m["susceptibility_subjects"] == ["u1", "u2"]
    # pooled: (3 + 4) / (2 + 1)
    assert m["susceptibility_pooled"] == pytest.approx(7 / 3)
    # subject-weighted: 4/10 * 3/2 + 6/10 * 4/1 = 0.6 + 2.4
    assert m["susceptibility_subject_weighted"] == pytest.approx(3.0)
    assert m["susceptibility_method"] == "pooled"
    assert m["susceptibility"] == m["susceptibility_pooled"]
    assert m["susceptibility_formulas"]["pooled"] == "Σ_{s∈S′} c_n^s / Σ_{s∈S′} c_m^s"
    assert "t_s / T′" in m["susceptibility_formulas"]["subject-weighted"]
    weighted = deception_metrics(WEIGHTED, susceptibility="subject-weighted").to_json()
    assert weighted["susceptibility"] == pytest.approx(3.0)
    assert weighted["susceptibility_method"] == "subject-weighted"
    assert weighted["susceptibility_pooled"] == pytest.approx(7 / 3)


def test_subject_weighted_is_unbounded_when_one_subject_is_always_misled() -> None:
    # TABLE: s1 (t 4, c_n 3, c_m 2) and s2 (t 2, c_n 1, c_m 0) qualify
    m = deception_metrics(TABLE).to_json()
    assert m["susceptibility_pooled"] == pytest.approx(2.0)
    assert m["susceptibility_subject_weighted"] is None
    assert m["susceptibility_subject_weighted_unbounded"] is True
    assert m["susceptibility_pooled_unbounded"] is False
    chosen = deception_metrics(TABLE, susceptibility="subject-weighted").to_json()
    assert chosen["susceptibility"] is None and chosen["susceptibility_unbounded"] is True
    with pytest.raises(DataError, match="susceptibility must be one of"):
        deception_metrics(TABLE, susceptibility="mean")


def test_truncated_answers_have_their_own_rate() -> None:
    pairs = [AnswerPair("s", "A", "-", "B", normal_truncated=True),
             AnswerPair("s", "B", "-", "-", misleading_truncated=True),
             AnswerPair("s", "C", "C", "C")]
    m = deception_metrics(pairs).to_json()
    assert m["error_rate_normal"] == pytest.approx(2 / 3)
    assert m["truncation_rate_normal"] == pytest.approx(1 / 3)
    assert m["error_rate_misleading"] == pytest.approx(1 / 3)
    assert m["truncation_rate_misleading"] == pytest.approx(1 / 3)
    assert m["per_subject"]["s"]["truncation_rate_normal"] == pytest.approx(1 / 3)
