"""FEWL of 10k / 100k recorded items on one machine: time, memory and speed, streamed.

For each size: generated files (bench/fixtures/fewl_fixtures.py: distinct questions, six-word
answers, J = 3 references and R = 5 pairs a question), scored in a child process with no model
at all (answers, references and pairs from the files; ``hash/default`` as the similarity and
the question embedder; K = 25; a fresh cache), as ``veracity fewl run --answers FILE
--references-file FILE --pairs-file FILE --out RUN`` does but without writing report.html (its
FEWL section is not paged: it would measure the report, not the scoring). With ``--whole-up-to``
the same items are also scored in memory (no run directory: every text, vector and record
held at once), interleaved with the streamed run of the same size, for the A/B of peak RSS.
Printed per size: wall time, items/s and the child's peak RSS (``wait4``); then the slope of
each against item count and, as the judged ratio, items/s at the largest size over items/s at
the smallest.

    python bench/scale_fewl.py [--sizes 10000 100000] [--whole-up-to 10000] [--smoke] [--keep DIR]
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
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from fewl_fixtures import FewlFiles, write_fewl  # noqa: E402

CHILD = """
import json, sys
from pathlib import Path
from veracity.cache import Cache
from veracity.data.labelled import load_questions
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings

dataset, answers, references, pairs, out, cache = sys.argv[1:7]
items = load_questions(f"jsonl:{dataset}")
settings = FewlSettings(references_file=Path(references), pairs_file=Path(pairs),
                        similarity="hash/default", question_embedder="hash/default",
                        neighbours=25, pairs=PairSettings(r=5))
from veracity.runs.common import Context
with Context(cache=Cache(Path(cache))) as ctx:
    result = run_fewl(items, [AnswerSource("answers", path=Path(answers))], settings, ctx,
                      None if out == "-" else Path(out), f"jsonl:{dataset}")
print(json.dumps(result.results["models"]["answers"]))
"""


def run_child(files: FewlFiles, out: str, cache: Path) -> tuple[float, int, dict[str, Any]]:
    """(wall seconds, peak RSS in bytes, the source's summary) of one scoring in a child."""
    began = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *map(str, files), out, str(cache)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"scoring failed:\n{output[-3000:]}")
    return wall, usage.ru_maxrss * 1024, json.loads(output.strip().splitlines()[-1])


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 with a single size)."""
    return statistics.linear_regression(xs, ys).slope if len(set(xs)) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--whole-up-to", type=int, default=10_000,
                        help="also score sizes up to this many items in memory (A/B)")
    parser.add_argument("--smoke", action="store_true", help="300 and 1,500 items, in seconds")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args()
    sizes = [300, 1_500] if args.smoke else sorted(args.sizes)
    whole_up_to = 1_500 if args.smoke else args.whole_up_to
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="veracity-fewl-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for size in sizes:
            work = root / f"n{size}"
            shutil.rmtree(work, ignore_errors=True)
            files = write_fewl(work, size)
            row: dict[str, Any] = {"items": size}
            kinds = ["streamed", "whole"] if size <= whole_up_to else ["streamed"]
            for kind in kinds:  # each with a fresh cache: the same work
                out = str(work / "run") if kind == "streamed" else "-"
                wall, rss, summary = run_child(files, out, work / f"cache-{kind}.sqlite")
                row[kind] = {"wall": wall, "items_s": size / wall, "rss": rss,
                             "mean": summary["mean"], "load": os.getloadavg()[0]}
            if "whole" in row:
                assert row["whole"]["mean"] == row["streamed"]["mean"], "streamed != whole"
            print(f"\n[{size} items] load average {os.getloadavg()[0]:.2f}", flush=True)
            for kind in kinds:
                r = row[kind]
                print(f"{kind}_wall_{size}: {r['wall']:.2f} s", flush=True)
                print(f"{kind}_items_per_s_{size}: {r['items_s']:.1f} items/s", flush=True)
                print(f"{kind}_peak_rss_{size}: {r['rss'] / 1e6:.0f} MB", flush=True)
            rows.append(row)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print("\n| items | streamed wall s | items/s | peak RSS MB | in memory wall s | "
          "in memory peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        s, w = r["streamed"], r.get("whole")
        print(f"| {r['items']:,} | {s['wall']:.1f} | {s['items_s']:.1f} | {s['rss'] / 1e6:.0f} | "
              + (f"{w['wall']:.1f} | {w['rss'] / 1e6:.0f} |" if w else "— | — |"))
    xs = [float(r["items"]) for r in rows]
    if len(rows) > 1:
        print(f"slope_wall: {slope(xs, [r['streamed']['wall'] for r in rows]) * 1e3:.2f} "
              "s per 1k items")
        print(f"slope_peak_rss: {slope(xs, [r['streamed']['rss'] for r in rows]):.0f} "
              "bytes per item")
    print(f"items_per_s_ratio: {rows[-1]['streamed']['items_s'] / rows[0]['streamed']['items_s']:.3f} "
          "(largest over smallest size)")


if __name__ == "__main__":
    main()
