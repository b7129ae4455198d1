"""HTTP backend throughput against a local mock server that answers after a fixed delay.

Starts ``tests/mock_openai.py`` in a subprocess on 127.0.0.1, sends N requests through
``openai/bench`` at the backend's default concurrency, and compares the wall time with the
ideal ``N * delay / concurrency``. Exits 1 when a request fails, or (except with ``--smoke``)
when the ratio exceeds ``--max-ratio`` (2.0).

    python bench/http_concurrency.py [--requests 1000] [--delay 0.05]
    python bench/http_concurrency.py --smoke     # 64 requests (CI)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from veracity.backends.openai import OpenAIBackend
from veracity.types import Generation, GenRequest

MOCK = Path(__file__).resolve().parents[1] / "tests" / "mock_openai.py"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=0.05, help="server seconds per answer")
    parser.add_argument("--concurrency", type=int, default=None, help="default: the backend's")
    parser.add_argument("--max-ratio", type=float, default=2.0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), same code path")
    args = parser.parse_args()
    if args.smoke:
        args.requests = 64

    server = subprocess.Popen(
        [sys.executable, str(MOCK), "--delay", str(args.delay)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            print(f"mock server did not start (said {line!r})", file=sys.stderr)
            return 2
        url = f"http://127.0.0.1:{line[1]}/v1"
        options = {"max_concurrency": args.concurrency} if args.concurrency else {}
        backend = OpenAIBackend("bench", base_url=url, max_retries=0, **options)
        concurrency = backend.capabilities.max_concurrency
        requests = [GenRequest.user(f"question {i}") for i in range(args.requests)]
        began = time.perf_counter()
        outcomes = backend.generate(requests)
        wall = time.perf_counter() - began
        backend.close()
        with urllib.request.urlopen(f"{url}/stats", timeout=10) as response:
            stats = json.load(response)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    failed = sum(not isinstance(o, Generation) for o in outcomes)
    ideal = args.requests * args.delay / concurrency
    ratio = wall / ideal
    print(f"{args.requests} requests to a mock server answering after {args.delay} s; "
          f"ideal = requests x delay / concurrency; target ratio <= {args.max_ratio}")
    print(f"requests: {args.requests} requests")
    print(f"failed: {failed} requests")
    print(f"concurrency: {concurrency} requests")
    print(f"server_max_in_flight: {stats['max_in_flight']} requests")
    print(f"wall_seconds: {wall:.3f} s")
    print(f"ideal_seconds: {ideal:.3f} s")
    print(f"requests_per_s: {args.requests / wall:.1f} requests/s")
    print(f"ratio_wall_over_ideal: {ratio:.2f} x")
    # a smoke run on a busy machine checks correctness only, not the timing target
    fast = args.smoke or ratio <= args.max_ratio
    ok = failed == 0 and fast and stats["max_in_flight"] <= concurrency
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
