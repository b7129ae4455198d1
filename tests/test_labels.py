"""Label sources on hand-made answers: contains, exact, ROUGE-L, sheets, and their parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from veracity.correctness import Labelled
from veracity.errors import ConfigError, DataError
from veracity.labels import LabelSource, disagreement, label_items, normalise_squad, rouge_l
from veracity.runs.common import Context

ITEMS = [Labelled("Capital of France?", "The capital is Paris.", ("Paris",)),
         Labelled("Who wrote Hamlet?", "Shakespeare", ("William Shakespeare", "Shakespeare")),
         Labelled("2+2?", "", ("4",)),
         Labelled("Unknown?", "Something", ())]
IDS = ["a", "b", "c", "d"]


def test_parse_sources() -> None:
    assert LabelSource.parse("rouge-l").name == "rouge-l"
    assert LabelSource.parse("judge:fake/judge") == LabelSource("judge", "fake/judge")
    for bad in ("judge", "sheet:", "bleu", "contains:x"):
        with pytest.raises(ConfigError):
            LabelSource.parse(bad)


def test_squad_normalisation() -> None:
    assert normalise_squad("The  Eiffel-Tower!") == "eiffeltower"
    assert normalise_squad("an Apple, a day") == "apple day"


def test_rouge_l_hand_computed() -> None:
    # LCS("paris is the capital", "the capital is paris") = 2 words ("the capital"):
    # P = R = 2/4, F = 0.5
    assert rouge_l("paris is the capital", ["the capital is paris"]) == pytest.approx(0.5)
    assert rouge_l("anything", []) == 0.0


def test_reference_rules(ctx: Context) -> None:
    def labels(kind: str) -> list[bool | None]:
        return label_items(LabelSource(kind), IDS, ITEMS, ctx, "hash/default")

    # empty answer: wrong under every rule; no references: unlabelled
    assert labels("contains") == [True, True, False, None]
    assert labels("exact") == [False, True, False, None]
    # "the capital is paris" vs "paris": P = 1/4, R = 1, F = 0.4 >= 0.3
    assert labels("rouge-l") == [True, True, False, None]


def test_sheet_labels_by_id(ctx: Context, tmp_path: Path) -> None:
    sheet = tmp_path / "s.csv"
    sheet.write_text("id,correct\na,no\nb,1\nd,\n", encoding="utf-8")
    found = label_items(LabelSource("sheet", str(sheet)), IDS, ITEMS, ctx, "hash/default")
    assert found == [False, True, False, None]
    jsonl = tmp_path / "s.jsonl"
    jsonl.write_text('{"id": "d", "correct": true}\n', encoding="utf-8")
    assert label_items(LabelSource("sheet", str(jsonl)), IDS, ITEMS, ctx,
                       "hash/default") == [None, None, False, True]
    sheet.write_text("id,correct\na,maybe\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2"):
        label_items(LabelSource("sheet", str(sheet)), IDS, ITEMS, ctx, "hash/default")


def test_disagreement_counts_items_both_label() -> None:
    assert disagreement([True, False, None, True], [True, True, False, None]) == (2, 1)
