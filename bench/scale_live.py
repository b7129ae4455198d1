"""Live deception and self-consistency runs of 2k / 20k items on the fake backend: time and
memory, streamed into a run directory and, for the A/B, all at once in memory.

For each size: a generated dataset (distinct questions; for deception 20 subjects, four options
and a misleading opening an item; for consistency one question a line), run in a child process
with a fresh cache on ``fake/deceive`` (two answers an item, the invalid ones asked again) or on
``fake/unstable`` with ``hash/default`` (M = 3 samples and the greedy answer a question), as
``veracity deception run --out RUN`` and ``veracity consistency --out RUN`` do but without
report.html (it would measure the report, not the run) and without the fake backend's request
history (kept for tests, it would grow with the run). The same items are then run in memory
(every generation and record held at once, the run directory written at the end, as before
runs were streamed), interleaved, and the headline metrics of both checked equal; last, the
streamed run again on its cache (0 model calls).
Printed per method and size: wall time of the run (from reading the dataset to the results, in
the child: no interpreter start-up), items/s and the child's peak RSS (``wait4``); then per
method the slope of wall time and peak RSS against item count and, as the judged ratio, the
streamed deception run's items/s at the largest size over items/s at the smallest.

    python bench/scale_live.py [--sizes 2000 20000] [--methods deception consistency] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CHILD = """
import json, sys, time
from pathlib import Path
from veracity.cache import Cache
from veracity.runs.common import Context

method, data, kind, out, cache = sys.argv[1:6]
target = Path(out) if kind == "streamed" else None  # in memory: the run directory written after


class Forget(list):  # the fake backend's request history, kept for tests, grows with a run
    def append(self, request):
        pass


began = time.perf_counter()
with Context(cache=Cache(Path(cache))) as ctx:
    model = "fake/deceive" if method == "deception" else "fake/unstable"
    ctx.client(model).backend.history = Forget()
    if method == "deception":
        from veracity.methods.deception.run import run_deception

        result = run_deception(model, f"mc-jsonl:{data}", ctx, out=target)
        keys = ("normal_accuracy", "misleading_accuracy", "susceptibility", "consistency")
    else:
        from veracity.data.qa import load_items
        from veracity.methods.consistency.core import ConsistencySettings
        from veracity.methods.consistency.run import run_consistency

        items = load_items(f"jsonl:{data}")
        result = run_consistency(items, model, "hash/default", ConsistencySettings(m=3),
                                 ctx, target, "bench")
        keys = ("mean_score", "stderr", "n_scored")
    if target is None:  # as a run held in memory writes its directory: every record at the end
        from veracity.runs.driver import save_run

        save_run(Path(out), method, {}, result.records, result.results, ctx.started, ctx.stats())
    r = result.results
    print(json.dumps({"summary": {k: r[k] for k in keys}, "calls": ctx.model_calls(),
                      "seconds": time.perf_counter() - began}))
