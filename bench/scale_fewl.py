"""FEWL of 10k / 100k recorded items and 2k / 10k live ones on one machine: time, memory, speed.

Recorded: for each size, generated files (bench/fixtures/fewl_fixtures.py: distinct questions,
six-word answers, J = 3 references and R = 5 pairs a question), scored in a child process with no
model at all (answers, references and pairs from the files; ``hash/default`` as the similarity
and the question embedder; K = 25; a fresh cache), as ``veracity fewl run --answers FILE
--references-file FILE --pairs-file FILE --out RUN`` does but without writing report.html (its
FEWL section is not paged: it would measure the report, not the scoring). Live: the same
questions with everything asked of the fake backend (answers from ``fake/stable``, J = 3 sampled
references and R = 5 pairs from ``fake/pairs``; every generation through a fresh SQLite cache),
as ``veracity fewl run --answers fake/stable --reference fake/pairs --reference-samples 3
--pairs 5 --out RUN``; the smallest live run is then rerun on its cache, which must call no
model. With ``--whole-up-to`` the same items are also scored in memory (no run directory: every
text, vector and record held at once), interleaved with the streamed run of the same size, for
the A/B of peak RSS. Printed per size: wall time, items/s and the child's peak RSS (``wait4``),
where the time goes, and the CPU of the main thread, the cache's two threads and the process
(with an approximate index, also how many chunks' embedding was done while the graph linked);
then the slope of each against item count and, as the judged ratio, recorded items/s at the
largest size over items/s at the smallest. The smallest size runs again after the largest (a
run of a few tens of seconds moves with the machine's speed of the moment): the ratio to each
of its two runs is printed, and the judged one divides by their mean.

Validate: ``fewl validate`` on generated CHALE files (three labelled answers a question) with
J = 2 sampled references and R = 5 pairs from ``fake/pairs``, K = 25 and two repeats, streamed
into a run directory and in memory (no run directory), interleaved, each with a fresh cache
(the fake backend's record of every request, a test aid, bounded in both): wall time and peak
RSS of each at every size (``--validate-sizes``), and the growth of peak RSS per item.

    python bench/scale_fewl.py [--sizes 10000 100000] [--live-sizes 2000 10000]
                               [--validate-sizes 2000 10000] [--whole-up-to 10000] [--smoke]
                               [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from fewl_fixtures import FewlFiles, write_chale, write_fewl  # noqa: E402
from measured import measured_child  # noqa: E402

from veracity.methods.fewl.chunked import CHUNK  # noqa: E402

CHILD = """
import json, os, sys
from pathlib import Path
from veracity.cache import Cache
from veracity.data.labelled import load_questions
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings

kind, dataset, answers, references, pairs, out, cache, index = sys.argv[1:9]
items = load_questions(f"jsonl:{dataset}")
if kind == "live":  # every answer, reference and pair asked of the fake backend
    settings = FewlSettings(references=("fake/pairs",), reference_samples=3,
                            pairs_model="fake/pairs", similarity="hash/default",
                            question_embedder="hash/default", neighbours=25,
                            pairs=PairSettings(r=5), neighbours_index=index)
    sources = [AnswerSource("answers", model="fake/stable")]
else:
    settings = FewlSettings(references_file=Path(references), pairs_file=Path(pairs),
                            similarity="hash/default", question_embedder="hash/default",
                            neighbours=25, pairs=PairSettings(r=5), neighbours_index=index)
    sources = [AnswerSource("answers", path=Path(answers))]
from veracity.runs.common import Context

# where the time goes: seconds inside a few functions (nested ones overlap)
import time
from veracity import cache as cache_mod, client
from veracity.methods.fewl import chunked
from veracity.methods.fewl.neighbours import core as nn
phases = {}
def timed(owner, name, label):
    inner = getattr(owner, name)
    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            phases[label] = phases.get(label, 0.0) + time.perf_counter() - began
    setattr(owner, name, wrapper)
