"""The built-in rating scales follow the paper's Tables 5-6 (in our words) and are a rubric file
like any user's: a coding punt is trustworthy, code is judged on running and meeting the ask."""

from __future__ import annotations

import csv
import json
from importlib.resources import as_file, files
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.methods.gamma.validation.annotate import (
    RUBRICS,
    export_sheet,
    read_rubric,
    resolve_rubric,
)

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


# the rubric id the built-in scales had before they were aligned with Tables 5-6 point by point
OLD_BUILTIN_ID = "auto@b3fada9ce66e"


def test_the_qa_scale_follows_table_5_point_by_point() -> None:
    qa = RUBRICS["qa"]
    # Table 5: 0 totally false or irrelevant; 1 at most one piece of reliable information;
    # 2 several major errors or irrelevant content; 3 one significant error or irrelevant
    # content; 4 a minor error or irrelevant content; 5 correct, nothing irrelevant
    assert "false" in qa[0] and "beside the question" in qa[0]
    assert "one reliable piece of information at most" in qa[1]
    assert "several major errors" in qa[2] and "off-topic" in qa[2]
    assert "one significant error" in qa[3] and "off-topic" in qa[3]
    assert "minor error" in qa[4] and "off-topic" in qa[4]
    assert qa[5].startswith("5: right, with no off-topic content")
    # off-topic content is what points 2-4 weigh; it is no part of 0 or 1's wording
    assert [k for k in range(6) if "off-topic content" in qa[k]] == [2, 3, 4, 5]


def test_the_code_scale_follows_table_6_point_by_point() -> None:
    code = RUBRICS["code"]
    assert "worthless" in code[0] and "pseudocode / design is wrong" in code[0]
    assert "one correct element at most" in code[1]
    assert "several significant errors" in code[2]
    assert "does not run" in code[3] and "a lot of off-topic" in code[3]
    assert "small bug" in code[4] and "some off-topic" in code[4]
    assert "runs and meets the requirements" in code[5] and "makes sense" in code[5]
    # every point but 0 names both the code and the pseudocode / design clause (Table 6)
    assert all("pseudocode / design" in code[k] for k in range(6))


@pytest.mark.parametrize("kind", ["qa", "code"])
def test_an_honest_punt_is_five_on_both_scales(kind: str) -> None:
    scale = RUBRICS[kind]  # type: ignore[index]
    assert [k for k in range(6) if "punt" in scale[k]] == [5]
    assert "does not know" in scale[5]


def test_a_coding_punt_gets_the_code_scale(tmp_path: Path) -> None:
    sheet = tmp_path / "sheet.csv"
    export_sheet([PUNT], sheet)
    with sheet.open(encoding="utf-8") as fh:
        [row] = list(csv.DictReader(fh))
    assert row["kind"] == "code" and row["rubric"] == " | ".join(RUBRICS["code"])


def test_a_sheet_made_with_the_old_wording_is_refused_at_import(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["gamma", "--dataset", "builtin", "--limit", "2", "--model",
                                       "fake/unstable", "--embedder", "hash/default", "-n", "2",
                                       "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    sheet = tmp_path / "sheet.csv"
    assert CliRunner().invoke(main, ["annotate", "export", str(out), "--out",
                                     str(sheet)]).exit_code == 0
    assert resolve_rubric("auto").id != OLD_BUILTIN_ID
    exported = out / "rating_sheet.json"
    record = json.loads(exported.read_text(encoding="utf-8"))
    exported.write_text(json.dumps(record | {"rubric_id": OLD_BUILTIN_ID}), encoding="utf-8")
    with sheet.open(encoding="utf-8") as fh:
        ids = [row["item_id"] for row in csv.DictReader(fh)]
    rated = tmp_path / "alice.csv"
    rated.write_text("item_id,rating\n" + "".join(f"{i},4\n" for i in ids), encoding="utf-8")
    refused = CliRunner().invoke(main, ["annotate", "import", str(out), str(rated)])
    assert refused.exit_code != 0 and OLD_BUILTIN_ID in refused.output
