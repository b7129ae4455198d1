"""Several OpenAI-compatible mock servers on 127.0.0.1 behind one ``openai/MODEL`` spec."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from mock_openai import MockOpenAI, Reply
from veracity.backends.endpoints import PooledOpenAIBackend, read_base_urls
from veracity.cache import Cache
from veracity.cli import main
from veracity.client import LLMClient, request_key
from veracity.errors import ConfigError, PermanentError, RetryableError
from veracity.registry import load_model
from veracity.runs.common import Context
from veracity.types import Generation, GenRequest

MODEL = "pool-model"
MOCK = Path(__file__).resolve().parent / "mock_openai.py"


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def servers() -> Iterator[list[MockOpenAI]]:
    mocks = [MockOpenAI(delay=0.02, models=(MODEL,)).start() for _ in range(3)]
    yield mocks
    for mock in mocks:
        mock.stop()


def requests(n: int, tag: str = "q") -> list[GenRequest]:
    return [GenRequest.user(f"{tag} {i}") for i in range(n)]


def test_requests_spread_over_every_endpoint_within_limits(servers: list[MockOpenAI]) -> None:
    backend = load_model(f"openai/{MODEL}", base_url=[s.url for s in servers], max_concurrency=2)
    try:
        assert isinstance(backend, PooledOpenAIBackend)
        assert backend.capabilities.max_concurrency == 6
        out = backend.generate(requests(60))
        assert [g.text for g in out if isinstance(g, Generation)] == [f"echo: q {i}" for i in range(60)]
        counts = [sum(r.path.endswith("/chat/completions") for r in s.received) for s in servers]
        assert sum(counts) == 60 and min(counts) >= 10  # least outstanding spreads the load
        assert all(s.max_in_flight <= 2 for s in servers)  # never past an endpoint's limit
        stats = backend.endpoint_stats()
        assert [row["requests"] for row in stats] == counts
        assert all(row["errors"] == 0 and row["mean_latency_s"] >= 0.02 for row in stats)
    finally:
        backend.close()


def test_a_failing_endpoint_is_retried_elsewhere_and_cooled_down(servers: list[MockOpenAI]) -> None:
    servers[0].script(*[Reply(503, {"error": {"message": "overloaded"}}) for _ in range(3)])
    sleeps: list[float] = []
    backend = PooledOpenAIBackend(MODEL, [s.url for s in servers], max_concurrency=1,
                                  cooldown=60.0, fail_threshold=3, sleep=sleeps.append)
    try:
        out = backend.generate(requests(30))
        assert all(isinstance(g, Generation) for g in out)
        first = backend.endpoint_stats()[0]
        assert first["errors"] == 3 and first["cooldowns"] == 1
        assert first["requests"] == 3  # cooled down after its third failure in a row
        assert sleeps == []  # another endpoint was free: no backoff needed
    finally:
        backend.close()


def test_a_cooled_endpoint_comes_back_when_it_answers() -> None:
    now = [0.0]
    with MockOpenAI(models=(MODEL,)) as a, MockOpenAI(models=(MODEL,)) as b:
        backend = PooledOpenAIBackend(MODEL, [a.url, b.url], max_concurrency=1, fail_threshold=1,
                                      cooldown=5.0)
        backend.pool.clock = lambda: now[0]
        try:
            a.script(Reply(500))
            ep_a, ep_b = backend.pool.endpoints
            assert backend.pool.acquire() is ep_a
            [failed] = ep_a.backend.generate(requests(1))
            backend.pool.release(ep_a, failed, 0.01)
            assert ep_a.cooled_until == 5.0
            assert backend.pool.acquire() is ep_b  # a is cooling: b, although b is busy-free
            backend.pool.release(ep_b, Generation("x"), 0.01)
            now[0] = 6.0
            probe = backend.pool.acquire(avoid=[ep_b])
            assert probe is ep_a and not backend.pool._usable(ep_a, now[0])  # one probe at a time
            [answer] = ep_a.backend.generate(requests(1))
            backend.pool.release(ep_a, answer, 0.01)
            assert ep_a.failures_in_row == 0 and backend.pool._usable(ep_a, now[0])
        finally:
            backend.close()


def test_a_bad_request_is_not_resent_to_other_endpoints(servers: list[MockOpenAI]) -> None:
    for s in servers:
        s.script(Reply(400, {"error": {"message": "prompt too long"}}))
    backend = PooledOpenAIBackend(MODEL, [s.url for s in servers], max_concurrency=1)
    try:
        [out] = backend.generate(requests(1))
        assert isinstance(out, PermanentError) and "prompt too long" in str(out)
        assert sum(len(s.received) for s in servers) == 1
    finally:
        backend.close()


def test_every_endpoint_down_gives_a_retryable_error_after_backoff() -> None:
    sleeps: list[float] = []
    with MockOpenAI(models=(MODEL,)) as a, MockOpenAI(models=(MODEL,)) as b:
        backend = PooledOpenAIBackend(MODEL, [a.url, b.url], max_retries=3, cooldown=0.0,
                                      sleep=sleeps.append)
        a.script(*[Reply(502)] * 4)
        b.script(*[Reply(502)] * 4)
        try:
            [out] = backend.generate(requests(1))
        finally:
            backend.close()
    assert isinstance(out, RetryableError) and "4 attempts" in str(out)
    assert len(sleeps) == 2  # one backoff after each round over both endpoints


def test_an_endpoint_serving_another_model_is_refused_at_start(servers: list[MockOpenAI]) -> None:
    with MockOpenAI(models=("other-model",)) as stranger:
        with pytest.raises(ConfigError, match="serves other-model, not 'pool-model'"):
            PooledOpenAIBackend(MODEL, [servers[0].url, stranger.url])
    assert all(not any(r.path.endswith("completions") for r in s.received) for s in servers)


def test_unreachable_endpoint_at_start_is_refused(servers: list[MockOpenAI]) -> None:
    dead = MockOpenAI(models=(MODEL,))
    url = dead.url
    dead._server.server_close()
    with pytest.raises(ConfigError, match="did not answer"):
        PooledOpenAIBackend(MODEL, [servers[0].url, url])


def test_cache_key_does_not_depend_on_the_endpoints(servers: list[MockOpenAI], tmp_path: Path) -> None:
    one = PooledOpenAIBackend(MODEL, [servers[0].url, servers[1].url])
    two = PooledOpenAIBackend(MODEL, [servers[2].url, servers[1].url])
    try:
        assert one.identity() == two.identity()
        assert "base_url" not in json.dumps(one.identity())
        cache = Cache(tmp_path / "c.sqlite")
        LLMClient(one, cache).generate(requests(5))
        again = LLMClient(two, cache)
        again.generate(requests(5))
        assert again.stats.cache_hits == 5 and again.stats.model_calls == 0
        r = requests(1)[0]
        assert request_key(one.spec, one.identity(), r) == request_key(two.spec, two.identity(), r)
    finally:
        one.close()
        two.close()


def _spawn(delay: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(MOCK), "--delay", str(delay), "--model", MODEL],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = proc.stdout.readline().split()[1]
    return proc, f"http://127.0.0.1:{port}/v1"


def test_one_server_killed_mid_run_loses_nothing(tmp_path: Path) -> None:
    spawned = [_spawn(0.02) for _ in range(3)]
    try:
        ctx = Context(cache=Cache(tmp_path / "c.sqlite"),
                      model_options={"openai": {"base_url": [url for _, url in spawned],
                                                "max_concurrency": 2}})
        client = ctx.client(f"openai/{MODEL}")
        victim = spawned[1][0]
        killer = threading.Timer(0.3, lambda: os.kill(victim.pid, signal.SIGKILL))
        killer.start()
        out = client.generate(requests(150, "kill"), stage="answers")
        killer.join()
        assert victim.wait(5) == -signal.SIGKILL
        assert [g.text for g in out] == [f"echo: kill {i}" for i in range(150)]
        per_endpoint = ctx.stats()[f"model:openai/{MODEL}"]["endpoints"]
        assert per_endpoint[1]["requests"] < per_endpoint[0]["requests"]  # it stopped taking work
        assert per_endpoint[1]["cooldowns"] >= 1 or per_endpoint[1]["errors"] >= 1
        assert sum(row["requests"] - row["errors"] for row in per_endpoint) == 150
        ctx.close()
    finally:
        for proc, _ in spawned:
            proc.kill()
            proc.wait()


def test_base_urls_file(tmp_path: Path) -> None:
    listing = tmp_path / "urls.txt"
    listing.write_text("# fleet\nhttp://a:8000/v1\n\n http://b:8000/v1  # second\n", encoding="utf-8")
    assert read_base_urls(listing) == ["http://a:8000/v1", "http://b:8000/v1"]
    (tmp_path / "empty.txt").write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="lists no base URL"):
        read_base_urls(tmp_path / "empty.txt")
    with pytest.raises(ConfigError, match="cannot read"):
        read_base_urls(tmp_path / "missing.txt")


def test_cli_spreads_a_gamma_run_and_reports_endpoints(servers: list[MockOpenAI], tmp_path: Path) -> None:
    listing = tmp_path / "urls.txt"
    listing.write_text(f"{servers[2].url}\n", encoding="utf-8")
    args = ["gamma", "What is 2+2?", "Who wrote Hamlet?", "-n", "4", "--model", f"openai/{MODEL}",
            "--embedder", "hash/default", "--base-url", servers[0].url, "--base-url", servers[1].url,
            "--base-urls-file", str(listing), "--max-concurrency", "1", "--out", "runs/pool", "-q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "runs/pool/run.json").read_text(encoding="utf-8"))
    rows = info["stats"][f"model:openai/{MODEL}"]["endpoints"]
    assert [row["url"] for row in rows] == [s.url for s in servers]
    assert sum(row["requests"] for row in rows) == 10 and all(row["requests"] for row in rows)
    assert info["config"]["model_identity"] == {"prefill_mode": "none", "served_model": MODEL}
