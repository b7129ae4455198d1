"""Issue 42: the disk a run needs stays within 1.5 times the final cache plus a small constant
(the write-ahead log is checkpointed and cut as the cache grows; it used to reach eight times
a small cache)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from veracity.cache import Cache

CONSTANT = 2 << 20  # the log's 1 MiB floor, its index (-shm) and one transaction


def _on_disk(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


@pytest.mark.parametrize("rows", [1500, 12000])
def test_a_run_needs_at_most_one_and_a_half_times_the_final_cache(tmp_path: Path,
                                                                  rows: int) -> None:
    cache = Cache(tmp_path / "cache.sqlite")
    answer = {"text": "an answer of some length " * 30, "completion_tokens": 64}
    peak = 0
    for start in range(0, rows, 4):  # as a run puts them: a few answers at a time
        cache.put_json("generation", "fake/x", {
            hashlib.sha256(str(i).encode()).hexdigest(): answer | {"i": i}
            for i in range(start, start + 4)})
        peak = max(peak, _on_disk(tmp_path))
    cache.close()
    final = _on_disk(tmp_path)
    assert final > 1 << 20
    assert peak <= 1.5 * final + CONSTANT, (peak, final)
