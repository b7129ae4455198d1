"""FEWL with random neighbours (``--neighbours-mode random``, Table 8): the search and its memory.

Search: the questions of the generated FEWL fixtures (bench/fixtures/fewl_fixtures.py) embedded
once with ``hash/default``, then the K = 25 nearest questions
(:func:`veracity.methods.fewl.core.neighbour_blocks`) and K = 25 random ones
(:func:`veracity.methods.fewl.neighbours.random.random_neighbour_blocks`, two passes over the
column blocks) found over the same unit vectors in memory, interleaved, the median of the
repeats printed for each. Memory: at each size the recorded files scored in a child process
(answers, references and pairs from the files; ``hash/default`` as similarity and question
embedder; K = 25; a fresh cache) as ``veracity fewl run --answers FILE --references-file FILE
--pairs-file FILE --neighbours-mode random --out RUN`` does, streamed with random neighbours,
streamed with nearest ones, and in memory with random ones (no run directory), interleaved;
the child's peak RSS (``wait4``) and wall time printed for each, and the slope of the streamed
random run's peak RSS against item count. The judged ratio, last: random search time over
nearest search time at the search size.

    python bench/fewl_random_neighbours.py [--sizes 2000 20000] [--search-size 10000]
                                           [--repeats 3] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from fewl_fixtures import FewlFiles, write_fewl  # noqa: E402
from measured import measured_child  # noqa: E402

K = 25

CHILD = """
import json, sys
from pathlib import Path
from veracity.cache import Cache
from veracity.data.labelled import load_questions
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings
from veracity.runs.common import Context

mode, dataset, answers, references, pairs, out, cache = sys.argv[1:8]
items = load_questions(f"jsonl:{dataset}")
settings = FewlSettings(references_file=Path(references), pairs_file=Path(pairs),
                        similarity="hash/default", question_embedder="hash/default",
                        neighbours=25, neighbours_mode=mode, pairs=PairSettings(r=5))
with Context(cache=Cache(Path(cache))) as ctx:
    result = run_fewl(items, [AnswerSource("answers", path=Path(answers))], settings, ctx,
                      None if out == "-" else Path(out), f"jsonl:{dataset}")
print(json.dumps(result.summary.models["answers"].to_json()))
"""

WAYS = (("streamed_random", "random", True), ("streamed_nearest", "nearest", True),
        ("memory_random", "random", False))


def run_child(mode: str, files: FewlFiles, out: str,
              cache: Path) -> tuple[float, int, dict[str, Any]]:
    """(wall seconds, peak RSS in bytes, the source's summary) of one scoring in a child."""
    wall, rss, line = measured_child(CHILD, [mode, *map(str, files), out, str(cache)], "scoring")
    return wall, rss, json.loads(line)


def search_times(files: FewlFiles, repeats: int) -> dict[str, float]:
    """Median seconds of the nearest and the random search over the same vectors."""
    from veracity.data.labelled import load_questions
    from veracity.embed.hashing import HashEmbedder
    from veracity.methods.fewl.core import neighbour_blocks, unit_rows
    from veracity.methods.fewl.neighbours.random import random_neighbour_blocks

    questions = [item.question for item in load_questions(f"jsonl:{files.dataset}")]
    unit = unit_rows(HashEmbedder().embed(questions))
    n = unit.shape[0]
    eligible = np.ones(n, dtype=bool)
    times: dict[str, list[float]] = {"nearest": [], "random": []}
    for _ in range(repeats):
        for name in times:
            began = time.perf_counter()
            if name == "nearest":
                found = list(neighbour_blocks(lambda a, b: unit[a:b], n, K, 0.8, eligible))
            else:
                found = list(random_neighbour_blocks(lambda a, b: unit[a:b], n, K, 0.8,
                                                     eligible, seed=0))
            times[name].append(time.perf_counter() - began)
            assert sum(nb.mask.shape[0] for _, nb in found) == n
    return {name: statistics.median(values) for name, values in times.items()}


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 with a single size)."""
    return statistics.linear_regression(xs, ys).slope if len(set(xs)) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_000, 20_000])
    parser.add_argument("--search-size", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true",
                        help="300 and 1,000 items, a 1,500-question search once: seconds")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args()
    sizes = [300, 1_000] if args.smoke else sorted(args.sizes)
    search_size = 1_500 if args.smoke else args.search_size
    repeats = 1 if args.smoke else args.repeats
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="veracity-fewl-random-"))
    root.mkdir(parents=True, exist_ok=True)
    rss: dict[int, dict[str, int]] = {}
    try:
        for size in sizes:
            work = root / f"n{size}"
            shutil.rmtree(work, ignore_errors=True)
            files = write_fewl(work, size)
            means: dict[str, float] = {}
            rss[size] = {}
            for way, mode, streamed in WAYS:  # each with a fresh cache: the same work
                out = str(work / way) if streamed else "-"
                wall, peak, summary = run_child(mode, files, out, work / f"cache-{way}.sqlite")
                rss[size][way], means[way] = peak, summary["mean"]
                print(f"{way}_wall_{size}: {wall:.2f} s", flush=True)
                print(f"{way}_peak_rss_{size}: {peak / 1e6:.0f} MB", flush=True)
            assert means["streamed_random"] == means["memory_random"], "streamed != in memory"
            print(f"load_average_after_{size}: {os.getloadavg()[0]:.2f} load", flush=True)
        xs = [float(s) for s in sizes]
        print(f"streamed_random_slope_peak_rss: "
              f"{slope(xs, [float(rss[s]['streamed_random']) for s in sizes]):.0f} bytes per item")
        print(f"memory_random_slope_peak_rss: "
              f"{slope(xs, [float(rss[s]['memory_random']) for s in sizes]):.0f} bytes per item")
        files = write_fewl(root / f"search-{search_size}", search_size)
        times = search_times(files, repeats)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"nearest_search_{search_size}: {times['nearest']:.2f} s")
    print(f"random_search_{search_size}: {times['random']:.2f} s")
    print(f"load_average_end: {os.getloadavg()[0]:.2f} load")
    print(f"random_over_nearest_search_ratio: {times['random'] / times['nearest']:.3f} "
          f"(K = {K}, {search_size} questions, median of {repeats})")


if __name__ == "__main__":
    main()
