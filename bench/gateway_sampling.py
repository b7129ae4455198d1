"""What an unscored request costs: ``veracity serve --score-rate 0`` against a plain proxy.

Starts ``tests/mock_upstream.py`` (answers after ``--delay``), a plain forwarding proxy (the
same server, uvicorn, and the same upstream client, aiohttp, as the gateway, with nothing
else: body in, body out), ``veracity serve --score-rate 0`` and, for scale, ``veracity serve``
scoring every answer, each in its own process on 127.0.0.1. One client sends requests one at
a time, in turns to the four (so all see the same machine), and records each latency.

Target (issue 41): at rate 0 the gateway adds ≤ 1 ms at p50 over the plain proxy. Judged (the
last line): the median over rounds of (gateway at rate 0 − plain proxy), the two requests of a
round sent back to back, which a loaded machine disturbs far less than two separate medians
(both are printed); the direct upstream and the scored gateway are shown beside them.

    python bench/gateway_sampling.py [--requests 400] [--delay 0.01]
    python bench/gateway_sampling.py --smoke     # 60 requests each (CI)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import httpx

from gateway_load import MOCK, Process, percentile, serve

PROXY_LINE = "PROXY"


def run_proxy(upstream: str) -> None:
    """A plain forwarding proxy of ``POST /v1/chat/completions`` on a free port."""
    import socket

    import aiohttp
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    session: dict[str, aiohttp.ClientSession] = {}

    async def chat(request: Request) -> Response:
        if "s" not in session:
            session["s"] = aiohttp.ClientSession()
        body = await request.body()
        async with session["s"].post(upstream + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"}) as answer:
            data = await answer.read()
            return Response(data, status_code=answer.status, media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"{PROXY_LINE} http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, loop="uvloop",
                            http="httptools")
    uvicorn.Server(config).run(sockets=[sock])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="requests to each target")
    parser.add_argument("--delay", type=float, default=0.01, help="upstream seconds per answer")
    parser.add_argument("--proxy", metavar="UPSTREAM", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="60 requests each (CI)")
    args = parser.parse_args()
    if args.proxy:
        run_proxy(args.proxy)
        return 0
    total = 60 if args.smoke else args.requests
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    children: list[Process] = []
    try:
        mock = Process([sys.executable, str(MOCK), "--delay", str(args.delay)], r"PORT (\d+)")
        children.append(mock)
        upstream = f"http://127.0.0.1:{mock.wait(30).group(1)}/v1"
        proxy = Process([sys.executable, __file__, "--proxy", upstream], PROXY_LINE + r" (\S+)")
        children.append(proxy)
        proxy_url = proxy.wait(60).group(1)
        common = ["--upstream", upstream, "--embedder", "hash/default", "--no-log", "--no-cache",
                  "--n", "3"]
        rate0, rate0_url = serve([*common, "--score-rate", "0"])
        children.append(rate0)
        scored, scored_url = serve(common)
        children.append(scored)
        targets = {"upstream alone": upstream, "plain proxy": proxy_url.rstrip("/") + "/v1",
                   "gateway --score-rate 0": rate0_url + "/v1", "gateway, every answer scored":
                   scored_url + "/v1"}
        latencies: dict[str, list[float]] = {name: [] for name in targets}
        with httpx.Client(timeout=30) as client:
            for k in range(total + 10):  # the first 10 rounds warm connections up
                for name, url in targets.items():
                    body = {"model": "mock-model",
                            "messages": [{"role": "user", "content": f"Question {k}: what is {k}+1?"}]}
                    began = time.perf_counter()
                    response = client.post(url + "/chat/completions", json=body)
                    took = 1000 * (time.perf_counter() - began)
                    if response.status_code != 200:
                        raise RuntimeError(f"{name}: HTTP {response.status_code} {response.text[:200]}")
                    if name == "gateway --score-rate 0" and \
                            response.headers.get("x-veracity-scored") != "false":
                        raise RuntimeError("the rate-0 gateway scored a request")
                    if k >= 10:
                        latencies[name].append(took)
    finally:
        for child in reversed(children):
            child.stop()
    load = os.getloadavg()
    print(f"{total} requests to each, one at a time in turns; upstream delay {1000 * args.delay:.0f} ms; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'target':<30} {'p50 ms':>8} {'p90 ms':>8} {'mean ms':>8}")
    for name, values in latencies.items():
        print(f"{name:<30} {percentile(values, 0.5):>8.2f} {percentile(values, 0.9):>8.2f} "
              f"{statistics.fmean(values):>8.2f}")
    added_p50 = percentile(latencies["gateway --score-rate 0"], 0.5) - \
        percentile(latencies["plain proxy"], 0.5)
    # the same round's two requests ran back to back on the same machine: their difference is
    # far less noisy on a loaded machine than the difference of two separate medians
    paired = statistics.median(g - p for g, p in zip(latencies["gateway --score-rate 0"],
                                                     latencies["plain proxy"], strict=True))
    added = paired
    over_upstream = percentile(latencies["gateway --score-rate 0"], 0.5) - \
        percentile(latencies["upstream alone"], 0.5)
    print(f"rate 0 over the upstream alone: {over_upstream:+.2f} ms at p50 (both proxies pay a hop)")
    print(f"rate 0 over the plain proxy: {added_p50:+.2f} ms between the two p50s")
    print(f"ratio judged: added latency at --score-rate 0 over a plain proxy, median of the "
          f"paired differences (same round) = {added:+.2f} ms (target ≤ 1 ms: "
          f"{'ok' if added <= 1.0 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
