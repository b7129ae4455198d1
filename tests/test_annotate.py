"""Human ratings: Fleiss' kappa, rating sheets, importing raters' CSVs, Figure 1."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.errors import DataError
from veracity.methods.gamma.core import GammaSettings, aggregate, gamma_record
from veracity.methods.gamma.validation.annotate import (
    RUBRICS,
    analyse_ratings,
    answer_check,
    export_sheet,
    gamma_edges,
    is_programming,
    read_ratings,
    sheet_rows,
)
from veracity.methods.gamma.validation.core import import_ratings
from veracity.stats import fleiss_kappa
from veracity.store import RunDir
from veracity.types import Item

# Fleiss (1971) as tabulated on Wikipedia's "Fleiss' kappa" page: 10 subjects, 14 raters,
# 5 categories; P-bar = 0.378, P-e = 0.213, kappa = 0.210.
FLEISS_TABLE = [
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_textbook_example() -> None:
    assert fleiss_kappa(FLEISS_TABLE) == pytest.approx(0.2099, abs=5e-4)


def test_fleiss_kappa_perfect_and_undefined_and_invalid() -> None:
    assert fleiss_kappa([[3, 0], [0, 3], [3, 0]]) == pytest.approx(1.0)
    assert math.isnan(fleiss_kappa([[2, 0], [2, 0]]))  # everyone always picks one category
    with pytest.raises(DataError, match="same number"):
        fleiss_kappa([[2, 0], [1, 2]])
    with pytest.raises(DataError, match="same number"):
        fleiss_kappa([[1, 0]])


RECORDS: list[dict[str, Any]] = [
    {"id": "q1", "prompt": "What is the capital of France?", "answer": "Paris", "gamma": 0.0},
    {"id": "q2", "prompt": "Who wrote Hamlet?", "answer": "Shakespeare", "gamma": 0.02},
    {"id": "q3", "prompt": "Write a function in Python that reverses a list.",
     "answer": "def rev(x): return x[::-1]", "gamma": 0.3},
    {"id": "q3", "prompt": "How many legs does a spider have?", "answer": "Six", "gamma": 0.6},
]


def make_run(path: Path) -> Path:
    """A gamma run directory whose answers and gammas are the hand-set RECORDS."""
    settings = GammaSettings(n=1)
    records = [
        gamma_record(Item(r["id"], r["prompt"]), r["answer"], ["p"], [r["answer"]], r["gamma"],
                     settings, "fake/stable", "hash/256")
        for r in RECORDS
    ]
    run = RunDir.create(path, "gamma", {"model": "fake/stable", "dataset": "prompts"})
    run.write_samples(r.to_json() for r in records)
    run.write_results({"method": "gamma", "model": "fake/stable", "embedder": "hash/256",
                       "dataset": "prompts", "settings": settings.describe(),
                       "aggregate": aggregate(records).to_json()})
    return path


def write_ratings(path: Path, rows: list[list[str]], header: tuple[str, ...] = (
        "item_id", "answer_check", "rating", "comment")) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def filled(path: Path, ratings: list[int | str]) -> Path:
    rows = sheet_rows(RECORDS)
    return write_ratings(path, [[r.item_id, r.answer_check, str(v), ""]
                                for r, v in zip(rows, ratings, strict=True)])


def test_sheet_rows_ids_rubric_and_no_gamma(tmp_path: Path) -> None:
    rows = sheet_rows(RECORDS)
    assert [r.item_id for r in rows] == ["q1", "q2", "q3", "q3#2"]
    assert [r.kind for r in rows] == ["qa", "qa", "code", "qa"]
    assert rows == sheet_rows(RECORDS)  # stable
    assert [r.kind for r in sheet_rows(RECORDS, "code")] == ["code"] * 4
    out = tmp_path / "sheet.csv"
    export_sheet(RECORDS, out)
    with out.open(encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == ["item_id", "answer_check", "kind", "question", "answer", "rating",
                              "comment", "rubric"]
    assert all(row["rating"] == "" for row in table)
    assert table[2]["rubric"].startswith(RUBRICS["code"][0])
    text = out.read_text(encoding="utf-8")
    assert "gamma" not in text and "0.3" not in text and "0.6" not in text


def test_html_sheet_has_rubrics_items_and_no_gamma(tmp_path: Path) -> None:
    out = tmp_path / "sheet.html"
    export_sheet(RECORDS, out, title="Sheet <1>")
    text = out.read_text(encoding="utf-8")
    for line in (*RUBRICS["qa"], *RUBRICS["code"]):
        assert line.split(": ", 1)[1] in text
    for row in sheet_rows(RECORDS):
        assert f"data-id='{row.item_id}'" in text and row.answer_check in text
    assert "Sheet &lt;1&gt;" in text and "gamma" not in text and "0.6" not in text
    assert "item_id,answer_check,rating,comment" in text  # what the save button writes
    with pytest.raises(Exception, match=r"\.csv or \.html"):
        export_sheet(RECORDS, tmp_path / "sheet.txt")


def test_is_programming() -> None:
    assert is_programming("How do I write a function that sorts a list?")
    assert is_programming("Why does my SQL query return duplicates?")
    assert is_programming("Anything", {"category": "Programming"})
    assert not is_programming("What happens if you eat watermelon seeds?")


def test_analysis_matches_hand_computation(tmp_path: Path) -> None:
    a = read_ratings(filled(tmp_path / "alice.csv", [5, 4, 2, 1]), sheet_rows(RECORDS))
    b = read_ratings(filled(tmp_path / "bob.csv", [5, 5, 2, 0]), sheet_rows(RECORDS))
    r = analyse_ratings(RECORDS, [a, b], threshold=0.05, bins=2)
    # per-answer means 5, 4.5, 2, 0.5
    assert r.mean_rating == pytest.approx(3.0)
    assert r.mean_rating_stderr == pytest.approx(math.sqrt(13.5 / 3) / 2)
    assert r.mean_rating_below_threshold == pytest.approx(4.75)
    assert r.share_below_threshold == pytest.approx(0.5) and r.n_below_threshold == 2
    # categories 0..5: P-bar = (1 + 0 + 1 + 0) / 4, P-e = (1 + 1 + 4 + 1 + 9) / 64
    assert r.fleiss_kappa == pytest.approx((0.5 - 0.25) / 0.75)
    assert r.kappa_items == 4
    assert [(b.lo, b.hi, b.n) for b in r.bins] == [(0.0, 0.3, 2), (0.3, 0.6, 2)]
    assert [b.mean for b in r.bins] == pytest.approx([4.75, 1.25])
    assert r.slope == pytest.approx((1.25 - 4.75) / 0.3)
    assert r.intercept == pytest.approx(6.5)
    written = r.to_json()
    assert written["fit"]["slope"] == r.slope and written["bins"][0]["centre"] == 0.15


def test_blank_ratings_are_unrated_and_kappa_uses_complete_items(tmp_path: Path) -> None:
    a = read_ratings(filled(tmp_path / "a.csv", [5, "", 2, 1]), sheet_rows(RECORDS))
    b = read_ratings(filled(tmp_path / "b.csv", [5, 5, 2, ""]), sheet_rows(RECORDS))
    assert a.ratings == {"q1": 5, "q3": 2, "q3#2": 1}
    r = analyse_ratings(RECORDS, [a, b], bins=2)
    assert r.n_rated == 4 and r.kappa_items == 2 and r.fleiss_kappa == pytest.approx(1.0)
    single = analyse_ratings(RECORDS, [a], bins=2)
    assert math.isnan(single.fleiss_kappa) and single.n_rated == 3


@pytest.mark.parametrize(("cell", "message"), [
    ("6", "rating '6' is not an integer from 0 to 5"),
    ("4.5", "rating '4.5' is not an integer"),
    ("-1", "rating '-1'"),
    ("good", "rating 'good'"),
])
def test_bad_rating_names_file_and_row(tmp_path: Path, cell: str, message: str) -> None:
    path = filled(tmp_path / "r.csv", [5, 4, cell, 1])
    with pytest.raises(DataError, match=message) as info:
        read_ratings(path, sheet_rows(RECORDS))
    assert f"{path}, row 4" in str(info.value)


def test_unknown_item_mismatched_answer_duplicate_and_missing_column(tmp_path: Path) -> None:
    rows = sheet_rows(RECORDS)
    check = rows[0].answer_check
    cases = [
        ([["q9", "", "3", ""]], "row 2: item_id 'q9' is not an answer"),
        ([["q1", "deadbeef", "3", ""]], "row 2: answer_check deadbeef does not match"),
        ([["q1", check, "3", ""], ["q1", check, "4", ""]], "row 3: item 'q1' is rated twice"),
    ]
    for body, message in cases:
        with pytest.raises(DataError, match=message):
            read_ratings(write_ratings(tmp_path / "x.csv", body), rows)
    bare = write_ratings(tmp_path / "y.csv", [["q1", "3"]], header=("item_id", "score"))
    with pytest.raises(DataError, match="no rating column"):
        read_ratings(bare, rows)
    assert answer_check("a", "b") != answer_check("a", "c")


def test_gamma_edges() -> None:
    assert gamma_edges([0.0, 0.12], bins=3) == pytest.approx([0.0, 0.05, 0.1, 0.15])
    assert gamma_edges([], bins=1) == pytest.approx([0.0, 0.05])


def test_cli_export_import_and_report(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    runner = CliRunner()
    sheet = tmp_path / "sheet.csv"
    result = runner.invoke(main, ["annotate", "export", str(run), "--out", str(sheet)])
    assert result.exit_code == 0, result.output
    assert "4 answers (1 with the coding rubric)" in result.output
    with sheet.open(encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    for name, values in (("alice", ["5", "4", "2", "1"]), ("bob", ["5", "5", "2", "0"])):
        for row, value in zip(table, values, strict=True):
            row["rating"] = value
        with (tmp_path / f"{name}.csv").open("w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    result = runner.invoke(main, ["annotate", "import", str(run), str(tmp_path / "alice.csv"),
                                  str(tmp_path / "bob.csv"), "--bins", "2"])
    assert result.exit_code == 0, result.output
    assert "Fleiss' kappa 0.333 over 4 answers" in result.output
    assert "R = 3.00 ± 1.06" in result.output and "rating = -11.67 γ + 6.50" in result.output
    assert (run / "ratings.json").is_file()
    report = (run / "report.html").read_text(encoding="utf-8")
    assert "Human ratings" in report and "Figure 1" in report
    bad = write_ratings(tmp_path / "bad.csv", [["q1", "", "7", ""]])
    result = runner.invoke(main, ["annotate", "import", str(run), str(bad)])
    assert result.exit_code != 0 and f"{bad}, row 2" in result.output


def test_import_ratings_refuses_other_runs(tmp_path: Path) -> None:
    other = RunDir.create(tmp_path / "dec", "deception", {})
    other.write_samples([])
    with pytest.raises(DataError, match="not a gamma run"):
        import_ratings(other.path, [tmp_path / "x.csv"])
