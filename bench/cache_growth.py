"""Cost of the SQLite cache as it grows: time per 1,000 puts and gets at 10k / 100k / 500k entries.

The cache is filled as a run fills it: groups of 64 generations (the JSON a client stores) and
batches of 256 embedding vectors (``hash/default``: 256 float32), each group one ``put`` call,
keys the SHA-256 hex of ``cache_key``. At each checkpoint the next 5,000 entries are timed as
they are put (half generations, half vectors), then 1,000 gets of entries already present (in
groups of 64, at random) and 1,000 gets of absent keys. With ``--against FILE`` a second cache
module (for instance the previous ``cache.py``, ``git show REV:src/veracity/cache.py > old.py``)
fills its own file side by side, each block timed interleaved with the same block of the
current code, so both see the same load on a shared machine.

Printed per checkpoint and code: ms per 1,000 puts, gets and misses; then the slope of the put
time against entries and, as the judged ratio, the put time at the largest size over the
smallest (1.0 is flat: the cost of a put does not grow with the cache).

    python bench/cache_growth.py [--sizes 10000 100000 500000] [--against old.py] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import veracity.cache

GEN_GROUP = 64
VEC_GROUP = 256
DIM = 256
WORDS = ("river", "planet", "theorem", "enzyme", "treaty", "sonnet", "glacier", "voltage")


def load_module(path: Path) -> ModuleType:
    """A cache module from a file, beside the current one."""
    spec = importlib.util.spec_from_file_location("veracity_cache_against", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class Filler:
    """One cache file, filled by one cache module, with its own record of the keys it holds."""

    def __init__(self, name: str, module: ModuleType, path: Path) -> None:
        self.name = name
        self.module = module
        self.cache = module.Cache(path)
        self.keys: dict[str, list[str]] = {"generation": [], "embedding": []}
        self.count = 0
        self.rng = np.random.default_rng(0)

    def _key(self, kind: str, i: int) -> str:
        return str(self.module.cache_key({"kind": kind, "i": i, "model": "bench/model"}))

    def put(self, count: int) -> float:
        """Seconds to put ``count`` new entries: half generations, half vectors."""
        took = 0.0
        half = count // 2
        for kind, total, group in (("generation", half, GEN_GROUP),
                                   ("embedding", count - half, VEC_GROUP)):
            done = 0
            while done < total:
                n = min(group, total - done)
                ids = range(self.count, self.count + n)
                keys = [self._key(kind, i) for i in ids]
                if kind == "generation":
                    values: Any = {k: {"text": " ".join(WORDS[(i + j) % 8] for j in range(12)),
                                       "finish_reason": "stop", "completion_tokens": 12}
                                   for k, i in zip(keys, ids, strict=True)}
                    began = time.perf_counter()
                    self.cache.put_json("generation", "bench/model", values)
                else:
                    vectors = self.rng.standard_normal((n, DIM)).astype(np.float32)
                    values = dict(zip(keys, vectors, strict=True))
                    began = time.perf_counter()
                    self.cache.put_vectors("hash/256", values)
                took += time.perf_counter() - began
                self.keys[kind].extend(keys)
                self.count += n
                done += n
        return took

    def get(self, count: int, present: bool) -> float:
        """Seconds to get ``count`` entries in groups of 64, present ones at random or absent."""
        rng = random.Random(self.count)
        took = 0.0
        for start in range(0, count, GEN_GROUP):
            n = min(GEN_GROUP, count - start)
            vectors = present and start // GEN_GROUP % 2 == 1  # alternately, as a run asks
            if present:
                pool = self.keys["embedding" if vectors else "generation"]
                keys = [pool[rng.randrange(len(pool))] for _ in range(n)]
            else:
                keys = [self._key("absent", rng.randrange(1 << 40)) for _ in range(n)]
            began = time.perf_counter()
            found = self.cache.get_vectors(keys) if vectors else self.cache.get_json(keys)
            took += time.perf_counter() - began
            if present and len(found) != len(set(keys)):
                raise SystemExit(f"{self.name}: {len(set(keys)) - len(found)} entries missing")
            if not present and found:
                raise SystemExit(f"{self.name}: absent keys found")
        return took


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 with a single size)."""
    return statistics.linear_regression(xs, ys).slope if len(set(xs)) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 500_000])
    parser.add_argument("--against", type=Path, help="another cache.py, timed side by side")
    parser.add_argument("--smoke", action="store_true", help="1k, 5k and 20k entries, in seconds")
    parser.add_argument("--block", type=int, default=20_000,
                        help="entries put by each code in turn while filling")
    args = parser.parse_args()
    sizes = [1_000, 5_000, 20_000] if args.smoke else sorted(args.sizes)
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="veracity-cache-growth-"))
    fillers = [Filler("current", veracity.cache, root / "current.sqlite")]
    if args.against is not None:
        fillers.append(Filler("against", load_module(args.against), root / "against.sqlite"))
    puts: dict[str, list[float]] = {f.name: [] for f in fillers}
    fill_seconds: dict[str, float] = {f.name: 0.0 for f in fillers}
    try:
        for size in sizes:
            while fillers[0].count < size:  # fill in turns, so both codes share the load
                step = min(args.block, size - fillers[0].count)
                for filler in fillers:
                    fill_seconds[filler.name] += filler.put(step)
            print(f"\n[{size:,} entries] load average {os.getloadavg()[0]:.2f}", flush=True)
            for filler in fillers:
                put = filler.put(5_000) * 1e3 / 5  # a few checkpoints' worth, less noisy
                got = filler.get(1_000, present=True) * 1e3
                missed = filler.get(1_000, present=False) * 1e3
                puts[filler.name].append(put)
                print(f"{filler.name}_put_ms_per_1k_{size}: {put:.1f} ms")
                print(f"{filler.name}_get_ms_per_1k_{size}: {got:.1f} ms")
                print(f"{filler.name}_miss_ms_per_1k_{size}: {missed:.1f} ms", flush=True)
        print()
        for filler in fillers:
            filler.cache.close()
            size_mb = sum(p.stat().st_size for p in root.glob(filler.cache.path.name + "*")) / 1e6
            print(f"{filler.name}_fill_seconds: {fill_seconds[filler.name]:.1f} s")
            print(f"{filler.name}_file_size: {size_mb:.0f} MB")
            print(f"{filler.name}_put_slope: "
                  f"{slope([float(s) for s in sizes], puts[filler.name]) * 1e5:.2f} "
                  "ms per 1k puts per 100k entries")
        for filler in fillers[1:]:
            print(f"{filler.name}_put_ratio: {puts[filler.name][-1] / puts[filler.name][0]:.3f} "
                  "(largest over smallest size)")
        print(f"current_put_ratio: {puts['current'][-1] / puts['current'][0]:.3f} "
              "(largest over smallest size)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
