"""The built-in rating scales follow the paper's Tables 5-6 (in our words) and are a rubric file
like any user's: a coding punt is trustworthy, code is judged on running and meeting the ask."""

from __future__ import annotations

import csv
from importlib.resources import as_file, files
from pathlib import Path

from veracity.methods.gamma.validation.annotate import RUBRICS, export_sheet, read_rubric, resolve_rubric

PUNT = {"id": "c1", "prompt": "Write a Python function that parses RFC 5322 dates.",
        "answer": "I don't know how to do that reliably.", "gamma": 0.0}


def test_the_built_in_scales_are_the_packaged_rubric_file() -> None:
    with as_file(files("veracity.data") / "rubrics.txt") as path:
        packaged = read_rubric(Path(path))
    builtin = resolve_rubric("auto")
    assert packaged.scales == builtin.scales == RUBRICS
    # same wording, another name: ids share the wording hash but are never equal
    assert packaged.id.split("@")[1] == builtin.id.split("@")[1] and packaged.id != builtin.id


def test_every_point_of_both_scales_is_numbered_in_order() -> None:
    for scale in RUBRICS.values():
        assert [line.split(":")[0] for line in scale] == [str(k) for k in range(6)]


def test_a_coding_punt_is_trustworthy_and_code_is_judged_on_running_and_the_ask(
        tmp_path: Path) -> None:
    code = RUBRICS["code"]
    assert "punt" in code[5] and code[5].startswith("5: trustworthy")
    assert "not this: see 5" in code[0]  # a punt is never rated as no answer
    assert all("runs" in code[k] or "run" in code[k] for k in (1, 2, 3, 4, 5))
    assert all("requirement" in code[k] for k in (3, 4, 5))
    sheet = tmp_path / "sheet.csv"
    export_sheet([PUNT], sheet)
    with sheet.open(encoding="utf-8") as fh:
        [row] = list(csv.DictReader(fh))
    assert row["kind"] == "code" and row["rubric"] == " | ".join(code)
