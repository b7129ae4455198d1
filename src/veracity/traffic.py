"""The SQLite traffic log: one row per scored exchange (never a key), read back by the report.

Beside the exchanges, table ``scores`` keeps async-mode scores as the client fetches them, for
``--score-retention`` seconds, so ``GET /v1/veracity/scores/{id}`` answers after a restart. Each
is tagged with its owner: a slow salted hash of the gateway key that asked for it (PBKDF2, the
salt in table ``meta``), never the key.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veracity.errors import DataError
from veracity.jsontypes import JsonObject

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
    score TEXT NOT NULL,
    p_correct REAL,
    decision TEXT
);
CREATE INDEX IF NOT EXISTS exchanges_time ON exchanges (time);
CREATE TABLE IF NOT EXISTS scores (
    id TEXT PRIMARY KEY,
    time REAL NOT NULL,
    owner TEXT,
    score TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS scores_time ON scores (time);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS feedback (
    id TEXT PRIMARY KEY,
    time REAL NOT NULL,
    correct INTEGER NOT NULL
);
"""
LOGGED_CHARS = 16_384
"""Longest text kept in a row (prompt, answer, each perturbed answer); longer ones are cut."""
LOGGED_ITEMS = 256
"""Longest list kept in a row's score."""
_COLUMNS = ("id", "time", "model", "prompt", "answer", "gamma", "verdict", "upstream_ms",
            "scoring_ms", "total_ms", "error", "score", "p_correct", "decision")
_ADDED = {"p_correct": "REAL", "decision": "TEXT"}
"""Columns added after the first release: logs written before lack them."""


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
    score: JsonObject
    """The score as the gateway sent it."""
    p_correct: float | None = None
    """P(correct) from the gateway's calibration (None without one)."""
    decision: str | None = None
    """answer, abstain or escalate (None in logs written before decisions)."""

    def row(self) -> tuple[Any, ...]:
        return tuple(_score_text(self.score) if c == "score" else bounded(getattr(self, c))
                     for c in _COLUMNS)


def _score_text(score: JsonObject) -> str:
    """The score as stored: bounded (walked) only when it is long at all."""
    text = json.dumps(score, ensure_ascii=False)
    return text if len(text) <= LOGGED_CHARS else json.dumps(bounded(score), ensure_ascii=False)


@dataclass(frozen=True)
class StoredScore:
    """An async-mode score as its client fetches it, and who may fetch it."""

    id: str
    time: float
    owner: str | None
    """The owner's tag (see the module's docstring); None on a gateway without keys."""
    score: JsonObject


