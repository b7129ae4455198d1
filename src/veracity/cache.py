"""SQLite content-addressed cache for generations (JSON) and embeddings (float32 blobs).

A key is the SHA-256 of the canonical JSON of everything that changes an output. Errors
are never stored, so a rerun retries exactly what failed.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from veracity.embed.base import Matrix
from veracity.errors import ConfigError, StorageError
from veracity.jsontypes import JsonValue
from veracity.paths import check_output_file, default_cache_path, user_path
from veracity.space import storage_error
from veracity.threads import give_way

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    spec TEXT NOT NULL,
    value BLOB NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_kind_spec ON entries (kind, spec);
"""
_CHUNK = 500  # SQLite's bound-parameter limit is far above this; keeps statements small

# Keys are hashes, so each put lands on random pages of the key index: once the index outgrows a
# transaction, every row dirties a page of its own, written to the WAL and again, at a random
# place of an ever larger file, by the checkpoint. The commit itself stays flat; the checkpoint
# is what grows with the file. So a thread of the writing process checkpoints in the background
# (a put never waits for it), and a commit checkpoints itself only if the log reaches 16384
# pages (64 MiB), which bounds the log when the thread falls behind. A 64 MiB page cache keeps
# the index's inner pages and recent leaves in memory instead of reading them again.
# The log's file keeps its largest size unless it is cut when it starts over: it is cut to 1 MiB,
# and a put that finds it above half the database (at least 1 MiB, at most 64 MiB) checkpoints
# at once, so the disk a run needs stays within 1.5 times the final cache plus a few MiB
# (docs/operations.md), where a small cache used to carry a log eight times its size.
_PRAGMAS = (
    "PRAGMA cache_size = -65536",
    "PRAGMA wal_autocheckpoint = 16384",
    f"PRAGMA journal_size_limit = {1 << 20}",
)
_CHECKPOINT_ROWS = 4096  # rows put between background checkpoints: about as many log pages
WAL_FLOOR = 1 << 20
"""The log may always reach this size (bytes) before a put checkpoints it itself."""
WAL_CEILING = 16384 * 4096
"""... and never more than this (the autocheckpoint's bound)."""


