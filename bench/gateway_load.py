"""Load on ``veracity serve``: throughput and latency added by inline scoring.

Starts ``tests/mock_upstream.py`` (answers after ``--delay``, ``--upstream-concurrency`` at a
time) and ``veracity serve --upstream`` in front of it, each in its own process on 127.0.0.1.
Sends the same bounded run of requests (distinct prompts, so no cache hits) first to the
upstream alone, then through the gateway (inline mode, n perturbed calls per answer), at a
fixed client concurrency. Then times a few inline scores on the embedded default.

Targets (issue 12): p50 added latency <= 1.3 x one upstream call + the embedding time;
throughput >= 80 % of what the upstream allows for (n + 1) calls per request; no errors.
The bound is printed twice: nominal (the upstream's and the client's concurrency over the
mock's delay) and measured: the calls per second the same client gets from the upstream alone
in the same run with as many calls in flight as the gateway makes (client concurrency x
(n + 1)), over the n + 1 calls of each gateway request; that is what a machine with a few
shared cores really allows, where the client's and the mock's CPU run out long before the
mock's concurrency. The ratio judged (the last line without --otel) is the throughput's share of the
measured bound (target >= 0.8).
The gateway's CPU time per request is printed too: unlike latency it hardly depends on how
busy the machine is.

``--otel`` (and ``--smoke`` when the otel extra is installed) also measures tracing's cost in
the same run: a gateway exporting OpenTelemetry spans over OTLP/HTTP to a receiver in this
process and two plain ones, alike, take turns on the same load (each round three new
processes sharing one hash seed, each going first in turn, so all see the same machine); their
throughput and CPU per request are printed side by side, the two plain ones' difference as the
noise of the measure, and then last, the ratio judged for tracing: the throughput overhead of
exporting against the plain ones' mean (issue 32: under 5 %).

    python bench/gateway_load.py [--requests 2000] [--concurrency 32] [--otel] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
MOCK = ROOT / "tests" / "mock_upstream.py"
WARM_UP = 200
"""Requests each gateway of the tracing A/B serves before it is measured (at 4 spans a
request, more than the SDK's batch of 512 spans: the traced one has exported once)."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Process:
    """A child process whose output is read in the background for a line matching ``pattern``."""

    def __init__(self, args: list[str], pattern: str, stream: str = "stdout",
                 env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env=None if env is None else os.environ | env)
        self.lines: list[str] = []
        self.match: re.Match[str] | None = None
        self._found = threading.Event()
        for pipe in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._read, args=(pipe, pattern), daemon=True).start()

    def _read(self, pipe: Any, pattern: str) -> None:
        for line in pipe:
            self.lines.append(line)
            found = re.search(pattern, line)
            if found and not self._found.is_set():
                self.match = found
                self._found.set()

    def wait(self, seconds: float) -> re.Match[str]:
        if not self._found.wait(seconds) or self.match is None:
            raise RuntimeError("child did not start:\n" + "".join(self.lines[-20:]))
        return self.match

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def cpu_seconds(process: Process) -> float:
    """User + system CPU time the child has used so far."""
    import psutil

    times = psutil.Process(process.proc.pid).cpu_times()
    return float(times.user + times.system)


def machine_busy() -> float:
    """CPU seconds all cores have spent on anything but idling, so far."""
    import psutil

    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def serve(args: list[str], env: dict[str, str] | None = None) -> tuple[Process, str]:
    gateway = Process([sys.executable, "-m", "veracity", "serve", "--no-auth", "--port", "0", *args],
                      r"veracity gateway on (http://\S+)/v1", env=env)
    url = gateway.wait(120).group(1)
    for _ in range(1200):
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return gateway, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("gateway never ready:\n" + "".join(gateway.lines[-20:]))


Outcome = tuple[float, list[float], list[dict[str, Any]], int]


