"""Multiple-choice loaders and the recorded-results reader: real files and bad input."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest

from veracity.data.mc import (
    load_db_mmlu,
    load_mc,
    load_mc_jsonl,
    load_mmlu,
    read_recorded_file,
    write_db_mmlu_file,
)
from veracity.errors import DataError
from veracity.methods.deception.run import run_deception_recorded
from veracity.types import MCItem


@pytest.fixture
def db_mmlu(data_dir: Path) -> Path:
    return data_dir / "db-mmlu" / "DB-MMLU Dataset"


def _csv(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def test_db_mmlu_real_subject(db_mmlu: Path) -> None:
    items = load_db_mmlu(db_mmlu, ["abstract_algebra"])
    assert len(items) == 116  # 100 test + 5 dev + 11 val, multi-line cells included
    first = items[0]
    assert first.id == "abstract_algebra/1" and first.answer == "C"
    assert first.question.startswith("Some group (G, 0) is known to be abelian")
    assert first.options[3] == "G is of finite order"
    assert all(i.misleading_start.startswith("Let's reason step by step. ") for i in items)
    assert len(load_db_mmlu(db_mmlu, ["anatomy", "virology"], limit_per_subject=3)) == 6


def test_db_mmlu_whole_dataset(db_mmlu: Path) -> None:
    items = load_mc(f"db-mmlu:{db_mmlu}")
    assert len(items) == 15858
    assert len({i.subject for i in items}) == 57
    assert {i.answer for i in items} == {"A", "B", "C", "D"}


def test_mmlu_real_files(data_dir: Path) -> None:
    test = load_mmlu(data_dir / "mmlu" / "test", ["abstract_algebra"])
    assert len(test) == 100
    assert test[0].id == "abstract_algebra/2"  # row 1 is the header
    assert test[0].answer == "B" and test[0].options == ("0", "4", "2", "6")  # answer index 1
    assert test[0].misleading_start == ""
    assert len(load_mc(f"mmlu:{data_dir / 'mmlu' / 'dev'}")) == 285
    single = load_mc(f"mmlu:{data_dir / 'mmlu' / 'dev' / 'anatomy_dev.csv'}")
    assert len(single) == 5 and single[0].subject == "anatomy"


def test_mc_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    lines = [
        {"question": "2+2?", "options": ["3", "4", "5", "6"], "answer": 1, "subject": "math"},
        {"question": "Capital of France?", "options": {"A": "Paris", "B": "Rome", "C": "Oslo",
         "D": "Bern"}, "answer": "A", "misleading_start": "Let's reason step by step. Hmm.",
         "id": "geo-1"},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    items = load_mc(f"mc-jsonl:{path}")
    assert items[0] == MCItem("math/1", "math", "2+2?", ("3", "4", "5", "6"), "B")
    assert items[1].id == "geo-1" and items[1].subject == "q" and items[1].answer == "A"
    assert len(load_mc_jsonl(path, ["math"])) == 1


def test_write_then_read_db_mmlu(tmp_path: Path) -> None:
    items = [MCItem("x/1", "x", 'Say "hi",\nplease', ("a", "b, c", "d", "e"), "D",
                    "Let's reason step by step. Quote \"this\".")]
    write_db_mmlu_file(tmp_path / "x.csv", items)
    assert load_db_mmlu(tmp_path) == items


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("db-mmlu", "must be one of"),
        ("csv:foo", "must be one of"),
        ("db-mmlu:/no/such/dir", "dataset directory not found"),
        ("mc-jsonl:/no/such.jsonl", "file not found"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        load_mc(spec)


def test_missing_subject_names_it(db_mmlu: Path) -> None:
    with pytest.raises(DataError, match="no file for subject.*astrology"):
        load_db_mmlu(db_mmlu, ["anatomy", "astrology"])


def test_bad_dataset_rows_name_file_and_row(tmp_path: Path) -> None:
    good = ["Q?", "Let's reason step by step. X.", "a", "b", "c", "d", "A"]
    (tmp_path / "cols.csv").write_text(_csv([good, good[:6]]), encoding="utf-8")
    with pytest.raises(DataError, match=r"cols\.csv, row 2: expected 7 columns.*found 6"):
        load_db_mmlu(tmp_path, ["cols"])
    (tmp_path / "gold.csv").write_text(_csv([good, good, [*good[:6], "E"]]), encoding="utf-8")
    with pytest.raises(DataError, match=r"gold\.csv, row 3: answer must be one of A, B, C, D"):
        load_db_mmlu(tmp_path, ["gold"])
    (tmp_path / "mm_test.csv").write_text(
        "question,choice0,choice1,choice2,choice3,answer\nQ,a,b,c,d,4\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"mm_test\.csv, row 2: answer must be an integer 0-3"):
        load_mmlu(tmp_path / "mm_test.csv")
    jl = tmp_path / "bad.jsonl"
    jl.write_text('{"question": "Q", "options": ["a", "b"], "answer": 0}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl, line 1, field 'options': expected a list of 4"):
        load_mc_jsonl(jl)


RECORDED = [
    ["B", 'Let\'s reason step by step. He said "two".', "B", "Let's reason step by step. X.", "C"],
    ["A", '{\n    "Reasoning": "cut', "-", "Let's reason step by step. Y.\nStill.", "A"],
]


def test_recorded_reader_csv_and_gzip(tmp_path: Path) -> None:
    (tmp_path / "plain.csv").write_text(_csv(RECORDED), encoding="utf-8")
    (tmp_path / "packed.csv.gz").write_bytes(gzip.compress(_csv(RECORDED).encode("utf-8")))
    for name in ("plain.csv", "packed.csv.gz"):
        rows = read_recorded_file(tmp_path / name)
        assert [(r.row, r.gold, r.normal_answer, r.misleading_answer) for r in rows] == [
            (1, "B", "B", "C"), (2, "A", "-", "A")]
        assert rows[0].normal_reasoning == 'Let\'s reason step by step. He said "two".'
        assert rows[1].misleading_reasoning.endswith("Y.\nStill.")


def _tiny_dataset(root: Path) -> Path:
    data = root / "data"
    data.mkdir()
    rows = [["Q1?", "Let's reason step by step. M1.", "a", "b", "c", "d", "B"],
            ["Q2?", "Let's reason step by step. M2.", "a", "b", "c", "d", "A"]]
    (data / "tiny.csv").write_text(_csv(rows), encoding="utf-8")
    return data


def test_recorded_bad_input_names_file_and_row(tmp_path: Path) -> None:
    data = _tiny_dataset(tmp_path)
    spec = f"db-mmlu:{data}"
    results = tmp_path / "results"
    results.mkdir()
    target = results / "tiny.csv"
    cases = [
        ([RECORDED[0], RECORDED[1][:4]], r"tiny\.csv, row 2: expected 5 columns"),
        ([RECORDED[0], ["F", *RECORDED[1][1:]]], r"tiny\.csv, row 2, column 1 \(gold\)"),
        ([RECORDED[0], [*RECORDED[1][:2], "X", *RECORDED[1][3:]]],
         r"tiny\.csv, row 2, column 3: prediction must be A-D or '-'"),
        ([RECORDED[0]], r"has 1 rows but .*tiny\.csv has 2: no result for dataset row 2"),
        ([*RECORDED, RECORDED[1]], r"results/tiny\.csv, row 3: no such row in .*data/tiny\.csv"),
        ([RECORDED[0], ["C", *RECORDED[1][1:]]],
         r"results/tiny\.csv, row 2: gold letter C does not match .*data/tiny\.csv, row 2"),
    ]
    for rows, message in cases:
        target.write_text(_csv(rows), encoding="utf-8")
        with pytest.raises(DataError, match=message):
            run_deception_recorded(results, spec)
    target.write_text(_csv(RECORDED), encoding="utf-8")
    with pytest.raises(DataError, match=r"no results file for subject\(s\) other"):
        run_deception_recorded(results, spec, subjects=["other"])
    with pytest.raises(DataError, match=r"results directory not found: .*nowhere"):
        run_deception_recorded(tmp_path / "nowhere", spec)
    (results / "extra.csv").write_text(_csv(RECORDED), encoding="utf-8")
    with pytest.raises(DataError, match=r"extra\.csv: the dataset .* has no file extra\.csv"):
        run_deception_recorded(results, spec)


def test_recorded_scoring_by_hand(tmp_path: Path) -> None:
    data = _tiny_dataset(tmp_path)
    results = tmp_path / "MyModel"
    results.mkdir()
    (results / "tiny.csv.gz").write_bytes(gzip.compress(_csv(RECORDED).encode()))
    outcome = run_deception_recorded(results, f"db-mmlu:{data}", out=tmp_path / "run")
    r = outcome.results
    assert r["model"] == "MyModel" and r["source"] == "recorded"
    assert (r["normal_accuracy"], r["misleading_accuracy"]) == (0.5, 0.5)
    assert r["susceptibility"] == 1.0 and r["consistency"] == 0.0
    assert (r["error_rate_normal"], r["error_rate_misleading"]) == (0.5, 0.0)
    assert outcome.run is not None and outcome.run.method == "deception"
    samples = list(outcome.run.samples())
    assert samples[1]["normal"] == {"answer": "-", "reasoning": '{\n    "Reasoning": "cut'}


def test_recorded_real_subject_all_correct(db_mmlu: Path, tmp_path: Path) -> None:
    items = load_db_mmlu(db_mmlu, ["anatomy"])
    rows = [[i.answer, "r", i.answer, "r", "-"] for i in items]
    (tmp_path / "anatomy.csv").write_text(_csv(rows), encoding="utf-8")
    r = run_deception_recorded(tmp_path, f"db-mmlu:{db_mmlu}").results
    assert r["n_items"] == len(items) == 154
    assert r["normal_accuracy"] == 1.0 and r["misleading_accuracy"] == 0.0
    assert r["error_rate_misleading"] == 1.0 and r["susceptibility"] is None