def wal_allowance(db_bytes: int) -> int:
    """How large the write-ahead log may grow before a put checkpoints it: half the database,
    within [WAL_FLOOR, WAL_CEILING].

    >>> wal_allowance(0) == WAL_FLOOR, wal_allowance(10 << 20), wal_allowance(1 << 40) == WAL_CEILING
    (True, 5242880, True)
    """
    return min(WAL_CEILING, max(WAL_FLOOR, db_bytes // 2))
# An entry already there with the same value is left alone instead of deleted and inserted again
# (which INSERT OR REPLACE does, rewriting its pages and both indexes); a different value still
# replaces it, as before.
_CONFLICT = """
ON CONFLICT (key) DO UPDATE SET
    kind = excluded.kind, spec = excluded.spec, value = excluded.value, created = excluded.created
WHERE entries.value IS NOT excluded.value OR entries.kind IS NOT excluded.kind
    OR entries.spec IS NOT excluded.spec
"""
_ROWS_PER_INSERT = 400
"""Rows one INSERT writes: a single step of SQLite, during which Python's GIL is let go (row by
row, a thread that writes would wait for the GIL between rows while another computes)."""
_QUEUED_PUTS = 16
"""Puts of vectors waiting for the writer thread at most: a caller that outruns it waits."""
_ROWS_PER_WRITE = 4096
"""Rows the writer thread puts in one transaction at most."""

Row = tuple[str, str, str, Any, float]


@lru_cache(maxsize=8)
def _upsert(rows: int) -> str:
    values = ",".join(["(?, ?, ?, ?, ?)"] * rows)
    return f"INSERT INTO entries (key, kind, spec, value, created) VALUES {values}{_CONFLICT}"


def _insert(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    for start in range(0, len(rows), _ROWS_PER_INSERT):
        part = rows[start:start + _ROWS_PER_INSERT]
        conn.execute(_upsert(len(part)), [field for row in part for field in row])


def cache_key(payload: Mapping[str, JsonValue]) -> str:
    """SHA-256 of the canonical JSON of ``payload``."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _json_text(value: Any) -> str:
    """JSON that SQLite can store: text holding lone surrogates (no valid UTF-8) is escaped."""
    text = json.dumps(value, ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(value, ensure_ascii=True)
    return text


def _open(path: Path, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection in WAL mode with the schema in place.

    Two processes opening a new cache file at once can get "database is locked" at once,
    without SQLite's busy wait (switching to WAL needs the file to itself), so that is
    tried again until ``timeout``.
    """
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        conn = sqlite3.connect(path, check_same_thread=False,
                               timeout=max(0.0, deadline - time.monotonic()))
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            for pragma in _PRAGMAS:
                conn.execute(pragma)
            conn.execute(f"PRAGMA busy_timeout = {int(1000 * timeout)}")  # for the rest of its life
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() >= deadline:
                raise
        except BaseException:
            conn.close()
            raise
        time.sleep(pause)
        pause = min(2 * pause, 0.5)


class _Checkpointer:
    """Copies the write-ahead log into the database file on a thread and connection of its own.

    Durability does not depend on it: a write is in the log (and survives the process) when it
    returns (a put of JSON returns after its write; vectors, see :class:`_Writer`); a
    checkpoint cut short by the process ending is finished by the next one.
    """

    def __init__(self, path: Path) -> None:
        self._conn = _open(path)
        self._wake = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="veracity-cache-checkpoint",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        give_way()
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            try:  # PASSIVE: never waits for readers or writers, copies what it can
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error:
                pass  # busy: the next wake tries again, and commits bound the log meanwhile

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        self._thread.join()
        self._conn.close()


class _Writer:
    """Writes the puts of vectors on a thread of its own, in the order they came, while the
    caller goes on embedding and scoring (SQLite lets go of the GIL while it writes, and the
    cost of a write grows with the file: random pages of the key index). A get sees a put at
    once (:attr:`Cache._pending`); :meth:`Cache.close` waits for every put to be written, and
    a write that fails (disk full) is raised by the next put or by ``close``. Only embeddings
    go this way: they can be made again, where a generation is written before its put returns.
    """

    def __init__(self, cache: Cache) -> None:
        self._cache = cache
        self.pid = os.getpid()
        """The process whose thread writes (a forked child gets a writer of its own)."""
        self._queue: queue.Queue[list[Row] | None] = queue.Queue(_QUEUED_PUTS)
        self._thread = threading.Thread(target=self._run, name="veracity-cache-writer",
                                        daemon=True)
        self._thread.start()

    def put(self, rows: list[Row]) -> None:
        self._queue.put(rows)

    def _run(self) -> None:
        give_way()
        stop = False
        while not stop:
            jobs = [self._queue.get()]
            # what queued up meanwhile goes in the same transaction: each commit and each
            # return from SQLite waits for the GIL, which the caller holds while it computes
            while jobs[-1] is not None and sum(len(j) for j in jobs if j) < _ROWS_PER_WRITE:
                try:
                    jobs.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = jobs[-1] is None
            rows = sorted((row for job in jobs if job is not None for row in job),
                          key=lambda r: r[0])
            try:
                if rows:
                    self._cache._write(rows[0][1], rows)
            except StorageError:
                pass  # kept in Cache._broken: the next put or close raises it
            finally:
                self._cache._written(rows)
                for _ in jobs:
                    self._queue.task_done()

    def flush(self) -> None:
        """Wait until every put so far is written (or failed)."""
        self._queue.join()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()


@dataclass(frozen=True)
class CacheStats:
    """Counts per (kind, spec) and the file size."""

    path: Path
    size_bytes: int
    rows: list[tuple[str, str, int]]


class Cache:
    """A SQLite file shared by every run; safe to use from several threads."""

    def __init__(self, path: Path | str | None = None, page_cache_mib: int = 64) -> None:
        """``page_cache_mib``: pages SQLite keeps in memory (a long-lived process that never
        rereads its puts, the gateway, keeps fewer: its resident size would grow with the file
        up to this much)."""
        self.path = user_path(path) if path is not None else default_cache_path()
        check_output_file(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = _open(self.path)
            self._conn.execute(f"PRAGMA cache_size = {-1024 * max(1, int(page_cache_mib))}")
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cache {self.path}: cannot open it ({exc})") from None
        self._lock = threading.Lock()
        self._checkpointer: _Checkpointer | None = None  # started by the first put
        self._unchecked = 0  # rows put since the checkpointer was last woken
        self._broken: StorageError | None = None
        """Set once a put failed (disk full): every later put raises it at once."""
        self._broken_told = False
        self._writer: _Writer | None = None  # started by the first put of vectors
        self._pending: dict[str, Any] = {}
        """Values put but not written yet (key -> value), which gets see."""
        self._pending_lock = threading.Lock()

    def _get(self, keys: Sequence[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        unique = list(dict.fromkeys(keys))
        if self._pending:
            with self._pending_lock:
                found = {k: self._pending[k] for k in unique if k in self._pending}
            unique = [k for k in unique if k not in found]
        if not unique:
            return found
        with self._lock:
            for start in range(0, len(unique), _CHUNK):
                chunk = unique[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, value FROM entries WHERE key IN ({marks})", chunk
                )
                found.update(rows.fetchall())
        return found

    def _raise_broken(self) -> None:
        if self._broken is not None:
            self._broken_told = True
            raise self._broken

    @staticmethod
    def _rows(kind: str, spec: str, items: Iterable[tuple[str, Any]]) -> list[Row]:
        now = time.time()
        # in key order, so rows that share a page of the key index are written one after another
        return sorted(((key, kind, spec, value, now) for key, value in items), key=lambda r: r[0])

    def _put(self, kind: str, spec: str, items: Iterable[tuple[str, Any]]) -> None:
        rows = self._rows(kind, spec, items)
        if not rows:
            return
        self._raise_broken()
        try:
            self._write(kind, rows)
        except StorageError:
            self._broken_told = True
            raise

    def _put_later(self, kind: str, spec: str, items: Iterable[tuple[str, Any]]) -> None:
        """Like ``_put``, but written by the writer thread (see :class:`_Writer`)."""
        rows = self._rows(kind, spec, items)
        if not rows:
            return
        self._raise_broken()
        with self._pending_lock:
            self._pending.update((row[0], row[3]) for row in rows)
            if self._writer is None or self._writer.pid != os.getpid():
                self._writer = _Writer(self)
            writer = self._writer
        writer.put(rows)

    def _written(self, rows: list[Row]) -> None:
        with self._pending_lock:
            for key, _, _, value, _ in rows:
                if self._pending.get(key) is value:
                    del self._pending[key]

    def _write(self, kind: str, rows: list[Row]) -> None:
        with self._lock:
            if self._broken is not None:
                raise self._broken
            try:
                with self._conn:
                    _insert(self._conn, rows)
            except sqlite3.Error as exc:
                # SQLite rolls the transaction back and the file stays sound; what was stored
                # before stays stored, and a rerun after space is freed sends only the rest
                self._broken = storage_error(
                    exc, self.path, f"{len(rows)} new {kind} entries of the cache",
                    "what the cache held stays there: the rerun sends only the missing requests")
                raise self._broken from exc
            self._unchecked += len(rows)
            self._bound_log()
            if self._unchecked >= _CHECKPOINT_ROWS:
                self._unchecked = 0
                if self._checkpointer is None:
                    try:
                        self._checkpointer = _Checkpointer(self.path)
                    except (OSError, sqlite3.Error):
                        return  # the put is stored; commits checkpoint the log themselves
                self._checkpointer.wake()

    def flush(self) -> None:
        """Wait until every put is written; a write that failed is raised here (once)."""
        if self._writer is not None and self._writer.pid == os.getpid():
            self._writer.flush()
        if self._broken is not None and not self._broken_told:
            self._raise_broken()

    def _bound_log(self) -> None:
        """Checkpoint here when the log outgrew its allowance (the background thread fell
        behind or has not started); the next write starts it over, cut to 1 MiB."""
        try:
            wal = os.stat(f"{self.path}-wal").st_size
            if wal <= WAL_FLOOR or wal <= wal_allowance(os.stat(self.path).st_size):
                return
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except (OSError, sqlite3.Error):
            return  # busy or gone: the next put tries again; the autocheckpoint still bounds it

    def get_json(self, keys: Sequence[str]) -> dict[str, Any]:
        """Decoded JSON values of the keys that are present."""
        return {k: json.loads(v) for k, v in self._get(keys).items()}

    def put_json(self, kind: str, spec: str, items: Mapping[str, Any]) -> None:
        """Store JSON-serialisable values under their keys."""
        self._put(kind, spec, ((k, _json_text(v)) for k, v in items.items()))

    def get_vectors(self, keys: Sequence[str]) -> dict[str, Matrix]:
        """float32 vectors of the keys that are present."""
        return {k: np.frombuffer(v, dtype=np.float32) for k, v in self._get(keys).items()}

    def put_vectors(self, spec: str, items: Mapping[str, Matrix]) -> None:
        """Store float32 vectors under their keys, written on a thread of the cache's own
        (:class:`_Writer`): a get sees them at once, :meth:`close` waits for them."""
        self._put_later(
            "embedding",
            spec,
            ((k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()),
        )

    def stats(self) -> CacheStats:
        self.flush()
        with self._lock:
            rows = self._conn.execute(
                "SELECT kind, spec, COUNT(*) FROM entries GROUP BY kind, spec ORDER BY kind, spec"
            ).fetchall()
        size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))
        return CacheStats(self.path, size, [(str(k), str(s), int(n)) for k, s, n in rows])

    def clear(self, spec: str | None = None) -> int:
        """Delete every entry (or only those of one model/embedder spec); returns the count."""
        self.flush()
        with self._lock, self._conn:
            if spec is None:
                deleted = self._conn.execute("DELETE FROM entries").rowcount
            else:
                deleted = self._conn.execute("DELETE FROM entries WHERE spec = ?", (spec,)).rowcount
        with self._lock:
            self._conn.execute("VACUUM")
        return int(deleted)

    def close(self) -> None:
        """Write what is pending, then close; a pending write that failed is raised here
        unless a put already raised it."""
        writer, self._writer = self._writer, None
        if writer is not None and writer.pid == os.getpid():
            writer.flush()
            writer.close()
        with self._lock:
            try:
                if self._checkpointer is not None:
                    self._checkpointer.close()
                    self._checkpointer = None
                self._conn.close()
            except sqlite3.Error:
                if self._broken is None:
                    raise  # after a failed put, the error already said why
        if self._broken is not None and not self._broken_told:
            self._raise_broken()
