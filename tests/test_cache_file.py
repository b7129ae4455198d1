"""The cache file across code versions and processes: old files open, puts are durable at once."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from veracity.cache import Cache, cache_key

# the schema and the writes of the cache before puts became upserts, as they were on disk
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    spec TEXT NOT NULL,
    value BLOB NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_kind_spec ON entries (kind, spec);
"""


def _old_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(OLD_SCHEMA)
    with conn:
        conn.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?)", [
            ("g1", "generation", "fake/x", '{"text": "Paris", "completion_tokens": 1}', 1.0),
            ("v1", "embedding", "hash/4", np.arange(4, dtype=np.float32).tobytes(), 1.0),
        ])
    conn.close()


def _rows(path: Path) -> list[tuple[int, str, bytes | str, float]]:
    with sqlite3.connect(path) as conn:
        return list(conn.execute("SELECT rowid, key, value, created FROM entries ORDER BY key"))


def test_a_cache_written_by_the_previous_code_reads_and_grows(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _old_file(path)
    cache = Cache(path)
    assert cache.get_json(["g1", "nope"]) == {"g1": {"text": "Paris", "completion_tokens": 1}}
    assert cache.get_vectors(["v1"])["v1"].tolist() == [0.0, 1.0, 2.0, 3.0]
    cache.put_json("generation", "fake/x", {"g2": {"text": "Rome"}})
    cache.put_vectors("hash/4", {"v2": np.ones(4, dtype=np.float32)})
    assert cache.stats().rows == [("embedding", "hash/4", 2), ("generation", "fake/x", 2)]
    cache.close()
    again = Cache(path)  # and the next open finds all four
    assert set(again.get_json(["g1", "g2"])) == {"g1", "g2"}
    assert set(again.get_vectors(["v1", "v2"])) == {"v1", "v2"}
    again.close()


def test_putting_the_same_value_again_leaves_the_row_and_a_new_value_replaces_it(
        tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = Cache(path)
    cache.put_json("generation", "fake/x", {"k": {"text": "a"}, "j": {"text": "b"}})
    before = _rows(path)
    cache.put_json("generation", "fake/x", {"k": {"text": "a"}})
    assert _rows(path) == before  # same rowid, same timestamp: nothing rewritten
    cache.put_json("generation", "fake/y", {"k": {"text": "c"}})
    after = dict((key, (rowid, value)) for rowid, key, value, _ in _rows(path))
    assert after["k"] == (before[1][0], '{"text": "c"}') and len(after) == 2
    assert cache.get_json(["k"]) == {"k": {"text": "c"}}
    assert cache.stats().rows == [("generation", "fake/x", 1), ("generation", "fake/y", 1)]
    cache.close()


def _put_then_die(path: str, groups: int) -> None:
    cache = Cache(path)
    for g in range(groups):
        cache.put_json("generation", "fake/x",
                       {cache_key({"g": g, "i": i}): {"text": f"{g}-{i}"} for i in range(50)})
        cache.put_vectors("hash/8", {cache_key({"v": g, "i": i}): np.full(8, i, np.float32)
                                     for i in range(50)})
    cache.flush()  # vectors are written by a thread of the cache: stored once flush returns
    cache.put_json("generation", "fake/x",  # a generation is stored when its put returns
                   {cache_key({"g": groups, "i": i}): {"text": f"{groups}-{i}"} for i in range(50)})
    os._exit(0)  # no close, no checkpoint: as a process killed right after its last put


def test_every_put_survives_the_process_dying_right_after_it(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    reader = Cache(path)  # another process's connection, open all along
    child = multiprocessing.get_context("fork").Process(target=_put_then_die, args=(str(path), 40))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    # the entries are still in the write-ahead log (below the checkpoint size), yet all there
    assert (tmp_path / "c.sqlite-wal").stat().st_size > 80 * 50 * 100
    keys = [cache_key({"g": g, "i": i}) for g in range(41) for i in range(50)]
    found = reader.get_json(keys)
    assert len(found) == 2050 and found[keys[-1]] == {"text": "40-49"}
    vectors = reader.get_vectors([cache_key({"v": 39, "i": 7})])
    assert vectors[cache_key({"v": 39, "i": 7})].tolist() == [7.0] * 8
    reader.close()


def test_the_log_is_copied_into_the_file_in_the_background_and_close_stops_it(
        tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = Cache(path)
    empty = path.stat().st_size
    rows = 3 * 4096  # three wakes of the checkpointer; far below the log size a commit acts on
    for g in range(rows // 256):
        cache.put_json("generation", "fake/x",
                       {cache_key({"g": g, "i": i}): {"text": "x" * 100} for i in range(256)})
    deadline = time.monotonic() + 30
    while path.stat().st_size < 1_000_000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.stat().st_size >= 1_000_000 > empty  # pages were written back while open
    assert [t.name for t in threading.enumerate()].count("veracity-cache-checkpoint") == 1
    cache.close()
    assert "veracity-cache-checkpoint" not in [t.name for t in threading.enumerate()]
    again = Cache(path)
    assert len(again.get_json([cache_key({"g": g, "i": 0}) for g in range(rows // 256)])) == 48
    again.close()


def test_vectors_are_written_on_a_thread_and_seen_before_they_are(tmp_path: Path) -> None:
    """While the writer thread cannot write (the connection held), a get already sees the
    vectors put; once released they reach the file, as one more connection sees."""
    path = tmp_path / "c.sqlite"
    cache = Cache(path)
    key = cache_key({"v": 1})
    with cache._lock:
        cache.put_vectors("hash/4", {key: np.arange(4, dtype=np.float32)})
        assert cache.get_vectors([key])[key].tolist() == [0.0, 1.0, 2.0, 3.0]
    cache.flush()
    other = Cache(path)
    assert other.get_vectors([key])[key].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not cache._pending
    other.close()
    cache.close()


def _full_disk(conn: object, rows: object) -> None:
    raise sqlite3.OperationalError("database or disk is full")


@pytest.mark.parametrize("then", ["put", "close"])
def test_a_write_that_fails_on_the_thread_is_raised_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str) -> None:
    """A full disk met by the writer thread: the next put raises it, or close does when no
    put came after; never both."""
    import veracity.cache as cache_module
    from veracity.errors import StorageError

    cache = Cache(tmp_path / "c.sqlite")
    monkeypatch.setattr(cache_module, "_insert", _full_disk)
    cache.put_vectors("hash/4", {cache_key({"v": 1}): np.zeros(4, np.float32)})
    cache._writer.flush()  # type: ignore[union-attr]
    if then == "put":
        with pytest.raises(StorageError, match="no space left"):
            cache.put_vectors("hash/4", {cache_key({"v": 2}): np.zeros(4, np.float32)})
        cache.close()
    else:
        with pytest.raises(StorageError, match="no space left"):
            cache.close()


def _put_in_a_fork(path: str) -> None:
    cache = Cache(path)
    cache.put_vectors("hash/4", {cache_key({"v": "parent"}): np.ones(4, np.float32)})
    cache.flush()
    if os.fork() == 0:  # the child inherits the cache, not its writer thread
        cache.put_vectors("hash/4", {cache_key({"v": "child"}): np.ones(4, np.float32)})
        cache.close()
        os._exit(0)
    os.wait()
    cache.close()
    os._exit(0)


def test_a_forked_child_writes_its_vectors_with_a_thread_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    proc = multiprocessing.get_context("fork").Process(target=_put_in_a_fork, args=(str(path),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    reader = Cache(path)
    assert len(reader.get_vectors([cache_key({"v": "parent"}), cache_key({"v": "child"})])) == 2
    reader.close()
