"""Scaling out: several HTTP servers behind one spec, the driver's ceiling, Ray's overhead.

1. k = 1, 2, 4 mock OpenAI-compatible servers (``tests/mock_openai.py`` subprocesses on
   127.0.0.1), each answering 4 requests at a time after 50 ms, behind one ``openai/bench``
   spec with 4 concurrent requests per endpoint, through the cache: requests/s and the ratio
   to k × the single-server figure (target >= 0.85 at k = 4).
2. The driver's ceiling: 4 instant mock servers, a whole γ run (schedule, cache, embed with
   ``hash/default``, score): generations/s.
3. Ray: per-request overhead of 2 actors on a local Ray vs the in-process executor, on
   ``fake/stable`` (skipped, with a line saying so, when ray is not installed).

    python bench/scale_out.py [--per-server 400] [--smoke]

The last line is the k = 4 ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from veracity.backends.endpoints import load as load_openai
from veracity.backends.fake import FakeBackend
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.run import run_gamma
from veracity.runs.common import Context
from veracity.types import GenRequest, Item, Sampling

MOCK = Path(__file__).resolve().parents[1] / "tests" / "mock_openai.py"
MODEL = "bench"


@contextlib.contextmanager
def mock_servers(k: int, delay: float, slots: int) -> Iterator[list[str]]:
    """k mock servers in their own processes; their base URLs."""
    procs = [subprocess.Popen([sys.executable, str(MOCK), "--delay", str(delay), "--slots", str(slots),
                               "--model", MODEL], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(k)]
    try:
        urls = []
        for proc in procs:
            assert proc.stdout is not None
            word, port = proc.stdout.readline().split()
            assert word == "PORT", word
            urls.append(f"http://127.0.0.1:{port}/v1")
        yield urls
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def spread(k: int, n: int, workdir: Path) -> float:
    """Requests/s of n requests over k servers (4 slots, 50 ms), 4 in flight per endpoint."""
    with mock_servers(k, 0.05, 4) as urls:
        backend = load_openai(MODEL, base_url=urls if k > 1 else urls[0], max_concurrency=4, max_retries=0)
        cache = Cache(workdir / f"spread-{k}.sqlite")
        client = LLMClient(backend, cache)
        client.generate([GenRequest.user(f"warm-up {k} {i}") for i in range(4 * k)])  # connections open
        requests = [GenRequest.user(f"spread {k} question {i}") for i in range(n)]
        began = time.perf_counter()
        client.generate(requests)
        seconds = time.perf_counter() - began
        client.close()
        cache.close()
    return n / seconds


def driver_ceiling(items: int, n: int, workdir: Path) -> float:
    """Generations/s of a whole γ run against 4 instant servers."""
    with mock_servers(4, 0.0, 0) as urls:
        ctx = Context(cache=Cache(workdir / "driver.sqlite"),
                      model_options={"openai": {"base_url": urls, "max_concurrency": 16,
                                                "max_retries": 0}})
        questions = [Item(f"q{i}", f"Driver question number {i}?") for i in range(items)]
        settings = GammaSettings(n=n, sampling=Sampling(max_tokens=16))
        began = time.perf_counter()
        run_gamma(questions, f"openai/{MODEL}", "hash/default", settings, ctx)
        seconds = time.perf_counter() - began
        ctx.close()
    return items * (n + 1) / seconds


def ray_overhead(n: int) -> tuple[float, float] | None:
    """Microseconds per request: in process, and on 2 Ray actors (batches of 8)."""
    if importlib.util.find_spec("ray") is None:
        return None
    import ray

    from veracity.executors import RaySettings
    from veracity.executors.ray_actors import RayBackend

    requests = [GenRequest.user(f"ray question {i}") for i in range(n)]
    local = FakeBackend("stable")
    began = time.perf_counter()
    local.generate(requests)
    here = (time.perf_counter() - began) / n * 1e6
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    try:
        backend = RayBackend("fake/stable", {}, RaySettings(actors=2, batch_size=8))
        backend.generate(requests[:16])  # actors warm
        began = time.perf_counter()
        backend.generate(requests)
        there = (time.perf_counter() - began) / n * 1e6
        backend.close()
    finally:
        ray.shutdown()
    return here, there


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-server", type=int, default=400, help="requests per server at each k")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, same code path")
    args = parser.parse_args()
    per_server = 40 if args.smoke else args.per_server
    items, ray_requests = (20, 400) if args.smoke else (400, 4000)

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        rates = {k: spread(k, per_server * k, workdir) for k in (1, 2, 4)}
        for k, rate in rates.items():
            print(f"servers_{k}: {rate:.1f} requests/s")
        ratios = {k: rates[k] / (k * rates[1]) for k in (2, 4)}
        print(f"ratio_2_vs_2x_single: {ratios[2]:.3f} x")
        ceiling = driver_ceiling(items, 10, workdir)
        print(f"driver_ceiling_gamma: {ceiling:.0f} generations/s")
    overhead = ray_overhead(ray_requests)
    if overhead is None:
        print("ray_overhead: unavailable (ray not installed)")
    else:
        here, there = overhead
        print(f"in_process_per_request: {here:.1f} us")
        print(f"ray_2_actors_per_request: {there:.1f} us")
        print(f"ray_overhead_per_request: {there - here:.1f} us")
    print(f"ratio_4_vs_4x_single: {ratios[4]:.3f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