def bounded(value: Any) -> Any:
    """``value`` with long strings cut and long lists shortened, so one row stays small."""
    if isinstance(value, str):
        if len(value) <= LOGGED_CHARS:
            return value
        return value[:LOGGED_CHARS] + f"… [{len(value) - LOGGED_CHARS} more characters not logged]"
    if isinstance(value, dict):
        return {k: bounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [bounded(v) for v in value[:LOGGED_ITEMS]]
    return value


class TrafficLog:
    """Appends exchanges to a SQLite file; safe from several threads."""

    def __init__(self, path: Path, retention: float | None = None) -> None:
        self.path = path
        self.retention = retention
        """Seconds stored scores are kept (None: for ever)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        present = _columns(self._conn)
        for name, kind in _ADDED.items():
            if name not in present:
                self._conn.execute(f"ALTER TABLE exchanges ADD COLUMN {name} {kind}")

    def append_many(self, entries: list[Entry]) -> None:
        marks = ",".join("?" * len(_COLUMNS))
        with self._lock, self._conn:
            self._conn.executemany(
                f"INSERT OR REPLACE INTO exchanges ({', '.join(_COLUMNS)}) VALUES ({marks})",
                [e.row() for e in entries])

    def write(self, rows: list[Entry | StoredScore]) -> None:
        """Exchanges and stored scores, in one transaction; scores past retention are dropped."""
        entries = [r for r in rows if isinstance(r, Entry)]
        scores = [(r.id, r.time, r.owner, json.dumps(r.score, ensure_ascii=False))
                  for r in rows if isinstance(r, StoredScore)]
        marks = ",".join("?" * len(_COLUMNS))
        with self._lock, self._conn:
            if entries:
                self._conn.executemany(
                    f"INSERT OR REPLACE INTO exchanges ({', '.join(_COLUMNS)}) VALUES ({marks})",
                    [e.row() for e in entries])
            if scores:
                self._conn.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?)", scores)
            if self.retention is not None:
                self._conn.execute("DELETE FROM scores WHERE time < ?", (time.time() - self.retention,))

    def stored_score(self, score_id: str) -> StoredScore | None:
        """A stored score still within retention, or None."""
        oldest = 0.0 if self.retention is None else time.time() - self.retention
        with self._lock:
            row = self._conn.execute("SELECT id, time, owner, score FROM scores WHERE id = ? AND time >= ?",
                                     (score_id, oldest)).fetchone()
        return None if row is None else StoredScore(row[0], row[1], row[2], json.loads(row[3]))

    def salt(self) -> bytes:
        """This log's salt for owner tags, made on first use."""
        with self._lock, self._conn:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'owner_salt'").fetchone()
            if row is None:
                row = (os.urandom(16).hex(),)
                self._conn.execute("INSERT INTO meta VALUES ('owner_salt', ?)", row)
        return bytes.fromhex(row[0])

    def get(self, exchange_id: str) -> Entry | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM exchanges WHERE id = ?", (exchange_id,)
            ).fetchone()
        return None if row is None else _exchange(row)

    def add_feedback(self, exchange_id: str, correct: bool) -> Entry | None:
        """Label a logged exchange (a later label replaces an earlier one); None when no
        exchange has that id."""
        found = self.get(exchange_id)
        if found is None:
            return None
        with self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO feedback VALUES (?, ?, ?)",
                               (exchange_id, time.time(), int(correct)))
        return found

    def feedback_counts(self) -> list[tuple[str, str, int, int]]:
        """(model, decision, labelled, wrong) over the labelled exchanges."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT e.model, COALESCE(e.decision, 'answer'), COUNT(*), SUM(1 - f.correct) "
                "FROM feedback f JOIN exchanges e ON e.id = f.id "
                "GROUP BY e.model, COALESCE(e.decision, 'answer')").fetchall()
        return [(str(m), str(d), int(n), int(w or 0)) for m, d, n, w in rows]

    def close(self) -> None:
        """Checkpoint the WAL into the main file and close."""
        with self._lock:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._conn.close()


def _columns(conn: sqlite3.Connection) -> set[str]:
    return {str(row[1]) for row in conn.execute("PRAGMA table_info(exchanges)")}


def _selected(conn: sqlite3.Connection) -> tuple[str, ...]:
    """The columns of ``_COLUMNS`` this log has (an older log lacks the added ones)."""
    present = _columns(conn)
    return tuple(c for c in _COLUMNS if c in present or c not in _ADDED)


def _exchange(row: tuple[Any, ...], columns: tuple[str, ...] = _COLUMNS) -> Entry:
    values = dict(zip(columns, row, strict=True))
    values["score"] = json.loads(values["score"])
    return Entry(**values)


def iter_traffic(path: Path) -> Iterator[Entry]:
    """Every exchange of a traffic log, oldest first, one row at a time (a SQLite cursor)."""
    if not path.is_file():
        raise DataError(f"traffic log not found: {path}")
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            columns = _selected(conn)
            cursor = conn.execute(f"SELECT {', '.join(columns)} FROM exchanges ORDER BY time")
            for row in cursor:
                yield _exchange(row, columns)
        finally:
            conn.close()
    except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
        raise DataError(f"{path} is not a veracity traffic log: {exc}") from None


@dataclass(frozen=True)
class Labelled:
    """A logged exchange with a label fed back to it."""

    id: str
    model: str
    gamma: float | None
    decision: str | None
    correct: bool


def read_feedback(path: Path) -> list[Labelled]:
    """The labelled exchanges of a traffic log (``POST /v1/veracity/feedback``), oldest first."""
    if not path.is_file():
        raise DataError(f"traffic log not found: {path}")
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "exchanges" not in tables:
                raise DataError(f"{path} is not a veracity traffic log (no exchanges)")
            if "feedback" not in tables:
                return []
            decision = "e.decision" if "decision" in _columns(conn) else "NULL"
            rows = conn.execute(f"SELECT e.id, e.model, e.gamma, {decision}, f.correct FROM "
                                "feedback f JOIN exchanges e ON e.id = f.id ORDER BY e.time").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise DataError(f"{path} is not a veracity traffic log: {exc}") from None
    return [Labelled(str(i), str(m), None if g is None else float(g), d, bool(c))
            for i, m, g, d, c in rows]


def read_traffic(path: Path) -> list[Entry]:
    """Every exchange of a traffic log, oldest first."""
    return list(iter_traffic(path))
