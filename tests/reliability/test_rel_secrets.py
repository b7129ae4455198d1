"""A canary key against servers that echo it back: it reaches no file and no output; an
embedder on another server gets a key only when one is named for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from faults import FaultPlan, letter_answer
from mock_openai import MockOpenAI, Reply
from veracity.cli import main

CANARY = "sk-canary-7f3a9c1e5b"
ECHOING = ("400", "500", "503", "error-200", "non-json")


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("veracity.retry.backoff_delay", lambda *args, **kwargs: 0.01)


def _veracity(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _files_holding(folder: Path, secret: bytes) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_a_key_echoed_in_errors_reaches_no_file_and_no_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    (tmp_path / "q.jsonl").write_text("".join(
        json.dumps({"question": f"Echo {i} for me?"}) + "\n" for i in range(8)))
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(
        {"question": f"Pick {i}?", "options": ["a", "b", "c", "d"], "answer": "A",
         "misleading_start": f"It cannot be {i}."}) + "\n" for i in range(6)))
    with MockOpenAI(chooser=FaultPlan(0.4, seed=5, kinds=ECHOING)) as server:
        server.script(Reply(400, {"error": {"message": f"bad request from Bearer {CANARY}"}}))
        gamma = _veracity("gamma", "--dataset", f"jsonl:{tmp_path / 'q.jsonl'}", "--model",
                          "openai/mock", "--base-url", server.url, "--embedder", "hash/default",
                          "-n", "2", "--out", str(tmp_path / "g"), "--json")
        assert {r.headers.get("Authorization") for r in server.received} == {f"Bearer {CANARY}"}
    with MockOpenAI(chooser=FaultPlan(0.4, seed=6, kinds=ECHOING, answer=letter_answer)) as server:
        deception = _veracity("deception", "run", "--dataset", f"mc-jsonl:{tmp_path / 'mc.jsonl'}",
                              "--model", "openai/mock", "--base-url", server.url,
                              "--prefill-mode", "continue", "--out", str(tmp_path / "d"))
    assert gamma.exit_code == 0, gamma.output
    assert deception.exit_code == 0, deception.output
    records = json.loads(gamma.stdout)
    assert any("[redacted]" in (r["error"] or "") for r in records)  # the echo was there
    for result in (gamma, deception):
        assert CANARY not in result.output
    assert _files_holding(tmp_path, CANARY.encode()) == []


def test_an_embedder_on_another_server_gets_a_key_only_when_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("EMBED_KEY", "sk-embedder-only")
    with MockOpenAI() as model, MockOpenAI() as embedder:
        common = ["gamma", "Who wrote Hamlet?", "--model", "openai/m", "--base-url", model.url,
                  "--embedder", "openai/e", "--embedder-base-url", embedder.url, "-n", "1",
                  "--no-cache", "--json"]
        assert _veracity(*common).exit_code == 0
        sent = [r.headers.get("Authorization") for r in embedder.received]
        assert sent and sent == [None] * len(sent)
        named = _veracity(*common, "--embedder-api-key-env", "EMBED_KEY")
        assert named.exit_code == 0, named.output
        assert embedder.received[-1].headers.get("Authorization") == "Bearer sk-embedder-only"
        assert {r.headers.get("Authorization") for r in model.received} == {f"Bearer {CANARY}"}
