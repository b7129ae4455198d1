"""Loading a large question file: peak memory of the items as a list and in an item store,
alone and followed by a streamed live γ run.

For each size a JSONL file of distinct short questions (an id, a question of about ten words
and one answer a line, ~120 bytes) is read in a child process, either whole into a list
(``load_items``, as every command did) or one line at a time into an SQLite item store
(``veracity.data.stored``, what gamma / consistency / fewl run use above 32 MB), as
``selected_items`` does for ``--dataset jsonl:FILE`` with no --limit / --sample. The ``load``
kind stops there (the items are then walked once, in order, as a run's first pass does); the
``run`` kind goes on into the streamed live γ run of those items on ``fake/unstable`` with the
``hash/default`` embedder (N = 2 perturbed prompts, no cache: the item handling is what is
measured, not the cache), as ``veracity gamma --dataset jsonl:FILE --out RUN`` does without
report.html. Printed per size and kind: the child's peak RSS (``wait4``), the load time per
item and the run's wall time; list and store of one size run back to back (interleaved), so
both see the same load on the machine. Last, the judged ratio: peak RSS of the largest list
run over the store run of the same size.

    python bench/scale_items_load.py [--sizes 10000 100000 1000000] [--list-up-to 100000]
                                     [--run-up-to 1000000] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CHILD = """
import json, resource, sys, time
from pathlib import Path

from veracity.data.sample import Selection
from veracity.data.stored import selected_items
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.run import run_gamma
from veracity.runs.common import Context

holder, kind, data, out = sys.argv[1:5]


class Forget(list):  # the fake backend's request history, kept for tests, grows with a run
    def append(self, request):
        pass


began = time.perf_counter()
threshold = 0 if holder == "store" else 2**62
with selected_items(f"jsonl:{data}", Selection(), threshold=threshold) as (items, record):
    loaded = time.perf_counter()
    count = sum(1 for _ in items)  # a run's first pass: every item, in order
    walked = time.perf_counter()
    load_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    run_seconds = 0.0
    mean = None
    if kind == "run":
        with Context(cache=None) as ctx:
            ctx.client("fake/unstable").backend.history = Forget()
            result = run_gamma(items, "fake/unstable", "hash/default", GammaSettings(n=2),
                               ctx, Path(out), "bench")
            mean = result.summary.aggregate.mean
        run_seconds = time.perf_counter() - walked
print(json.dumps({"n": count, "load_s": loaded - began, "walk_s": walked - loaded,
                  "load_rss": load_rss, "run_s": run_seconds, "mean": mean,
                  "selected": record["n_selected"]}))
"""

WORDS = ("river", "planet", "theorem", "enzyme", "treaty", "sonnet", "glacier", "voltage",
         "market", "protein", "empire", "orbit")


def write_questions(path: Path, size: int) -> int:
    """``size`` distinct questions with one answer each; the file's size in bytes."""
    with path.open("w", encoding="utf-8") as fh:
        for i in range(size):
            a, b = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)]
            fh.write(json.dumps({"id": f"q{i:07d}",
                                 "question": f"Which {a} is linked to the {b} of place {i}?",
                                 "answer": f"The {b} {i % 997}"}) + "\n")
    return path.stat().st_size


def run_child(holder: str, kind: str, data: Path, out: Path) -> dict[str, Any]:
    """What the child reports, with its peak RSS in bytes."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, holder, kind, str(data), str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{holder} {kind} failed:\n{output[-3000:]}")
    found: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    found["rss"] = usage.ru_maxrss * 1024
    shutil.rmtree(out, ignore_errors=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--list-up-to", type=int, default=100_000,
                        help="also load (and run) as a list up to this size")
    parser.add_argument("--run-up-to", type=int, default=1_000_000,
                        help="the streamed γ run only up to this size (load alone above)")
    parser.add_argument("--smoke", action="store_true", help="1,000 and 5,000 items, seconds")
    args = parser.parse_args()
    sizes = [1_000, 5_000] if args.smoke else sorted(args.sizes)
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="veracity-items-scale-"))
    rows: list[dict[str, Any]] = []
    try:
        for size in sizes:
            data = root / f"q{size}.jsonl"
            file_bytes = write_questions(data, size)
            holders = ["list", "store"] if size <= args.list_up_to else ["store"]
            kinds = ["load", "run"] if size <= args.run_up_to else ["load"]
            print(f"\n[{size} items, {file_bytes / 1e6:.1f} MB file] load average "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
            for kind in kinds:
                found = {h: run_child(h, kind, data, root / "run") for h in holders}
                if len(found) == 2 and kind == "run":
                    assert found["list"]["mean"] == found["store"]["mean"], "store != list"
                for holder, f in found.items():
                    assert f["n"] == f["selected"] == size
                    rows.append({"size": size, "holder": holder, "kind": kind, **f})
                    name = f"{holder}_{kind}_{size}"
                    print(f"{name}_peak_rss: {f['rss'] / 1e6:.0f} MB")
                    print(f"{name}_load_per_item: {f['load_s'] / size * 1e6:.1f} us")
                    print(f"{name}_walk_per_item: {f['walk_s'] / size * 1e6:.1f} us")
                    if kind == "run":
                        print(f"{name}_run_wall: {f['run_s']:.1f} s")
                        print(f"{name}_run_items_per_s: {size / f['run_s']:.0f} items/s")
                print(flush=True, end="")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n| items | holder | kind | peak RSS MB | load µs/item | walk µs/item | run s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        run = f"{r['run_s']:.1f}" if r["kind"] == "run" else "—"
        print(f"| {r['size']:,} | {r['holder']} | {r['kind']} | {r['rss'] / 1e6:.0f} | "
              f"{r['load_s'] / r['size'] * 1e6:.1f} | {r['walk_s'] / r['size'] * 1e6:.1f} | "
              f"{run} |")
    both = [s for s in sizes if s <= args.list_up_to]
    if both:
        size = both[-1]
        kind = "run" if size <= args.run_up_to else "load"
        peak = {r["holder"]: r["rss"] for r in rows if r["size"] == size and r["kind"] == kind}
        print(f"list_over_store_peak_rss_{kind}_{size}: {peak['list'] / peak['store']:.2f} x")


if __name__ == "__main__":
    main()
