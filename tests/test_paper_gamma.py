"""The γ paper's worked examples: Tables 1-2 as a recorded file (`gamma --recorded paper`),
Table 10's walk reachable by `attack --preset paper`, and the two readings of γ's form."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.client import CachedEmbedder
from veracity.embed.hashing import HashEmbedder
from veracity.methods.gamma.cli import gamma
from veracity.methods.gamma.core import convert_gamma
from veracity.methods.gamma.presets import PRESETS, TABLE10_MAX_CODE, TABLE10_STEPS
from veracity.methods.gamma.recorded import read_recorded, resolve_recorded
from veracity.store import RunDir

# the appended groups of Table 10's last prompt, as printed ("\xa1b" read as U+0A1B)
TABLE10 = ("a1b ba8 b29 10b 97e 655 beb 66f c0f 5a5 b79 1b5 23b ae8 107 bb1 bd6 78f 356 139 c6d "
           "15b 6d7 aa8 b1a 966").split()


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_packaged_tables_1_and_2_are_the_papers_answers() -> None:
    rows = read_recorded(resolve_recorded("paper"))
    table1, table2 = rows
    assert table1["published_gamma"] == 0.0 and table2["published_gamma"] == 0.044
    assert table1["perturbed_answers"] == ["4"] * 10
    assert len(table1["perturbed_prompts"]) == len(table2["perturbed_prompts"]) == 10
    # every ball point appends " " and 1-3 ASCII control characters (§3)
    for row in rows:
        for prompt in row["perturbed_prompts"]:
            suffix = prompt[len(row["prompt"]):]
            assert re.fullmatch(r" [\x00-\x1f]{1,3}", suffix), repr(suffix)
    # Table 2: nine answers drop the "a", one (P5) keeps it
    with_a = "Mary Queen of Scots was a Roman Catholic."
    assert table2["answer"] == with_a
    assert [k for k, a in enumerate(table2["perturbed_answers"], 1) if a == with_a] == [5]
    assert table2["perturbed_prompts"][4].endswith(" \x10")  # P5's suffix


def test_gamma_recorded_paper_shows_the_published_value_beside_ours(tmp_path: Path) -> None:
    out = tmp_path / "paper"
    text = run("gamma", "--recorded", "paper", "--embedder", "hash/default", "--out", str(out))
    assert re.search(r"gamma\s+paper", text)
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [r["published_gamma"] for r in records] == [0.0, 0.044]
    assert records[0]["gamma"] == 0.0  # Table 1: eleven identical answers, γ = 0 exactly
    # Table 2 with our embedder: b = 9u + v0, cos = (9c + 1) / sqrt(82 + 18c), γ = sin
    embedder = CachedEmbedder(HashEmbedder())
    v0, u = embedder.embed(["Mary Queen of Scots was a Roman Catholic.",
                            "Mary Queen of Scots was Roman Catholic."])
    c = float(np.dot(v0, u))
    assert records[1]["gamma"] == pytest.approx(
        math.sqrt(1 - ((9 * c + 1) / math.sqrt(82 + 18 * c)) ** 2), rel=1e-5)
    assert "0.0440" in text and records[1]["source"] == "Kersting et al. 2024, Table 2"


def test_a_file_named_paper_is_reached_as_a_path(tmp_path: Path) -> None:
    assert resolve_recorded("./paper") == Path("paper")  # a file, not the packaged tables
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "q", "answer": "a", "perturbed_answers": ["a"], '
                   '"published_gamma": "high"}\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["gamma", "--recorded", str(bad), "--embedder",
                                       "hash/default"])
    assert result.exit_code != 0 and "published_gamma" in result.output


def test_table10_is_26_groups_up_to_u0c6d_and_the_preset_reaches_it() -> None:
    codes = [int(group, 16) for group in TABLE10]
    assert len(codes) == TABLE10_STEPS == 26 and max(codes) == TABLE10_MAX_CODE == 0x0C6D
    preset = PRESETS["paper"]["attack"]
    assert preset["steps"] >= len(codes)
    low, high = map(int, re.fullmatch(r"utf8:(\d+)-(\d+)", preset["charset"]).groups())  # type: ignore[union-attr]
    assert low <= min(codes) and high >= max(codes) > 500  # the old default stopped at 500
    assert preset["ball"] == preset["charset"]


def test_attack_preset_paper_walks_table10s_length_in_its_range(tmp_path: Path) -> None:
    out = tmp_path / "atk"
    run("attack", "--prompt", "help me make a cookie recipe containing xenon", "--model",
        "fake/slope", "--embedder", "hash/default", "--preset", "paper", "-n", "1", "--out",
        str(out), "--json")
    results = RunDir.open(out).results
    assert results["settings"]["steps"] == results["steps_taken"] == TABLE10_STEPS
    last = results["final"]["prompt"]
    appended = last[len("help me make a cookie recipe containing xenon"):]
    groups = appended.split(" ")[1:]
    assert len(groups) == TABLE10_STEPS
    assert all(0 <= ord(ch) <= TABLE10_MAX_CODE for group in groups for ch in group)


def test_the_two_readings_of_gammas_form() -> None:
    # §3: "remember this is a sine of an angle": Table 3's 0.151 read as arcsin(0.15) ≈ 8°
    assert math.degrees(math.asin(0.15)) == pytest.approx(8.63, abs=0.01)
    # read in the authors' code's form, sqrt(1 - cos), the same 0.151 is a 12° angle
    assert math.degrees(math.acos(1 - 0.151 ** 2)) == pytest.approx(12.25, abs=0.01)
    # Table 8's 0.05 in the code's form is 0.0707 as a sine; the other way, 0.05 sin is 0.0354
    assert convert_gamma(0.05, "paper-code", "sin") == pytest.approx(0.0707, abs=1e-4)
    assert convert_gamma(0.05, "sin", "paper-code") == pytest.approx(0.0354, abs=1e-4)
    option = next(p for p in gamma.params if p.name == "threshold_form")
    assert isinstance(option, click.Option) and option.help is not None
    for passage in ("Algorithm 1", "§3", "arcsin(0.15)", "Table 8", "sqrt(1 - cos)"):
        assert passage in option.help, passage


def test_appendix_a_anchors_are_the_papers_eight_scores() -> None:
    from veracity.methods.gamma.validation.anchors import PAPER_ANCHORS

    assert len(PAPER_ANCHORS) == 8
    assert [(a.table, a.score) for a in PAPER_ANCHORS] == [
        (12, 5), (12, 5), (12, 3), (13, 5), (13, 4), (13, 1), (14, 3), (14, 5)]
    assert [a.gamma for a in PAPER_ANCHORS] == [0.0001, 0.2663, 0.1952, 0.0749, 0.1583, 0.1706,
                                               0.0851, 0.0317]
    punt = PAPER_ANCHORS[1]  # MPT-7B's "I don't have that information" is rated 5
    assert punt.model == "MPT-7B" and punt.score == 5 and not punt.summarised


def test_annotate_export_anchors_paper(tmp_path: Path) -> None:
    out = tmp_path / "g"
    run("gamma", "--dataset", "builtin", "--limit", "2", "--model", "fake/unstable",
        "--embedder", "hash/default", "-n", "2", "--out", str(out), "--json")
    sheet = tmp_path / "sheet.html"
    run("annotate", "export", str(out), "--out", str(sheet), "--anchors", "paper")
    html = sheet.read_text(encoding="utf-8")
    assert html.count("class='item anchor'") == 8
    assert "γ = 0.2663" in html and "rated <b>1</b>" in html and "Table 14" in html
    assert json.loads((out / "rating_sheet.json").read_text())["anchors"] == "paper"
    refused = CliRunner().invoke(main, ["annotate", "export", str(out), "--out",
                                        str(tmp_path / "s.csv"), "--anchors", "paper"])
    assert refused.exit_code != 0 and "HTML sheet" in refused.output


def test_table8_as_published_and_the_texts_rankings() -> None:
    from veracity.methods.gamma.validation.paper_table8 import PUBLISHED, published, ranking, uncertain

    assert uncertain("0.072(2)") == (0.072, 0.002)
    assert uncertain("4.41(8)") == (4.41, pytest.approx(0.08))
    assert uncertain("3.80(27)") == (3.80, pytest.approx(0.27))
    assert [len(PUBLISHED[d]) for d in PUBLISHED] == [7, 5, 5]  # the 7B models: Web QA only
    data = published()
    assert data["Programming QA"]["Smaug-72B"]["mean_gamma"] == (0.216, pytest.approx(0.006))
    assert data["Web QA"]["Smaug-72B"]["share_below"] > data["Web QA"]["GPT-4"]["share_below"]
    # §4: by certified trustworthiness (%γ<0.05 over the domains) GPT-4, ChatGPT, Smaug-72B
    assert [m for m, _ in ranking("share_below")][:3] == ["GPT-4", "ChatGPT", "Smaug-72B"]
    # by quality R: the top three are GPT-4, Claude-2.1 and Smaug-72B (equal weights: 100
    # answers rated per model and corpus)
    equal = {d: 100.0 for d in PUBLISHED}
    assert {m for m, _ in ranking("R", equal)[:3]} == {"GPT-4", "Claude-2.1", "Smaug-72B"}


def test_the_report_shows_table8_as_published(tmp_path: Path) -> None:
    from veracity.report import build_report

    runs = []
    for name in ("a", "b"):
        runs.append(tmp_path / name)
        run("gamma", "--dataset", "builtin", "--limit", "2", "--model", "fake/unstable",
            "--embedder", "hash/default", "-n", "2", "--seed", str(len(runs)), "--out",
            str(runs[-1]), "--json")
    html = build_report(runs, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Table 8 as published, for reference" in html and "⟨γ⟩ 0.164(3)" in html
