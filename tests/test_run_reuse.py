"""Issue 44, fixes 1-3: a command re-opening a run's model asks the run's server; a default run
directory is never replaced by a run with other settings; a run whose server never answered
fails."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mock_openai import MockOpenAI
from veracity.cli import main


@pytest.fixture(autouse=True)
def _no_ambient_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def cli(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == code, result.output
    return result


def test_validate_asks_the_runs_server_and_says_so(tmp_path: Path) -> None:
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i}+{i}?", "answer": str(2 * i)})
                            + "\n" for i in range(4)))
    run, cache = tmp_path / "run", str(tmp_path / "cache.sqlite")
    with MockOpenAI() as mock:
        cli("gamma", "--dataset", f"jsonl:{data}", "--model", "openai/test-model", "--base-url",
            mock.url, "--embedder", "hash/default", "-n", "2", "--out", str(run), "--cache", cache,
            "--quiet")
        before = len(mock.received)
        result = cli("validate", "gamma", str(run), "--baseline-samples", "2", "--cache", cache)
        assert len(mock.received) - before == 4 * 2  # the baseline went to the run's server
    assert f"the run's endpoint {mock.url} (from run.json; $OPENAI_API_KEY is sent there" \
        in result.output
    validation = json.loads((run / "validation.json").read_text())
    assert validation["endpoints_from_run"] and validation["baseline"] is not None


def test_a_default_directory_is_never_replaced_by_other_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    common = ["gamma", "--dataset", "builtin", "--model", "fake/echo", "--embedder",
              "hash/default", "-n", "2", "--cache", "cache.sqlite"]
    cli(*common, "--limit", "4")
    plain = tmp_path / "runs" / "gamma-builtin-fake-echo"
    first = (plain / "samples.jsonl").read_text()
    other = cli(*common, "--limit", "3")
    assert "holds a run made with other settings" in other.output
    assert (plain / "samples.jsonl").read_text() == first  # untouched
    [elsewhere] = [p for p in (tmp_path / "runs").iterdir() if p != plain and p.is_dir()]
    assert len((elsewhere / "samples.jsonl").read_text().splitlines()) == 3
    again = cli(*common, "--limit", "4")  # the same command resumes in its own directory
    assert "0 model calls" in again.output and f"run directory: {Path('runs') / plain.name}" \
        in again.output
    cli(*common, "--limit", "3")
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_a_run_whose_server_never_answered_fails_with_the_last_error(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = cli("gamma", "What is 3+3?", "-n", "2", "--model", "openai/llama3", "--base-url",
                 f"http://127.0.0.1:{port}/v1", "--embedder", "hash/default", "--no-cache",
                 "--model-option", "max_retries=0", "--out", str(tmp_path / "run"), code=1)
    assert "none of the 1 items could be scored: the model's server never answered" \
        in result.output
    assert "last error:" in result.output and "Traceback" not in result.output


def test_a_consistency_run_whose_server_never_answered_fails_too(tmp_path: Path) -> None:
    """Its greedy stage stops at the first failure: already an error naming it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = cli("consistency", "What is 3+3?", "--model", "openai/llama3", "--base-url",
                 f"http://127.0.0.1:{port}/v1", "--embedder", "hash/default", "--no-cache",
                 "--model-option", "max_retries=0", "--out", str(tmp_path / "run"), code=1)
    assert result.output.startswith("Error: ") and "Connection refused" in result.output
