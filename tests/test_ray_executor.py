"""The Ray executor on a real local Ray (2 CPUs): same records as in process, nothing lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_models import has_local_models
from veracity.cache import Cache
from veracity.executors import RaySettings, parse_executor
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.run import run_gamma
from veracity.runs.common import Context
from veracity.types import GenRequest, Item, Sampling

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow  # starts Ray: several seconds even on an idle machine

ITEMS = [Item(f"q{i}", q) for i, q in enumerate(
    ["What is 2+2?", "Who wrote Hamlet?", "Capital of France?", "Largest planet?", "Boiling point?"]
)]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[str]:
    info = ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="warning",
                    log_to_driver=False)
    yield str(info.address_info["gcs_address"])
    ray.shutdown()


def run(tmp_path: Path, name: str, model: str, settings: RaySettings | None, n: int = 3,
        max_tokens: int = 16, options: dict[str, dict[str, Any]] | None = None
        ) -> list[dict[str, Any]]:
    ctx = Context(cache=Cache(tmp_path / f"{name}.sqlite"), ray=settings,
                  model_options=options or {})
    try:
        gamma = GammaSettings(n=n, sampling=Sampling(max_tokens=max_tokens))
        return run_gamma(ITEMS, model, "hash/default", gamma, ctx, tmp_path / name).records_json()
    finally:
        ctx.close()


def test_parse_executor() -> None:
    assert parse_executor(None) is None and parse_executor("local") is None
    assert parse_executor("ray") == RaySettings()
    assert parse_executor(None, "auto") == RaySettings(address="auto")
    assert parse_executor("ray://head:10001", actors=4).address == "ray://head:10001"  # type: ignore[union-attr]
    from veracity.errors import ConfigError

    for bad in (lambda: parse_executor("dask"), lambda: parse_executor("local", "auto"),
                lambda: parse_executor("ray", actors=0)):
        with pytest.raises(ConfigError):
            bad()


def test_gamma_on_fake_actors_equals_in_process(local_ray: str, tmp_path: Path) -> None:
    here = run(tmp_path, "here", "fake/unstable", None)
    there = run(tmp_path, "there", "fake/unstable", RaySettings(actors=2, batch_size=3))
    assert there == here
    assert len({r["answer"] for r in here}) == len(ITEMS)  # a model whose answers differ


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs the bundled models")
def test_gamma_on_the_bundled_model_via_two_actors_equals_in_process(
    local_ray: str, tmp_path: Path
) -> None:
    # the kernel named, not left to attention=auto: the actors started with the module's Ray
    # cluster, before this test's remembered choice was set in the environment
    kernel = {"llamacpp": {"attention": "flash"}}
    here = run(tmp_path, "here", "llamacpp/default", None, n=1, max_tokens=8, options=kernel)
    there = run(tmp_path, "there", "llamacpp/default", RaySettings(actors=2, batch_size=2), n=1,
                max_tokens=8, options=kernel)
    assert there == here
    assert all(r["answer"] for r in here)


def test_killing_an_actor_mid_stage_loses_nothing(local_ray: str, tmp_path: Path) -> None:
    from veracity.client import LLMClient
    from veracity.executors.ray_actors import RayBackend

    cache = Cache(tmp_path / "c.sqlite")
    backend = RayBackend("fake/stable", {"delay": 0.01}, RaySettings(actors=2, batch_size=4))
    try:
        victim = backend.actor_pids()[0]
        killed = threading.Event()

        def kill() -> None:
            os.kill(victim, signal.SIGKILL)
            killed.set()

        requests = [GenRequest.user(f"question {i}") for i in range(200)]
        threading.Timer(0.4, kill).start()
        out = LLMClient(backend, cache).generate(requests)
        assert killed.is_set()  # the actor died while the stage ran (200 × 10 ms on 2 actors)
        from veracity.backends.fake import stable

        assert [g.text for g in out] == [stable(r) for r in requests]  # type: ignore[union-attr]
        assert victim not in backend.actor_pids()  # Ray restarted it
        from veracity.client import request_key

        keys = [request_key(backend.spec, backend.identity(), r) for r in requests]
        assert len(cache.get_json(keys)) == 200  # each batch cached as it arrived
    finally:
        backend.close()
        cache.close()


DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import ray
    from veracity.cache import Cache
    from veracity.executors import RaySettings
    from veracity.executors.ray_actors import RayBackend
    from veracity.client import LLMClient
    from veracity.types import GenRequest

    ray.init(address=sys.argv[1], logging_level="warning", log_to_driver=False)
    backend = RayBackend("fake/stable", {"delay": 0.02}, RaySettings(actors=2, batch_size=2))
    print("READY", flush=True)
    LLMClient(backend, Cache(Path(sys.argv[2]))).generate(
        [GenRequest.user(f"question {i}") for i in range(300)])
    print("DONE", flush=True)
""")


def test_driver_killed_mid_stage_resumes_from_the_cache(local_ray: str, tmp_path: Path) -> None:
    from veracity.client import LLMClient
    from veracity.executors.ray_actors import RayBackend

    db = tmp_path / "c.sqlite"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, local_ray, str(db)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "READY"
        cache = Cache(db)
        deadline = time.monotonic() + 60

        def stored() -> int:
            return sum(n for _, _, n in cache.stats().rows)

        # mid-stage: a few batches written (2 actors x 2 requests x 0.02 s: about 0.1 s a
        # batch of 4), most of the 300 still to come
        while time.monotonic() < deadline and stored() < 20 and driver.poll() is None:
            time.sleep(0.01)
        driver.send_signal(signal.SIGKILL)
        assert driver.wait(10) == -signal.SIGKILL
    finally:
        driver.kill()
    kept = sum(n for _, _, n in cache.stats().rows)
    assert 20 <= kept < 300  # batches written as they arrived, the rest lost with the driver
    backend = RayBackend("fake/stable", {}, RaySettings(actors=2, batch_size=8))
    client = LLMClient(backend, cache)
    try:
        out = client.generate([GenRequest.user(f"question {i}") for i in range(300)])
    finally:
        client.close()
        cache.close()
    assert client.stats.cache_hits == kept and client.stats.model_calls == 300 - kept
    assert len(out) == 300


def test_embeddings_on_actors_equal_local_ones(local_ray: str) -> None:
    import numpy as np

    from veracity.executors.ray_actors import RayEmbedder
    from veracity.registry import load_embedder

    texts = [f"answer number {i}" for i in range(7)]
    remote = RayEmbedder("hash/default", {}, RaySettings(actors=2, embeddings=True))
    try:
        local = load_embedder("hash/default")
        assert remote.spec == local.spec and remote.identity() == local.identity()
        np.testing.assert_array_equal(remote.embed(texts), local.embed(texts))
    finally:
        remote.close()
