"""The SQLite traffic log: one row per scored exchange (never a key), read back by the report."""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veracity.errors import DataError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS exchanges (
    id TEXT PRIMARY KEY,
    time REAL NOT NULL,
    model TEXT NOT NULL,
    prompt TEXT NOT NULL,
    answer TEXT NOT NULL,
    gamma REAL,
    verdict TEXT NOT NULL,
    upstream_ms REAL,
    scoring_ms REAL,
    total_ms REAL,
    error TEXT,
    score TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS exchanges_time ON exchanges (time);
"""
_COLUMNS = ("id", "time", "model", "prompt", "answer", "gamma", "verdict", "upstream_ms",
            "scoring_ms", "total_ms", "error", "score")


@dataclass(frozen=True)
class Entry:
    """One logged exchange; ``score`` is the full ``veracity`` object sent to the client."""

    id: str
    time: float
    model: str
    prompt: str
    answer: str
    gamma: float | None
    verdict: str
    upstream_ms: float | None
    scoring_ms: float | None
    total_ms: float | None
    error: str | None
    score: dict[str, Any]

    def row(self) -> tuple[Any, ...]:
        values = [getattr(self, c) for c in _COLUMNS]
        values[-1] = json.dumps(self.score, ensure_ascii=False)
        return tuple(values)


class TrafficLog:
    """Appends exchanges to a SQLite file; safe from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)

    def append_many(self, entries: list[Entry]) -> None:
        marks = ",".join("?" * len(_COLUMNS))
        with self._lock, self._conn:
            self._conn.executemany(f"INSERT OR REPLACE INTO exchanges VALUES ({marks})",
                                   [e.row() for e in entries])

    def get(self, exchange_id: str) -> Entry | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM exchanges WHERE id = ?", (exchange_id,)
            ).fetchone()
        return None if row is None else _exchange(row)

    def close(self) -> None:
        """Checkpoint the WAL into the main file and close."""
        with self._lock:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._conn.close()


def _exchange(row: tuple[Any, ...]) -> Entry:
    values = dict(zip(_COLUMNS, row, strict=True))
    values["score"] = json.loads(values["score"])
    return Entry(**values)


def read_traffic(path: Path) -> list[Entry]:
    """Every exchange of a traffic log, oldest first."""
    if not path.is_file():
        raise DataError(f"traffic log not found: {path}")
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            rows = conn.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM exchanges ORDER BY time"
            ).fetchall()
        finally:
            conn.close()
        return [_exchange(row) for row in rows]
    except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
        raise DataError(f"{path} is not a veracity traffic log: {exc}") from None