for owner, name, label in [
        (chunked._Inputs, "__init__", "files indexed"),
        (chunked._Index, "__init__", "questions embedded and neighbours searched"),
        (nn.NeighbourSearch, "_index", "approximate index built (or waited for)"),
        (nn.NeighbourSearch, "_approximate_rows", "approximate search"),
        (nn.NeighbourSearch, "_exact_rows", "exact search"),
        (client.CachedEmbedder, "embed", "embedding (with the cache)"),
        (cache_mod.Cache, "_write", "cache writes (a thread of their own for vectors)"),
        (chunked, "score_sets", "chunks scored"),
        (chunked, "build_records", "records built")]:
    timed(owner, name, label)

# the chunks whose embedding the main thread did ahead while the graph linked, and their time
ahead_chunks = [0]
ahead_of = chunked.embedding_ahead
def ahead(*args):
    steps_of = ahead_of(*args)
    if steps_of is None:
        return None
    def steps(index):
        label = "the scoring's embedding done ahead (while the graph linked)"
        work = steps_of(index)
        while True:
            began = time.perf_counter()
            step = next(work, False)
            phases[label] = phases.get(label, 0.0) + time.perf_counter() - began
            if step is False:
                return
            ahead_chunks[0] += 1
            yield step
    return steps
chunked.embedding_ahead = ahead

# CPU each thread used (its own clock, read as it ends): a sampling profiler also counts the
# time a lower-priority thread waits for a core
cpu = {}
def clocked(cls, label):
    inner = cls._run
    def run(self):
        try:
            inner(self)
        finally:
            cpu[label] = cpu.get(label, 0.0) + time.thread_time()
    cls._run = run
clocked(cache_mod._Writer, "cache writer")
clocked(cache_mod._Checkpointer, "cache checkpointer")

with Context(cache=Cache(Path(cache))) as ctx:
    result = run_fewl(items, sources, settings, ctx, None if out == "-" else Path(out),
                      f"jsonl:{dataset}")
    calls = ctx.model_calls()
cpu["main thread"] = time.thread_time()
cpu["whole process"] = sum(os.times()[:2])
search = result.run.info["config"].get("neighbour_search") if out != "-" else None
print(json.dumps(result.results["models"]["answers"] | {"model_calls": calls, "search": search,
                                                        "phases": phases, "cpu": cpu,
                                                        "ahead_chunks": ahead_chunks[0]}))
"""

VALIDATE_CHILD = """
import json, sys
from collections import deque
from pathlib import Path
from veracity.cache import Cache
from veracity.data.labelled import load_labelled
from veracity.methods.fewl.modes import run_fewl_validate
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import FewlSettings
from veracity.runs.common import Context

dataset, out, cache = sys.argv[1:4]
items = load_labelled(f"chale:{dataset}")
settings = FewlSettings(references=("fake/pairs",), reference_samples=2, pairs_model="fake/pairs",
                        similarity="hash/default", question_embedder="hash/default",
                        neighbours=25, pairs=PairSettings(r=5))
with Context(cache=Cache(Path(cache))) as ctx:
    # the fake backend keeps every request for tests to inspect: bounded here, so the peak
    # RSS is veracity's own
    ctx.client("fake/pairs").backend.history = deque(maxlen=1)
    result = run_fewl_validate(items, settings, ctx, None if out == "-" else Path(out),
                               "chale", repeats=2)
print(json.dumps({"validation": result.results["validation"],
                  "models": result.results["models"]}, sort_keys=True))