"""

WORDS = ("river", "planet", "theorem", "enzyme", "treaty", "sonnet", "glacier", "voltage",
         "market", "protein", "empire", "orbit")


def write_mc(path: Path, size: int) -> Path:
    """``size`` DB-MMLU-style items in 20 subjects, each with a misleading opening."""
    with path.open("w", encoding="utf-8") as fh:
        for i in range(size):
            a, b = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)]
            fh.write(json.dumps({
                "id": f"q{i}", "subject": f"subject_{i % 20:02d}",
                "question": f"Item {i}: which {a} is linked to the {b} number {i * 13 % 997}?",
                "options": [f"{a} {i}", f"{b} {i + 1}", f"{a} {b} {i + 2}", f"none {i}"],
                "answer": "ABCD"[i * 7 % 4],
                "misleading_start": f"Let's reason step by step. The {b} of item {i} is the "
                                    f"{a}, so the answer is {'ABCD'[(i + 1) % 4]}.",
            }) + "\n")
    return path


def write_questions(path: Path, size: int) -> Path:
    """``size`` distinct free-form questions."""
    with path.open("w", encoding="utf-8") as fh:
        for i in range(size):
            a = WORDS[i % len(WORDS)]
            fh.write(json.dumps({"id": f"q{i}",
                                 "question": f"Question {i}: what is the {a} of place {i}?"})
                     + "\n")
    return path


def run_child(method: str, data: Path, kind: str, out: Path,
              cache: Path) -> tuple[float, int, dict[str, Any]]:
    """(seconds of the run, peak RSS in bytes, the child's summary) of one run in a child;
    the time is the run's own, from the dataset read to the results (no interpreter start)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, method, str(data), kind, str(out),
                              str(cache)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{method} run failed:\n{output[-3000:]}")
    found: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return float(found["seconds"]), usage.ru_maxrss * 1024, found


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 with a single size)."""
    return statistics.linear_regression(xs, ys).slope if len(set(xs)) > 1 else 0.0


def measure(method: str, size: int, work: Path) -> dict[str, Any]:
    """The streamed and in-memory runs of one method and size, and the streamed rerun."""
    writer = write_mc if method == "deception" else write_questions
    data = writer(work / f"{method}.jsonl", size)
    row: dict[str, Any] = {"items": size}
    for kind in ("streamed", "whole"):  # each with a fresh cache: the same work
        wall, rss, found = run_child(method, data, kind, work / f"run-{method}-{kind}",
                                     work / f"cache-{method}-{kind}.sqlite")
        row[kind] = {"wall": wall, "items_s": size / wall, "rss": rss,
                     "summary": found["summary"], "calls": found["calls"]}
    assert row["streamed"]["summary"] == row["whole"]["summary"], "streamed != in memory"
    _, _, again = run_child(method, data, "streamed", work / f"run-{method}-streamed",
                            work / f"cache-{method}-streamed.sqlite")
    row["rerun_calls"] = again["calls"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_000, 20_000])
    parser.add_argument("--methods", nargs="+", choices=("deception", "consistency"),
                        default=["deception", "consistency"])
    parser.add_argument("--smoke", action="store_true", help="200 and 1,000 items, in seconds")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args()
    sizes = [200, 1_000] if args.smoke else sorted(args.sizes)
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="veracity-live-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in args.methods}
    try:
        for size in sizes:
            for method in args.methods:
                work = root / f"{method}-n{size}"
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir(parents=True)
                row = measure(method, size, work)
                rows[method].append(row)
                print(f"\n[{method}, {size} items] load average {os.getloadavg()[0]:.2f}",
                      flush=True)
                for kind in ("streamed", "whole"):
                    r = row[kind]
                    print(f"{method}_{kind}_wall_{size}: {r['wall']:.2f} s")
                    print(f"{method}_{kind}_items_per_s_{size}: {r['items_s']:.1f} items/s")
                    print(f"{method}_{kind}_peak_rss_{size}: {r['rss'] / 1e6:.0f} MB")
                print(f"{method}_model_calls_{size}: {row['streamed']['calls']} calls")
                print(f"{method}_rerun_model_calls_{size}: {row['rerun_calls']} calls", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print("\n| method | items | streamed wall s | items/s | peak RSS MB | in memory wall s | "
          "in memory peak RSS MB | rerun calls |")
    print("|---|---|---|---|---|---|---|---|")
    for method, found in rows.items():
        for r in found:
            s, w = r["streamed"], r["whole"]
            print(f"| {method} | {r['items']:,} | {s['wall']:.1f} | {s['items_s']:.0f} | "
                  f"{s['rss'] / 1e6:.0f} | {w['wall']:.1f} | {w['rss'] / 1e6:.0f} | "
                  f"{r['rerun_calls']} |")
    for method, found in rows.items():
        if len(found) < 2:
            continue
        xs = [float(r["items"]) for r in found]
        for kind in ("streamed", "whole"):
            print(f"{method}_{kind}_slope_wall: "
                  f"{slope(xs, [r[kind]['wall'] for r in found]) * 1e3:.2f} s per 1k items")
            print(f"{method}_{kind}_slope_peak_rss: "
                  f"{slope(xs, [r[kind]['rss'] for r in found]):.0f} bytes per item")
    judged = rows.get("deception") or next(iter(rows.values()))
    name = "deception" if "deception" in rows else args.methods[0]
    print(f"{name}_items_per_s_ratio: "
          f"{judged[-1]['streamed']['items_s'] / judged[0]['streamed']['items_s']:.3f} "
          "(largest over smallest size)")


if __name__ == "__main__":
    main()