async def load(url: str, total: int, concurrency: int, tag: str, model: str = "mock-model",
               max_tokens: int | None = None, timeout: float = 60) -> Outcome:
    """(seconds, latencies, veracity objects, errors) of ``total`` requests.

    aiohttp, not httpx: on a few shared cores a heavy client takes CPU from what it measures;
    the same client measures the upstream alone and the gateway.
    """
    import aiohttp

    latencies: list[float] = []
    scores: list[dict[str, Any]] = []
    errors = 0
    todo = iter(range(total))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=timeout)) as session:

        async def worker() -> None:
            nonlocal errors
            for i in todo:
                body: dict[str, Any] = {"model": model, "messages": [
                    {"role": "user", "content": f"Question {tag}-{i}: what is {i} + {i}?"}]}
                if max_tokens:
                    body["max_tokens"] = max_tokens
                began = time.perf_counter()
                async with session.post(url + "/chat/completions", json=body,
                                        headers={"Authorization": "Bearer bench"}) as response:
                    data = await response.json() if response.status == 200 else {}
                latencies.append(time.perf_counter() - began)
                if "veracity" in data:
                    scores.append(data["veracity"])
                if response.status != 200 or data.get("veracity", {}).get("error"):
                    errors += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - began, latencies, scores, errors


class SpanSink:
    """An OTLP/HTTP receiver on 127.0.0.1 that keeps what it is sent (over kept-alive
    connections, as the OpenTelemetry Collector, Jaeger and Tempo serve); the spans are decoded
    and counted after the measurement (decoding meanwhile would take this process's CPU,
    the load's, during the traced turns only)."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.payloads: list[bytes] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # connections kept open, as collectors keep them

            def do_POST(self) -> None:
                sink.payloads.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> int:
        """Spans received, decoded with opentelemetry-proto."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        count = 0
        for data in self.payloads:
            message = ExportTraceServiceRequest()
            message.ParseFromString(data)
            count += sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
        return count


def tracing_cost(gateway_args: list[str], tmp: str, requests: int, concurrency: int,
                 rounds: int) -> dict[str, float]:
    """Throughput and CPU per request of two plain gateways and of one exporting its spans,
    taking turns on the same load. Each round starts three new processes: two processes of the
    same code differ by several per cent in speed (memory layout, hash seed, where the
    scheduler puts them on a busy machine), which one pair would count as tracing's; the two
    plain ones show how large that difference is."""
    sink = SpanSink()
    names = ("plain", "control", "traced")
    seconds = dict.fromkeys(names, 0.0)
    cpu = dict.fromkeys(names, 0.0)
    errors = 0
    try:
        for r in range(rounds):
            seed = {"PYTHONHASHSEED": str(r)}  # the same in a round's three processes
            started = {name: serve([*gateway_args, *(["--otel"] if name == "traced" else []),
                                    "--log", f"{tmp}/{name}{r}.sqlite",
                                    "--cache", f"{tmp}/{name}{r}-cache.sqlite"],
                                   env=seed | ({"OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
                                                "OTEL_SERVICE_NAME": "veracity-bench"}
                                               if name == "traced" else {}))
                       for name in names}
            try:
                # warm all first: what a process does once (the exporter's first post, the
                # modules it loads then) is not what tracing costs a request
                received = len(sink.payloads)
                for name, (_, url) in started.items():
                    asyncio.run(load(url + "/v1", WARM_UP, concurrency, f"warm-{name}{r}"))
                for _ in range(100):
                    if len(sink.payloads) > received:
                        break
                    time.sleep(0.1)
                turns = list(started.items())
                for name, (process, url) in turns[r % 3:] + turns[: r % 3]:  # each goes first in turn
                    before = cpu_seconds(process)
                    took, _, _, failed = asyncio.run(load(url + "/v1", requests, concurrency, f"{name}{r}"))
                    cpu[name] += cpu_seconds(process) - before
                    seconds[name] += took
                    errors += failed
            finally:
                for process, _ in started.values():
                    process.stop()  # the traced one flushes its last spans on the way out
    finally:
        sink.server.shutdown()
    total = rounds * requests
    return {"plain": total / seconds["plain"], "traced": total / seconds["traced"],
            "control": total / seconds["control"],
            "plain_cpu": 1000 * cpu["plain"] / total, "traced_cpu": 1000 * cpu["traced"] / total,
            "control_cpu": 1000 * cpu["control"] / total,
            "spans": sink.spans(), "bytes": sum(map(len, sink.payloads)), "errors": errors,
            "requests": total, "sent": total + rounds * WARM_UP}


def embedding_ms(spec: str, n: int, rounds: int, pairs: list[str]) -> float:
    """p50 time to embed one answer and its n perturbed answers (no cache)."""
    from veracity.registry import load_embedder, parse_embedder_options, resolve

    embedder = load_embedder(spec, **parse_embedder_options(pairs).get(resolve(spec).provider, {}))
    times = []
    for r in range(rounds):
        texts = [f"Answer {r}.{k}: the sum is {r + k}." for k in range(n + 1)]
        began = time.perf_counter()
        embedder.embed(texts)
        times.append(time.perf_counter() - began)
    return 1000 * statistics.median(times)


