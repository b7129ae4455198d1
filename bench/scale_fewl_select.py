"""``fewl select`` streamed vs in memory: peak RSS and wall time at two sizes, no model.

For each size, generated files (bench/fixtures/fewl_fixtures.py: distinct questions, J = 3
references and R = 5 pairs a question) plus a candidates file with S = 4 candidates a question
(the fixture's answer and three more six-word texts), selected in a child process with
``hash/default`` as the similarity and question embedder, K = 25 and a fresh cache, as
``veracity fewl select --candidates FILE --references-file FILE --pairs-file FILE --out RUN``
does but without report.html. Each size runs twice, interleaved: streamed (chunk by chunk, the
route a run directory takes) and in memory (the same run directory and exports, everything held
at once); both must write the same results.json, samples.jsonl and exports (compared by
hash). Printed per size and way: wall time, items/s and
the child's peak RSS (``wait4``); the judged ratio last: in-memory peak RSS over streamed peak
RSS at the largest size. A chunk is scored with the neighbours its questions need, up to
chunk x (K + 1) questions: the streamed run's memory stops growing with the item count only
well above that (with the defaults, 1,024 x 26).

    python bench/scale_fewl_select.py [--sizes 2000 20000] [--chunk-size 1024]
                                      [--neighbours 25] [--smoke] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from fewl_fixtures import FewlFiles, write_fewl  # noqa: E402
from measured import measured_child  # noqa: E402

SAMPLES = 4

CHILD = """
import hashlib, json, sys
from pathlib import Path
from veracity.cache import Cache
from veracity.data.labelled import load_questions
from veracity.methods.fewl import modes
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings
from veracity.runs.common import Context

way, dataset, candidates, references, pairs, out, cache, chunk, k = sys.argv[1:10]
if way == "whole":  # the same run directory, everything in memory
    modes.streamable = lambda *_: False
else:  # the route a run directory takes, in chunks of the size asked for
    routed = modes.stream_select
    modes.stream_select = lambda *a, **kw: routed(*a, **kw, chunk_size=int(chunk))
items = load_questions(f"jsonl:{dataset}")
settings = FewlSettings(references_file=Path(references), pairs_file=Path(pairs),
                        similarity="hash/default", question_embedder="hash/default",
                        neighbours=int(k), pairs=PairSettings(r=5))
with Context(cache=Cache(Path(cache))) as ctx:
    result = modes.run_fewl_select(items, AnswerSource("candidates", path=Path(candidates)),
                                   settings, ctx, Path(out), f"jsonl:{dataset}", icl_examples=3)
assert (way == "whole") != hasattr(result.records, "path"), "not the route asked for"
digest = hashlib.sha256()
for name in ("results.json", "samples.jsonl", "icl_prompts.jsonl", "finetune.jsonl"):
    digest.update((Path(out) / name).read_bytes())
print(json.dumps(result.summary.selection.to_json() | {"digest": digest.hexdigest()}))
"""


def write_candidates(files: FewlFiles, path: Path, seed: int = 0) -> Path:
    """S candidates a question: the fixture's answer, then S - 1 more texts; line by line."""
    rng = random.Random(seed)
    words = ("river", "paris", "seven", "blue", "moon", "iron", "salt", "capital", "north")
    with files.answers.open(encoding="utf-8") as answers, path.open("w", encoding="utf-8") as out:
        for line in answers:
            row = json.loads(line)
            more = [" ".join(rng.choice(words) for _ in range(5)) + f" {row['id']}"
                    for _ in range(SAMPLES - 1)]
            out.write(json.dumps({"id": row["id"], "answers": [row["answer"], *more]}) + "\n")
    return path


def run_child(way: str, files: FewlFiles, candidates: Path, out: Path, cache: Path,
              chunk: int, k: int) -> tuple[float, int, dict[str, Any]]:
    """(wall seconds, peak RSS in bytes, the selection block and output digest) of one run."""
    args = [way, str(files.dataset), str(candidates), str(files.references), str(files.pairs),
            str(out), str(cache), str(chunk), str(k)]
    wall, rss, line = measured_child(CHILD, args, "selection")
    return wall, rss, json.loads(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_000, 20_000])
    parser.add_argument("--chunk-size", type=int, default=1024,
                        help="questions scored at once in the streamed run (its default: 1,024)")
    parser.add_argument("--neighbours", type=int, default=25, help="K of the penalty")
    parser.add_argument("--smoke", action="store_true",
                        help="300 and 2,000 items, K = 5, in chunks of 64: about a minute")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args()
    sizes = [300, 2_000] if args.smoke else sorted(args.sizes)
    chunk, k = (64, 5) if args.smoke else (args.chunk_size, args.neighbours)
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="veracity-fewl-select-"))
    root.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for size in sizes:
            work = root / f"n{size}"
            shutil.rmtree(work, ignore_errors=True)
            files = write_fewl(work, size)
            candidates = write_candidates(files, work / "candidates.jsonl")
            row: dict[str, Any] = {"items": size}
            for way in ("streamed", "whole"):  # interleaved, each with a fresh cache
                wall, rss, selection = run_child(way, files, candidates, work / f"run-{way}",
                                                 work / f"cache-{way}.sqlite", chunk, k)
                row[way] = {"wall": wall, "rss": rss, "selection": selection}
            assert row["streamed"]["selection"] == row["whole"]["selection"], "streamed != whole"
            print(f"\n[{size} items, {SAMPLES} candidates each, K = {k}, streamed in chunks of "
                  f"{chunk}] load average {os.getloadavg()[0]:.2f}", flush=True)
            for way in ("streamed", "whole"):
                r = row[way]
                print(f"select_{way}_wall_{size}: {r['wall']:.2f} s", flush=True)
                print(f"select_{way}_items_per_s_{size}: {size / r['wall']:.1f} items/s", flush=True)
                print(f"select_{way}_peak_rss_{size}: {r['rss'] / 1e6:.0f} MB", flush=True)
            rows.append(row)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print("\n| items | streamed wall s | streamed peak RSS MB | in memory wall s | "
          "in memory peak RSS MB |\n|---|---|---|---|---|")
    for r in rows:
        s, w = r["streamed"], r["whole"]
        print(f"| {r['items']:,} | {s['wall']:.1f} | {s['rss'] / 1e6:.0f} | {w['wall']:.1f} | "
              f"{w['rss'] / 1e6:.0f} |")
    growth = {way: (rows[-1][way]["rss"] - rows[0][way]["rss"])
              / max(1, rows[-1]["items"] - rows[0]["items"]) for way in ("streamed", "whole")}
    print(f"select_streamed_rss_per_item: {growth['streamed']:.0f} bytes per item")
    print(f"select_whole_rss_per_item: {growth['whole']:.0f} bytes per item")
    last = rows[-1]
    print(f"select_peak_rss_ratio: {last['whole']['rss'] / last['streamed']['rss']:.3f} "
          f"(in memory over streamed, {last['items']:,} items)")


if __name__ == "__main__":
    main()