"""


def run_child(kind: str, files: FewlFiles, out: str, cache: Path,
              index: str = "auto") -> tuple[float, int, dict[str, Any]]:
    """(wall seconds, peak RSS in bytes, the source's summary, the model calls and the
    neighbour search's record) of one scoring in a child: ``kind`` recorded (files) or live
    (the fake backend), with the neighbours searched by ``index``."""
    wall, rss, line = measured_child(CHILD, [kind, *map(str, files), out, str(cache), index],
                                     "scoring")
    return wall, rss, json.loads(line)


def fewl_values(run: Path) -> dict[str, float]:
    """Each scored question's FEWL in a run directory's samples."""
    out: dict[str, float] = {}
    with (run / "samples.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            value = record["answers"]["answers"].get("fewl")
            if value is not None:
                out[record["id"]] = float(value)
    return out


def compare_exact(size: int, root: Path, index: str) -> dict[str, Any]:
    """The recorded case of ``size`` items streamed with exact search: its time, and how far
    each question's FEWL moved with ``index`` (the run already in ``root``)."""
    work = root / f"recorded-n{size}"
    files = FewlFiles(*(work / f"{name}.jsonl"
                        for name in ("questions", "answers", "references", "pairs")))
    wall, rss, summary = run_child("recorded", files, str(work / "exact-run"),
                                   work / "cache-exact.sqlite", "exact")
    exact, approx = fewl_values(work / "exact-run"), fewl_values(work / "run")
    moved = [abs(approx[k] - v) for k, v in exact.items() if k in approx]
    return {"items": size, "wall": wall, "items_s": size / wall, "rss": rss,
            "mean_abs_delta": statistics.fmean(moved) if moved else 0.0,
            "max_abs_delta": max(moved, default=0.0), "compared": len(moved),
            "missing": len(exact) - len(moved), "mean": summary["mean"],
            "load": os.getloadavg()[0]}


def run_validate(dataset: Path, out: str, cache: Path) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in bytes, the aggregates as JSON) of one validation in a child."""
    wall, rss, line = measured_child(VALIDATE_CHILD, [str(dataset), out, str(cache)], "validation")
    return wall, rss, line


def measure_validate(sizes: list[int], root: Path) -> list[dict[str, Any]]:
    """Each size validated streamed and in memory, interleaved, each with a fresh cache; the
    aggregates of the two must be equal."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        work = root / f"validate-n{size}"
        shutil.rmtree(work, ignore_errors=True)
        dataset = write_chale(work, size)
        row: dict[str, Any] = {"items": size}
        found = {}
        for way in ("streamed", "whole"):
            out = str(work / "run") if way == "streamed" else "-"
            wall, rss, found[way] = run_validate(dataset, out, work / f"cache-{way}.sqlite")
            row[way] = {"wall": wall, "items_s": size / wall, "rss": rss}
        assert found["streamed"] == found["whole"], "streamed validation != in memory"
        print(f"\n[validate, {size} items, 2 repeats] load average {os.getloadavg()[0]:.2f}",
              flush=True)
        for way in ("streamed", "whole"):
            r = row[way]
            print(f"validate_{way}_wall_{size}: {r['wall']:.2f} s", flush=True)
            print(f"validate_{way}_peak_rss_{size}: {r['rss'] / 1e6:.0f} MB", flush=True)
        rows.append(row)
    return rows


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 with a single size)."""
    return statistics.linear_regression(xs, ys).slope if len(set(xs)) > 1 else 0.0


def measure(kind: str, sizes: list[int], whole_up_to: int, root: Path,
            prefix: str, index: str = "auto", questions: str = "templated") -> list[dict[str, Any]]:
    """Each size streamed into a run directory and, up to ``whole_up_to``, in memory too,
    interleaved, each with a fresh cache; for a live case the smallest streamed run is rerun
    on its cache (its model calls printed: 0 when every generation was cached)."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        work = root / f"{kind}-n{size}"
        shutil.rmtree(work, ignore_errors=True)
        files = write_fewl(work, size, questions_kind=questions)
        row: dict[str, Any] = {"items": size}
        ways = ["streamed", "whole"] if size <= whole_up_to else ["streamed"]
        for way in ways:  # each with a fresh cache: the same work
            out = str(work / "run") if way == "streamed" else "-"
            wall, rss, summary = run_child(kind, files, out, work / f"cache-{way}.sqlite",
                                           index)
            row[way] = {"wall": wall, "items_s": size / wall, "rss": rss,
                        "mean": summary["mean"], "load": os.getloadavg()[0],
                        "search": summary.get("search"), "phases": summary.get("phases"),
                        "cpu": summary.get("cpu"), "ahead": summary.get("ahead_chunks")}
        if "whole" in row:
            assert row["whole"]["mean"] == row["streamed"]["mean"], "streamed != whole"
        print(f"\n[{kind}, {size} items] load average {os.getloadavg()[0]:.2f}", flush=True)
        for way in ways:
            r = row[way]
            print(f"{prefix}{way}_wall_{size}: {r['wall']:.2f} s", flush=True)
            print(f"{prefix}{way}_items_per_s_{size}: {r['items_s']:.1f} items/s", flush=True)
            print(f"{prefix}{way}_peak_rss_{size}: {r['rss'] / 1e6:.0f} MB", flush=True)
        phases = row["streamed"].get("phases") or {}
        if phases:
            top = ("files indexed", "questions embedded and neighbours searched",
                   "chunks scored", "records built")
            phases = phases | {"the rest (inputs read, records written)":
                               row["streamed"]["wall"] - sum(phases.get(k, 0.0) for k in top)}
            print(f"{prefix}where_the_time_goes_{size} (s per 1,000 items, nested phases "
                  "overlap): " + ", ".join(f"{k} {v / size * 1e3:.2f}"
                                           for k, v in phases.items()), flush=True)
        cpu = row["streamed"].get("cpu") or {}
        if cpu:
            print(f"{prefix}cpu_{size} (CPU s per 1,000 items, each thread's own clock): "
                  + ", ".join(f"{k} {v / size * 1e3:.2f}" for k, v in cpu.items()), flush=True)
        search = row["streamed"].get("search") or {}
        if search:
            print(f"{prefix}neighbour_index_{size}: {search['index']} ({search['library']}, "
                  f"{search['parameters']}); recall@{search['k']}: {search['recall_at_k']} "
                  f"on {search['recall_questions']} questions; "
                  f"{search.get('searched_exactly', 0)} crowded questions searched exactly",
                  flush=True)
        if row["streamed"].get("ahead") is not None and search.get("index") not in (None, "exact"):
            print(f"{prefix}chunks_embedded_ahead_{size}: {row['streamed']['ahead']} of "
                  f"{-(-size // CHUNK)} (while the graph linked)", flush=True)
        if kind == "live" and size == sizes[0]:
            wall, _, summary = run_child(kind, files, str(work / "run"),
                                         work / "cache-streamed.sqlite", index)
            assert summary["mean"] == row["streamed"]["mean"], "rerun != first run"
            print(f"{prefix}rerun_model_calls_{size}: {summary['model_calls']} calls "
                  f"({wall:.2f} s)", flush=True)
        rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]], title: str, prefix: str) -> None:
    """The table of one case and the slopes of its streamed runs against item count."""
    print(f"\n{title}\n| items | streamed wall s | items/s | peak RSS MB | in memory wall s | "
          "in memory peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        s, w = r["streamed"], r.get("whole")
        print(f"| {r['items']:,} | {s['wall']:.1f} | {s['items_s']:.1f} | {s['rss'] / 1e6:.0f} | "
              + (f"{w['wall']:.1f} | {w['rss'] / 1e6:.0f} |" if w else "— | — |"))
    xs = [float(r["items"]) for r in rows]
    if len(rows) > 1:
        print(f"{prefix}slope_wall: {slope(xs, [r['streamed']['wall'] for r in rows]) * 1e3:.2f} "
              "s per 1k items")
        print(f"{prefix}slope_peak_rss: {slope(xs, [r['streamed']['rss'] for r in rows]):.0f} "
              "bytes per item")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--live-sizes", type=int, nargs="*", default=[2_000, 10_000],
                        help="sizes of the live case (none: skip it)")
    parser.add_argument("--validate-sizes", type=int, nargs="*", default=[2_000, 10_000],
                        help="sizes of the fewl validate case (none: skip it)")
    parser.add_argument("--whole-up-to", type=int, default=10_000,
                        help="also score sizes up to this many items in memory (A/B)")
    parser.add_argument("--smoke", action="store_true",
                        help="300 and 1,500 recorded, 200 and 600 live, 150 and 450 "
                             "validated items, in seconds")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    parser.add_argument("--neighbours-index", default="auto",
                        choices=("auto", "exact", "hnsw", "ivf"),
                        help="the neighbour search of every run (auto: exact below 100,000)")
    parser.add_argument("--questions", choices=("templated", "varied"), default="templated",
                        help="templated: ~n/72 near-duplicates per question; varied: few")
    parser.add_argument("--compare-exact-up-to", type=int, default=0,
                        help="recorded sizes up to this many items are also run with exact "
                             "search: the FEWL values' mean |change|")
    args = parser.parse_args()
    sizes = [300, 1_500] if args.smoke else sorted(args.sizes)
    live_sizes = [200, 600] if args.smoke else sorted(args.live_sizes)
    validate_sizes = [150, 450] if args.smoke else sorted(args.validate_sizes)
    whole_up_to = 1_500 if args.smoke else args.whole_up_to
    compare_up_to = 300 if args.smoke else args.compare_exact_up_to
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="veracity-fewl-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        index = args.neighbours_index
        rows, compared = [], []
        for size in sizes:  # each size's exact comparison right after it
            rows += measure("recorded", [size], whole_up_to, root, "", index, args.questions)
            if size <= compare_up_to and index != "exact":
                compared.append(compare_exact(size, root, index))
                c = compared[-1]
                print(f"fewl_mean_abs_change_vs_exact_{size}: {c['mean_abs_delta']:.2e} "
                      f"(exact search {c['wall']:.1f} s, load {c['load']:.2f})", flush=True)
        # the smallest size once more, after the largest: a run of a few tens of seconds
        # moves with the machine's speed of the moment, and the judged ratio divides by it
        again = measure("recorded", sizes[:1], 0, root, "again_", index, args.questions) \
            if len(sizes) > 1 else []
        live = measure("live", live_sizes, whole_up_to, root, "live_", index) if live_sizes else []
        validated = measure_validate(validate_sizes, root) if validate_sizes else []
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    summary(rows, f"recorded answers, references and pairs (no model), neighbours "
            f"--neighbours-index {args.neighbours_index}", "")
    print("\n| items | index | recall@K (sampled questions) | peak RSS MB |\n|---|---|---|---|")
    for r in rows:
        search = r["streamed"].get("search") or {}
        print(f"| {r['items']:,} | {search.get('index')} | {search.get('recall_at_k')} "
              f"({search.get('recall_questions')}) | {r['streamed']['rss'] / 1e6:.0f} |")
    for c in compared:
        print(f"exact_search_wall_{c['items']}: {c['wall']:.2f} s ({c['items_s']:.1f} items/s, "
              f"peak RSS {c['rss'] / 1e6:.0f} MB, load {c['load']:.2f})")
        print(f"fewl_mean_abs_change_vs_exact_{c['items']}: {c['mean_abs_delta']:.2e} "
              f"(max {c['max_abs_delta']:.2e}, {c['compared']} questions compared, "
              f"{c['missing']} scored by one side only)")
    if live:
        summary(live, "live: answers, references (J = 3) and pairs (R = 5) from the fake "
                "backend", "live_")
        print(f"live_items_per_s_ratio: "
              f"{live[-1]['streamed']['items_s'] / live[0]['streamed']['items_s']:.3f} "
              "(largest over smallest size)")
    if validated:
        print("\nfewl validate (2 repeats): streamed vs in memory\n| items | streamed wall s | "
              "streamed peak RSS MB | in memory wall s | in memory peak RSS MB |\n"
              "|---|---|---|---|---|")
        for r in validated:
            s, w = r["streamed"], r["whole"]
            print(f"| {r['items']:,} | {s['wall']:.1f} | {s['rss'] / 1e6:.0f} | {w['wall']:.1f} | "
                  f"{w['rss'] / 1e6:.0f} |")
        first, last = validated[0], validated[-1]
        grow = {way: (last[way]["rss"] - first[way]["rss"]) / (last["items"] - first["items"])
                if last["items"] != first["items"] else 0.0 for way in ("streamed", "whole")}
        print(f"validate_streamed_rss_growth: {grow['streamed']:.0f} bytes per item")
        print(f"validate_whole_rss_growth: {grow['whole']:.0f} bytes per item")
    largest = rows[-1]["streamed"]["items_s"]
    smallest = [r["streamed"]["items_s"] for r in rows[:1] + again]
    if again:
        for when, items_s in zip(("before", "after"), smallest, strict=True):
            print(f"items_per_s_ratio_{when}: {largest / items_s:.3f} (largest size over the "
                  f"smallest run {when} it)")
    print(f"items_per_s_ratio: {largest / statistics.fmean(smallest):.3f} (largest over "
          f"smallest size{', its two runs averaged' if again else ''})")


if __name__ == "__main__":
    main()