def embedded_default(requests: int, n: int, cache: Path) -> tuple[float, float]:
    """p50 (score ms, end-to-end ms) of inline scores on llamacpp/default + st/default."""
    gateway, url = serve(["--n", str(n), "--no-log", "--cache", str(cache)])
    try:
        seconds, latencies, scores, errors = asyncio.run(
            load(url + "/v1", requests, 1, "embedded", "llamacpp/default", max_tokens=32, timeout=900))
        if errors or not scores:
            raise RuntimeError(f"{errors} errors on the embedded default")
        return (statistics.median(s["timings"]["scoring_ms"] for s in scores),
                1000 * statistics.median(latencies))
    finally:
        gateway.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32, help="client concurrency")
    parser.add_argument("--delay", type=float, default=0.05, help="upstream seconds per answer")
    parser.add_argument("--upstream-concurrency", type=int, default=128,
                        help="answers the mock upstream works on at once")
    parser.add_argument("--n", type=int, default=3, help="perturbed calls per answer")
    parser.add_argument("--embedder", default="hash/default")
    parser.add_argument("--embedder-option", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to veracity serve, e.g. backend=onnx")
    parser.add_argument("--embedded-requests", type=int, default=None,
                        help="inline scores timed on the embedded default (default 10, smoke 1; 0: skip)")
    parser.add_argument("--otel", action="store_true",
                        help="also measure a gateway exporting OpenTelemetry spans, in turns "
                             "with the plain one")
    parser.add_argument("--otel-rounds", type=int, default=6,
                        help="turns each, each round a new pair of gateways (--otel)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, same code path")
    args = parser.parse_args()
    if args.smoke:
        try:
            import opentelemetry.sdk  # noqa: F401

            args.otel, args.otel_rounds = True, 1
        except ImportError:
            pass
    if args.smoke:
        args.requests, args.concurrency = 64, 8
    if args.embedded_requests is None:
        args.embedded_requests = 1 if args.smoke else 10

    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    mock = Process([sys.executable, str(MOCK), "--delay", str(args.delay),
                    "--concurrency", str(args.upstream_concurrency)], r"PORT (\d+)")
    gateway = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            upstream = f"http://127.0.0.1:{mock.wait(30).group(1)}/v1"
            up_s, up_lat, _, up_err = asyncio.run(load(upstream, args.requests, args.concurrency, "up"))
            wide = args.concurrency * (args.n + 1)
            calls = args.requests * (args.n + 1)
            cap_s, _, _, cap_err = asyncio.run(load(upstream, calls, wide, "cap"))
            up_err += cap_err
            options = [a for o in args.embedder_option for a in ("--embedder-option", o)]
            gateway_args = ["--upstream", upstream, "--embedder", args.embedder, *options,
                            "--n", str(args.n),
                            "--max-concurrency", str(4 * args.concurrency),
                            "--queue", str(4 * args.concurrency)]
            gateway, url = serve([*gateway_args,
                                  "--log", f"{tmp}/traffic.sqlite", "--cache", f"{tmp}/cache.sqlite"])
            gw_cpu, busy = cpu_seconds(gateway), machine_busy()
            gw_s, gw_lat, scores, gw_err = asyncio.run(
                load(url + "/v1", args.requests, args.concurrency, "gw"))
            gw_cpu, busy = cpu_seconds(gateway) - gw_cpu, machine_busy() - busy
            tracing = None
            if args.otel:  # each with its own cache and log, as alike as two gateways can be
                gateway.stop()
                gateway = None
                tracing = tracing_cost(gateway_args, tmp, args.requests // 2, args.concurrency,
                                       args.otel_rounds)
        finally:
            if gateway is not None:
                gateway.stop()
            mock.stop()
        embed = embedding_ms(args.embedder, args.n, 50, args.embedder_option)
        embedded = (embedded_default(args.embedded_requests, args.n, Path(tmp) / "embedded.sqlite")
                    if args.embedded_requests else (float("nan"), float("nan")))

    up_p50, gw_p50 = 1000 * percentile(up_lat, 0.5), 1000 * percentile(gw_lat, 0.5)
    throughput = args.requests / gw_s
    added = gw_p50 - up_p50
    added_target = 1.3 * up_p50 + embed
    # the upstream runs upstream_concurrency calls at once and each request needs n + 1 calls;
    # the client never has more than `concurrency` requests out, each at least one call long
    # (the perturbed calls go out with the answer's)
    bound = min(args.upstream_concurrency / ((args.n + 1) * args.delay),
                args.concurrency / args.delay)
    # what the same client and upstream delivered side by side, per (n + 1) calls: on a few
    # shared cores their CPU, not the upstream's concurrency, is what limits
    measured = min(bound, calls / cap_s / (args.n + 1))
    print(f"requests: {args.requests} count")
    print(f"client concurrency: {args.concurrency} count")
    print(f"perturbed calls per answer: {args.n} count")
    print(f"upstream alone throughput: {args.requests / up_s:.1f} req/s")
    print(f"upstream alone p50 latency: {up_p50:.1f} ms")
    print(f"upstream alone p99 latency: {1000 * percentile(up_lat, 0.99):.1f} ms")
    print(f"gateway throughput: {throughput:.1f} req/s")
    print(f"gateway p50 latency: {gw_p50:.1f} ms")
    print(f"gateway p99 latency: {1000 * percentile(gw_lat, 0.99):.1f} ms")
    print(f"gateway p50 scoring time: {statistics.median(s['timings']['scoring_ms'] for s in scores):.1f} ms")
    print(f"gateway p50 perturbed-call time: "
          f"{statistics.median(s['timings'].get('generation_ms', math.nan) for s in scores):.1f} ms")
    print(f"gateway CPU per request: {1000 * gw_cpu / args.requests:.2f} ms")
    print(f"cores busy during the gateway run (client, mock, gateway): "
          f"{busy / gw_s:.2f} of {os.cpu_count()} count")
    print(f"embedding time p50 ({args.embedder}, {args.n + 1} texts): {embed:.2f} ms")
    print(f"p50 added latency: {added:.1f} ms")
    print(f"p50 added latency target: {added_target:.1f} ms")
    print(f"added latency / target: {added / added_target:.3f} ratio")
    print(f"nominal throughput bound: {bound:.1f} req/s")
    print(f"throughput / nominal bound: {throughput / bound:.3f} ratio")
    print(f"errors: {gw_err + up_err} count")
    print(f"embedded default inline score p50: {embedded[0]:.0f} ms")
    print(f"embedded default end-to-end p50: {embedded[1]:.0f} ms")
    print(f"upstream alone throughput at concurrency {wide}: {calls / cap_s:.1f} calls/s")
    print(f"measured throughput bound (that / {args.n + 1} calls): {measured:.1f} req/s")
    print(f"throughput / measured bound: {throughput / measured:.3f} ratio")
    if tracing is not None:
        print(f"tracing A/B: requests each: {tracing['requests']:.0f} count")
        print(f"tracing A/B: gateway throughput without tracing: {tracing['plain']:.1f} req/s")
        print(f"tracing A/B: gateway throughput exporting spans: {tracing['traced']:.1f} req/s")
        print(f"tracing A/B: gateway CPU per request without tracing: {tracing['plain_cpu']:.2f} ms")
        print(f"tracing A/B: gateway CPU per request exporting spans: {tracing['traced_cpu']:.2f} ms")
        print(f"tracing A/A: a second gateway without tracing, alike: {tracing['control']:.1f} req/s, "
              f"{tracing['control_cpu']:.2f} ms CPU per request")
        print(f"tracing A/A: throughput difference of two untraced gateways (the noise): "
              f"{abs(1 - tracing['control'] / tracing['plain']):.3f} ratio")
        print(f"tracing A/B: spans received (the warm-up's too): {tracing['spans']:.0f} count")
        spans = tracing["spans"] / tracing["sent"]
        print(f"tracing A/B: spans received per traced request: {spans:.2f} count")
        per_request = tracing["bytes"] / tracing["sent"]
        print(f"tracing A/B: OTLP bytes received per request: {per_request:.0f} bytes")
        print(f"tracing A/B: errors: {tracing['errors']:.0f} count")
        print(f"tracing A/B: load average (1 min) after the A/B: {os.getloadavg()[0]:.2f} count")
        ratio = tracing["traced"] / ((tracing["plain"] + tracing["control"]) / 2)
        print(f"tracing A/B: throughput exporting / without (the two untraced ones' mean): "
              f"{ratio:.3f} ratio")
        print(f"tracing A/B: throughput overhead of exporting (1 - that, target < 0.05): "
              f"{1 - ratio:.3f} ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
