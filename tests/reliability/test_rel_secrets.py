"""A canary key against servers that echo it back: it reaches no file and no output; an
embedder on another server gets a key only when one is named for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from faults import FaultPlan, letter_answer
from mock_openai import MockOpenAI, Reply

CANARY = "sk-canary-7f3a9c1e5b"
ECHOING = ("400", "500", "503", "error-200", "non-json")


def _veracity(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "veracity", *args], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)


def _files_holding(folder: Path, secret: bytes) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_a_key_echoed_in_errors_reaches_no_file_and_no_output(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text("".join(
        json.dumps({"question": f"Echo {i} for me?"}) + "\n" for i in range(6)))
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(
        {"question": f"Pick {i}?", "options": ["a", "b", "c", "d"], "answer": "A",
         "misleading_start": f"It cannot be {i}."}) + "\n" for i in range(4)))
    env = {"OPENAI_API_KEY": CANARY, "VERACITY_HOME": str(tmp_path / "home")}
    gamma_plan = FaultPlan(0.3, seed=5, kinds=ECHOING)
    with MockOpenAI(chooser=gamma_plan) as server:
        server.script(Reply(400, {"error": {"message": f"bad request from Bearer {CANARY}"}}))
        gamma = _veracity("gamma", "--dataset", f"jsonl:{tmp_path / 'q.jsonl'}", "--model",
                          "openai/mock", "--base-url", server.url, "--embedder", "hash/default",
                          "-n", "2", "--out", str(tmp_path / "g"), "--json", env=env)
        assert any(r.headers.get("Authorization") == f"Bearer {CANARY}" for r in server.received)
    deception_plan = FaultPlan(0.3, seed=6, kinds=ECHOING, answer=letter_answer)
    with MockOpenAI(chooser=deception_plan) as server:
        deception = _veracity("deception", "run", "--dataset", f"mc-jsonl:{tmp_path / 'mc.jsonl'}",
                              "--model", "openai/mock", "--base-url", server.url,
                              "--prefill-mode", "continue", "--out", str(tmp_path / "d"), env=env)
    assert gamma.returncode == 0, gamma.stderr
    assert deception.returncode == 0, deception.stderr
    records = json.loads(gamma.stdout)
    assert any("[redacted]" in (r["error"] or "") for r in records)  # the echo was there
    for result in (gamma, deception):
        assert CANARY not in result.stdout + result.stderr
    assert _files_holding(tmp_path, CANARY.encode()) == []


def test_an_embedder_on_another_server_gets_a_key_only_when_named(tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": CANARY, "EMBED_KEY": "sk-embedder-only",
           "VERACITY_HOME": str(tmp_path / "home")}
    with MockOpenAI() as model, MockOpenAI() as embedder:
        common = ["gamma", "Who wrote Hamlet?", "--model", "openai/m", "--base-url", model.url,
                  "--embedder", "openai/e", "--embedder-base-url", embedder.url, "-n", "1",
                  "--no-cache", "--json"]
        assert _veracity(*common, env=env).returncode == 0
        sent = [r.headers.get("Authorization") for r in embedder.received]
        assert sent and sent == [None] * len(sent)
        named = _veracity(*common, "--embedder-api-key-env", "EMBED_KEY", env=env)
        assert named.returncode == 0, named.stderr
        assert embedder.received[-1].headers.get("Authorization") == "Bearer sk-embedder-only"
        assert {r.headers.get("Authorization") for r in model.received} == {f"Bearer {CANARY}"}
