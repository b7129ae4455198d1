"""Where ``veracity report`` writes without ``--out``: a run's own report, never over a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.cli import main


def _run(out: Path, model: str) -> None:
    result = CliRunner().invoke(main, ["gamma", "What is 2+2?", "--model", model, "--embedder",
                                       "hash/default", "-n", "2", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output


def test_one_run_gets_its_own_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _run(tmp_path / "runs" / "a", "fake/echo")
    (tmp_path / "runs" / "a" / "report.html").unlink()
    result = CliRunner().invoke(main, ["report", "runs/a"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "a" / "report.html").is_file()
    assert not (tmp_path / "report.html").exists()
    assert "runs/a/report.html" in result.output


def test_several_runs_never_replace_a_report_here(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _run(tmp_path / "a", "fake/echo")
    _run(tmp_path / "b", "fake/stable")
    mine = tmp_path / "report.html"
    mine.write_text("my own notes", encoding="utf-8")
    refused = CliRunner().invoke(main, ["report", "a", "b"])
    assert refused.exit_code != 0 and "exists" in refused.output and "--force" in refused.output
    assert mine.read_text(encoding="utf-8") == "my own notes"
    forced = CliRunner().invoke(main, ["report", "a", "b", "--force"])
    assert forced.exit_code == 0, forced.output
    assert "<html" in mine.read_text(encoding="utf-8").lower()
    named = CliRunner().invoke(main, ["report", "a", "b", "--out", "both.html"])
    assert named.exit_code == 0 and (tmp_path / "both.html").is_file()
