"""The paper's corpora and settings: Programming QA, rubric files, --preset paper, validity."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from data_paths import FIXTURES
from veracity.cli import main
from veracity.data.qa import domain_of, load_items
from veracity.errors import ConfigError, DataError
from veracity.methods.gamma.validation.annotate import read_rubric, resolve_rubric, sheet_rows
from veracity.store import RunDir

PROGQA = FIXTURES / "progqa" / "programming_qa.jsonl"
FAKE = ["--model", "fake/unstable", "--embedder", "hash/default"]


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output  # stdout and stderr, as a terminal shows them


def test_programming_qa_loader(tmp_path: Path) -> None:
    items = load_items(f"progqa:{PROGQA}")
    assert len(items) == 25 and items[0].id == "progqa-1" and items[-1].id == "progqa-25"
    assert items[0].question == "How do I reverse a list in Python?"
    assert items[0].references[0].startswith("Use slicing")
    assert all(i.metadata["domain"] == "programming" for i in items)
    assert domain_of(f"progqa:{PROGQA}") == "Programming QA"
    # the coding rubric is chosen for every item, whatever its wording
    rows = sheet_rows([{"id": i.id, "prompt": i.question, "answer": "x", "metadata": i.metadata}
                       for i in items])
    assert {r.kind for r in rows} == {"code"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "Why?", "response": 3}\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 1, field 'response'"):
        load_items(f"progqa:{bad}")
    bad.write_text('{"question": "Why?"}\n', encoding="utf-8")
    with pytest.raises(DataError, match="no 'prompt' field"):
        load_items(f"progqa:{bad}")


def test_rubric_files(tmp_path: Path) -> None:
    one = tmp_path / "one.txt"
    one.write_text("# ours\n" + "".join(f"{k}: level {k}\n" for k in range(6)), encoding="utf-8")
    rubric = read_rubric(one)
    assert rubric.name == "file:one.txt" and rubric.scales["qa"] == rubric.scales["code"]
    assert rubric.scales["qa"][5] == "5: level 5"
    two = tmp_path / "two.txt"
    two.write_text("[qa]\n" + "".join(f"{k}: qa {k}\n" for k in range(6))
                   + "[code]\n" + "".join(f"{k}: code {k}\n" for k in range(6)), encoding="utf-8")
    assert read_rubric(two).scales["code"][0] == "0: code 0"
    assert read_rubric(two).id != rubric.id != resolve_rubric("auto").id
    for text, message in (("0: a\n1: b\n", "six lines"), ("1: a\n", "expected '0: ...'"),
                          ("[qa]\n" + "".join(f"{k}: x\n" for k in range(6)), r"both a \[qa\]")):
        one.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match=message):
            read_rubric(one)
    with pytest.raises(ConfigError, match="not a file"):
        resolve_rubric(str(tmp_path / "absent.txt"))


def test_rubric_file_round_trip_and_no_silent_pooling(tmp_path: Path) -> None:
    out = tmp_path / "g"
    run("gamma", "--dataset", "builtin", "--limit", "4", *FAKE, "-n", "2", "--out", str(out),
        "--json")
    rubric = tmp_path / "mine.txt"
    rubric.write_text("".join(f"{k}: our level {k}\n" for k in range(6)), encoding="utf-8")
    sheet = tmp_path / "sheet.csv"
    run("annotate", "export", str(out), "--out", str(sheet), "--rubric", str(rubric))
    with sheet.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["rubric"] == " | ".join(f"{k}: our level {k}" for k in range(6))
    exported = json.loads((out / "rating_sheet.json").read_text(encoding="utf-8"))
    assert exported["rubric_id"] == read_rubric(rubric).id
    rated = tmp_path / "alice.csv"
    rated.write_text("item_id,rating\n" + "".join(f"{r['item_id']},3\n" for r in rows),
                     encoding="utf-8")
    refused = CliRunner().invoke(main, ["annotate", "import", str(out), str(rated)])
    assert refused.exit_code != 0 and "not pooled" in refused.output
    run("annotate", "import", str(out), str(rated), "--rubric", str(rubric))
    saved = json.loads((out / "ratings.json").read_text(encoding="utf-8"))
    assert saved["rubric_id"] == read_rubric(rubric).id and saved["mean_rating"] == 3.0


def test_preset_paper_sets_the_papers_settings_and_explicit_options_win(tmp_path: Path) -> None:
    out = tmp_path / "p"
    text = run("gamma", "--dataset", f"progqa:{PROGQA}", *FAKE, "--preset", "paper", "-n", "2",
               "--sample", "5", "--out", str(out), "--json")
    assert "preset paper: ball=ascii-control, form=paper-code, max-tokens=1024" in text
    assert "(given explicitly: n=2)" in text
    pure = CliRunner().invoke(main, ["gamma", "--dataset", f"progqa:{PROGQA}", *FAKE, "--preset",
                                     "paper", "-n", "2", "--sample", "5", "--out", str(out),
                                     "--json"])
    assert json.loads(pure.stdout)[0]["form"] == "paper-code"  # the preset line is on stderr
    info = RunDir.open(out).info["config"]
    assert info["preset"]["applied"]["form"] == "paper-code"
    assert info["preset"]["overridden"] == {"n": 2}
    settings = info["settings"]
    assert (settings["n"], settings["form"], settings["max_tokens"], settings["ball"]) == (
        2, "paper-code", 1024, "ascii-control")
    assert settings["threshold"] == 0.05 and info["domain"] == "Programming QA"
    assert info["selection"]["n_selected"] == 5
    # its references are worked answers, not gold answers: no correctness is claimed
    assert "AUROC" not in text and not (out / "validation.json").exists()
    attack = tmp_path / "atk"
    run("attack", "--prompt", "What is 2+2?", "--model", "fake/slope", "--embedder",
        "hash/default", "--preset", "paper", "-n", "2", "--steps", "1", "--out", str(attack),
        "--json")
    results = RunDir.open(attack).results["settings"]
    assert (results["ball"], results["charset"], results["form"]) == ("utf8", "utf8", "paper-code")
    iso = tmp_path / "iso"
    run("isotropy", "--dataset", "builtin", "--limit", "3", *FAKE, "--preset", "paper", "-n", "2",
        "--out", str(iso), "--json")
    recorded = RunDir.open(iso).info["config"]
    assert recorded["preset"]["applied"] == {"ball": "ascii-control", "max_tokens": 1024}
    assert recorded["settings"]["max_tokens"] == 1024
    sheet = tmp_path / "sheet.csv"
    text = run("annotate", "export", str(out), "--out", str(sheet), "--preset", "paper")
    assert "preset paper: sample=100" in text
    recorded = json.loads((out / "rating_sheet.json").read_text(encoding="utf-8"))
    assert recorded["selection"]["sample"] == 100 and recorded["n_rows"] == 5


def test_first_screen_validity(tmp_path: Path) -> None:
    out = tmp_path / "v"
    text = run("gamma", "--dataset", "builtin", "--limit", "6", "--model", "fake/echo",
               "--embedder", "hash/default", "-n", "2", "--out", str(out))
    # fake/echo repeats the question, which never holds the reference answer
    assert "correct 0 of 6 labelled answers (0.0%; 6 by contains)" in text
    assert "AUROC of γ for flagging the wrong ones" in text and " right" in text
    validation = json.loads((out / "validation.json").read_text(encoding="utf-8"))
    assert validation["n_labelled"] == 6 and validation["baseline"] is None
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "Validation against labels" in report
    quiet = run("gamma", "--dataset", "builtin", "--limit", "2", "--model", "fake/echo",
                "--embedder", "hash/default", "-n", "2", "--out", str(tmp_path / "w"),
                "--no-validity")
    assert "AUROC" not in quiet and not (tmp_path / "w" / "validation.json").exists()
