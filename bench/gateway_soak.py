"""Soak of ``veracity serve``: 80 % of its measured maximum throughput for 20 minutes, with 5 %
of the upstream's answers failing.

Starts ``tests/mock_upstream.py`` (answers after ``--delay``; ``--fault-rate`` of them a 500,
seeded) and ``veracity serve`` in front of it (inline scoring, ``--n`` perturbed calls per
answer, a traffic log and a cache), each in its own process on 127.0.0.1. First the gateway's
maximum throughput is measured with a closed loop of ``--concurrency`` clients for
``--probe`` seconds; then requests are sent open loop at ``--load`` (0.8) of it, for
``--minutes`` minutes, every request a new prompt (no cache hits: the cache and the log grow
all along, as in production).

Printed per minute: requests sent, answered (200), errors (any other status or a transport
error), p50 and p99 latency of the requests sent in that minute, and the gateway's resident
memory (RSS) at its end. Then RSS at the start and the end, the traffic log's rows against
the requests answered (after a SIGTERM drain), and the ratios judged (issue 42): RSS growth
between minute 2 and the last (target <= 5 %), p99 of the last minute over the second's
(target <= 1.5), rows / answered (target 1.0).

    python bench/gateway_soak.py [--minutes 20] [--load 0.8] [--fault-rate 0.05] [--smoke]

``--smoke`` runs 3 "minutes" of 5 s each after a 4 s probe (same code path, < 1 min).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_load import MOCK, Process, percentile, serve  # noqa: E402


@dataclass
class Minute:
    """What happened to the requests sent in one minute."""

    sent: int = 0
    answered: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    rss: float = 0.0


def rss_mb(pid: int) -> float:
    import psutil

    return float(psutil.Process(pid).memory_info().rss) / 1e6


async def soak(url: str, rate: float, minutes: int, minute_s: float, cap: int, pid: int,
               tag: str = "soak") -> list[Minute]:
    """Requests at ``rate`` per second (open loop: sent on schedule whatever the answers do,
    at most ``cap`` at once) for ``minutes`` minutes of ``minute_s`` seconds."""
    import aiohttp

    table = [Minute() for _ in range(minutes)]
    slots = asyncio.Semaphore(cap)
    connector = aiohttp.TCPConnector(limit=cap)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def one(i: int, row: Minute) -> None:
            body = {"model": "mock-model", "messages": [
                {"role": "user", "content": f"Question {tag}-{i}: what is {i} + {i}?"}]}
            began = time.perf_counter()
            try:
                async with session.post(url + "/v1/chat/completions", json=body) as response:
                    await response.read()
                    ok = response.status == 200
            except (aiohttp.ClientError, asyncio.TimeoutError):
                ok = False
            finally:
                slots.release()
            row.latencies.append(time.perf_counter() - began)
            if ok:
                row.answered += 1
            else:
                row.errors += 1

        tasks: set[asyncio.Task[None]] = set()
        start = time.perf_counter()
        i = 0
        for m, row in enumerate(table):
            end = start + (m + 1) * minute_s
            while True:
                due = start + i / rate
                if due >= end:
                    break
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                await slots.acquire()
                row.sent += 1
                task = asyncio.create_task(one(i, row))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                i += 1
            await asyncio.sleep(max(0.0, end - time.perf_counter()))
            row.rss = rss_mb(pid)
        await asyncio.gather(*tasks)
    return table


def log_rows(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM exchanges").fetchone()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=20)
    parser.add_argument("--load", type=float, default=0.8, help="share of the measured maximum")
    parser.add_argument("--fault-rate", type=float, default=0.05,
                        help="share of upstream answers that are a 500")
    parser.add_argument("--delay", type=float, default=0.05, help="upstream seconds per answer")
    parser.add_argument("--n", type=int, default=3, help="perturbed calls per answer")
    parser.add_argument("--concurrency", type=int, default=32, help="clients of the probe")
    parser.add_argument("--probe", type=float, default=30.0, help="seconds of the probe")
    parser.add_argument("--smoke", action="store_true", help="3 minutes of 5 s, a 4 s probe")
    args = parser.parse_args()
    minute_s = 60.0
    if args.smoke:
        args.minutes, args.probe, minute_s, args.concurrency = 3, 4.0, 5.0, 16
    if args.minutes < 2:
        parser.error("--minutes must be at least 2 (growth is measured from minute 2)")

    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    mock = Process([sys.executable, str(MOCK), "--delay", str(args.delay),
                    "--fault-rate", str(args.fault_rate)], r"PORT (\d+)")
    gateway = None
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "traffic.sqlite"
        try:
            upstream = f"http://127.0.0.1:{mock.wait(30).group(1)}/v1"
            gateway, url = serve(["--upstream", upstream, "--embedder", "hash/default",
                                  "--n", str(args.n), "--max-concurrency", "512",
                                  "--queue", "512", "--log", str(log),
                                  "--cache", f"{tmp}/cache.sqlite"])
            pid = gateway.proc.pid
            maximum = asyncio.run(probe(url, args.concurrency, args.probe))
            time.sleep(1.0)  # the log writer's last batch of the probe
            rows_before = log_rows(log)
            rate = args.load * maximum
            rss_start = rss_mb(pid)
            table = asyncio.run(soak(url, rate, args.minutes, minute_s, 4 * args.concurrency,
                                     pid))
            rss_end = rss_mb(pid)
            time.sleep(1.0)  # the log writer's last batch
            gateway.proc.send_signal(signal.SIGTERM)  # drains, then closes the log
            gateway.proc.wait(120)
            gateway = None
            rows = log_rows(log) - rows_before
        finally:
            if gateway is not None:
                gateway.stop()
            mock.stop()
    answered = sum(m.answered for m in table)
    sent = sum(m.sent for m in table)
    errors = sum(m.errors for m in table)
    unit = "min" if not args.smoke else f"{minute_s:.0f}s"
    print(f"measured maximum: {maximum:.1f} req/s (closed loop, {args.concurrency} clients)")
    print(f"load: {rate:.1f} req/s ({args.load:.0%} of the maximum), upstream faults "
          f"{args.fault_rate:.0%}, n {args.n}, upstream delay {1000 * args.delay:.0f} ms")
    print(f"{unit:>4} {'sent':>7} {'ok':>7} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'RSS MB':>8}")
    for k, m in enumerate(table, 1):
        p50 = 1000 * percentile(m.latencies, 0.5) if m.latencies else float("nan")
        p99 = 1000 * percentile(m.latencies, 0.99) if m.latencies else float("nan")
        print(f"{k:>4} {m.sent:>7} {m.answered:>7} {m.errors:>7} {p50:>8.1f} {p99:>8.1f} "
              f"{m.rss:>8.1f}")
    second, last = table[1], table[-1]
    growth = (last.rss - second.rss) / second.rss
    p99_ratio = percentile(last.latencies, 0.99) / percentile(second.latencies, 0.99)
    print(f"requests sent: {sent} count")
    print(f"requests answered: {answered} count")
    print(f"errors: {errors} count ({errors / max(1, sent):.2%})")
    print(f"traffic-log rows of the soak: {rows} count")
    print(f"RSS at start: {rss_start:.1f} MB")
    print(f"RSS at end: {rss_end:.1f} MB")
    print(f"RSS growth minute 2 to last: {100 * growth:.2f} % (target <= 5)")
    print(f"p99 last minute / second minute: {p99_ratio:.2f} ratio (target <= 1.5)")
    print(f"traffic-log rows / requests answered: {rows / max(1, answered):.4f} ratio (target 1)")
    return 0


async def probe(url: str, concurrency: int, seconds: float) -> float:
    """Requests per second a closed loop of ``concurrency`` clients gets answered (200) in
    ``seconds``: the gateway's maximum throughput on this machine."""
    import aiohttp

    done = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def worker(w: int) -> None:
            nonlocal done
            i = 0
            while time.perf_counter() < deadline:
                body = {"model": "mock-model", "messages": [
                    {"role": "user", "content": f"Question probe-{w}-{i}: what is {i} + {w}?"}]}
                async with session.post(url + "/v1/chat/completions", json=body) as response:
                    await response.read()
                    done += response.status == 200
                i += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return done / (time.perf_counter() - began)


if __name__ == "__main__":
    raise SystemExit(main())
