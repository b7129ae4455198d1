"""The report's data and page without a browser: JSON blocks no text escapes from, the
script allowed by hash only, item rows per method, optional columns, recorded cosines."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from report_runs import PAYLOADS, deception_runs, fewl_runs, gamma_runs
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.run import run_gamma
from veracity.report import build_report
from veracity.report.html import json_block
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.types import Item

BLOCK = re.compile(r"<script type='application/json' id=\"([^\"]+)\">(.*?)</script>", re.S)


def blocks(html: str) -> dict[str, Any]:
    return {name: json.loads(text) for name, text in BLOCK.findall(html)}


def test_json_block_round_trips_and_nothing_reads_as_markup() -> None:
    value = {"texts": list(PAYLOADS), "n": 1.5, "missing": float("nan")}
    html = json_block("x", value)
    inner = html[html.index(">") + 1 : -len("</script>")]
    assert not set("<>&") & set(inner) and "\u2028" not in inner
    assert json.loads(inner) == {"texts": list(PAYLOADS), "n": 1.5, "missing": None}


def test_only_the_reports_own_script_may_run(tmp_path: Path, ctx: Context) -> None:
    paths = gamma_runs(tmp_path, ctx, [Item("a", PAYLOADS[0])], models=("fake/echo",))
    html = build_report(paths, tmp_path / "r.html").read_text(encoding="utf-8")
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(scripts) == 1  # the answer echoes "</script><script>...": it stays data
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    policy = re.search(r"Content-Security-Policy' content=\"([^\"]+)\"", html)
    assert policy is not None
    assert f"script-src 'sha256-{digest}'" in policy.group(1)
    assert "default-src 'none'" in policy.group(1)
    assert "http://" not in html.replace("http://example.invalid", "").replace(
        "http://www.w3.org", "")
    table = blocks(html)["gamma-items"]
    assert table["rows"][0]["prompt"] == PAYLOADS[0]
    assert table["rows"][0]["answer"] == f"You asked: {PAYLOADS[0]}"


def test_gamma_rows_cosines_and_optional_columns(tmp_path: Path, ctx: Context) -> None:
    items = [Item("a", "What is 2+2?"), Item("b", "Name a river.")]
    out = tmp_path / "one"
    run_gamma(items, "fake/unstable", "hash/default", GammaSettings(n=1), ctx, out=out)
    records = list(RunDir.open(out).samples())
    for r in records:  # with one perturbed answer, γ = sin of the angle to it
        [cos] = r["perturbed_cosines"]
        assert r["gamma"] == pytest.approx(math.sqrt(1 - cos**2), abs=1e-9)
    page = blocks(build_report([out], tmp_path / "r.html").read_text(encoding="utf-8"))
    keys = [c["key"] for c in page["gamma-items"]["columns"]]
    assert keys == ["id", "prompt", "answer", "gamma", "verdict", "length"]

    # the numeric control's fields are shown when the run has them, never required
    controlled = tmp_path / "controlled"
    run_gamma(items, "fake/unstable", "hash/default", GammaSettings(n=1, control="numeric"), ctx,
              out=controlled)
    html = build_report([controlled], tmp_path / "c.html").read_text(encoding="utf-8")
    table = blocks(html)["gamma-items"]
    keys = [c["key"] for c in table["columns"]]
    assert "gamma_null" in keys and "p_correct" not in keys
    nulls = {r["id"]: r["gamma_null"] for r in RunDir.open(controlled).samples()}
    assert [r["gamma_null"] for r in table["rows"]] == [nulls["a"], nulls["b"]]
    assert "Numeric control: γ against numerical noise" in html


def test_stable_answers_have_cosine_one(tmp_path: Path, ctx: Context) -> None:
    out = tmp_path / "s"
    run_gamma([Item("a", "What is 2+2?")], "fake/stable", "hash/default", GammaSettings(n=3), ctx,
              out=out)
    [record] = RunDir.open(out).samples()
    assert record["gamma"] == 0.0 and record["perturbed_cosines"] == pytest.approx([1.0] * 3)


def test_comparison_and_per_method_tables(tmp_path: Path, ctx: Context) -> None:
    paths = gamma_runs(tmp_path, ctx) + deception_runs(tmp_path, ctx) + fewl_runs(tmp_path, ctx)
    html = build_report(paths, tmp_path / "r.html").read_text(encoding="utf-8")
    found = blocks(html)
    assert found["gamma-compare"]["default_pair"] == [0, 1]
    assert len(found["gamma-items"]["rows"]) == 24
    subjects = found["deception-subjects"]["rows"]
    assert [r["subject"] for r in subjects] == ["anatomy", "virology"]
    runs = [RunDir.open(p) for p in paths if "deception" in p.name]
    for k, run in enumerate(runs):
        per = run.results["per_subject"]["anatomy"]
        assert subjects[0][f"n{k}"] == pytest.approx(100 * per["normal_accuracy"])
    verdicts = {r["verdict"] for r in found["deception-items"]["rows"]}
    assert verdicts <= {"held (both correct)", "misled", "corrected by the opening",
                        "wrong both times"}
    ranks = found["fewl-ranks"]["rows"]
    assert sorted(r["rank"] for r in ranks) == [1, 2]
    fewl = found["fewl-items"]["rows"]
    assert len(fewl) == 12
    first = fewl[0]
    assert first["_d"]["neighbour_questions"][0] in {r["question"] for r in fewl}
    assert first["fewl"] == pytest.approx(first["truthfulness"] - first["penalty"])


def test_labels_from_validate_fill_the_correct_column(tmp_path: Path, ctx: Context) -> None:
    from veracity.methods.gamma.report import item_rows

    items = [Item("a", "What is 2+2?"), Item("b", "Name a river."), Item("c", "Name a sea.")]
    out = tmp_path / "v"
    run_gamma(items, "fake/unstable", "hash/default", GammaSettings(n=2), ctx, out=out)
    labels = {"items": [{"id": "a", "correct": True}, {"id": "b", "correct": False}]}
    (out / "validation.json").write_text(json.dumps(labels), encoding="utf-8")
    rows = item_rows([RunDir.open(out)], ["run"])
    assert [r["correct"] for r in rows] == [True, False, None]
    assert all(r["verdict"].startswith("unstable") for r in rows)
