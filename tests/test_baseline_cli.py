"""The four baseline commands share one shape (``veracity.cli.baseline``): the same source
options and checks, the same run directory and output, and typed summaries in their results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.cli import main

COMMANDS = ("logprob", "length", "semantic-entropy", "p-true")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_baseline_takes_the_same_source_options(command: str) -> None:
    runner = CliRunner()
    shown = runner.invoke(main, [command, "--help"]).output
    for option in ("--dataset", "--recorded", "--limit", "--sample", "--question-field",
                   "--out", "--json"):
        assert option in shown, (command, option)
    none = runner.invoke(main, [command, "--no-cache"])
    assert none.exit_code != 0 and "exactly one" in none.output
    both = runner.invoke(main, [command, "a question?", "--dataset", "builtin", "--no-cache"])
    assert both.exit_code != 0 and "exactly one" in both.output
    limited = runner.invoke(main, [command, "a question?", "--limit", "2", "--no-cache"])
    assert limited.exit_code != 0 and "--limit and --sample choose questions" in limited.output


@pytest.mark.parametrize("command, extra", [
    ("logprob", ["-m", "fake/stable"]), ("length", ["-m", "fake/stable"]),
    ("semantic-entropy", ["-m", "fake/unstable", "--embedder", "hash/default", "-M", "3"]),
    ("p-true", ["-m", "fake/stable"])])
def test_every_baseline_writes_its_typed_summary(tmp_path: Path, command: str,
                                                 extra: list[str]) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(main, [command, "--dataset", "builtin", "--limit", "3", *extra,
                                       "--no-cache", "-q", "--out", str(out)])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["method"] == command and results["n_items"] == 3
    assert set(results["histogram"]) == {"edges", "counts"}
    config = json.loads((out / "run.json").read_text(encoding="utf-8"))["config"]
    assert config["selection"]["limit"] == 3  # the dataset selection recorded, as before
    assert f"{command}-items" in (out / "report.html").read_text(encoding="utf-8")
