"""Item tables too large for one HTML file: a bounded set inside, every row in a sidecar.

Above :data:`SIDECAR_THRESHOLD` rows, the page embeds the items worth opening first (the
worst by the table's number, a seeded random sample, every item with an error) and writes
every row, sorted by that number, into chunk files beside the HTML (``<report>.items/``).
Each chunk is a script (``veracityItems(table, index, rows)``) that the page loads with a
``<script src>`` tag when the reader pages, sorts or filters: a page opened from disk
(``file://``) may not fetch files in Chromium, but it may load scripts from its own
directory (the page's policy allows ``'self'`` then). The manifest in the page gives each
chunk's size and range, so a range filter loads only the chunks at its two ends.

Memory while writing: a float, a file offset and a part number per row (20 bytes), the
bounded set, and one chunk of rows.
"""

from __future__ import annotations

import heapq
import json
import math
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from veracity.report.html import esc, json_block
from veracity.report.items import Column, Drill
from veracity.space import writing
from veracity.store import RunDir, clean_json
from veracity.text import json_safe

SIDECAR_THRESHOLD = 20_000
"""Tables with more rows than this keep only a bounded set in the page."""
CHUNK_ROWS = 2_000
WORST = 100
SAMPLE = 100
MAX_ERRORS = 2_000
_CHUNK_NAME = re.compile(r"^[a-z0-9-]+-\d{5}\.js$")


@dataclass
class Sidecar:
    """Where a report's chunk files go, and whether any were written."""

    directory: Path
    files: list[str] = field(default_factory=list)

    @property
    def used(self) -> bool:
        return bool(self.files)


_CURRENT: ContextVar[Sidecar | None] = ContextVar("veracity_report_sidecar", default=None)


def sidecar_dir(out: Path) -> Path:
    """The chunk directory beside ``out`` (``report.html`` -> ``report.items``)."""
    return out.parent / f"{out.stem}.items"


def _clear(directory: Path) -> None:
    """Remove the chunk files an earlier report wrote there (and nothing else)."""
    if not directory.is_dir():
        return
    for child in directory.iterdir():
        if child.is_file() and _CHUNK_NAME.match(child.name):
            child.unlink()
    if not any(directory.iterdir()):
        directory.rmdir()


@contextmanager
def beside(out: Path) -> Iterator[Sidecar]:
    """While building the report ``out``: tables that are too large write their rows beside
    it. Old chunk files are removed first, so a report never pages in another's rows."""
    target = Sidecar(sidecar_dir(out))
    _clear(target.directory)
    token = _CURRENT.set(target)
    try:
        yield target
    finally:
        _CURRENT.reset(token)


def too_large(rows: int) -> bool:
    """Whether a table of ``rows`` rows goes to a sidecar (only while a report is built)."""
    return rows > SIDECAR_THRESHOLD and _CURRENT.get() is not None


def samples_lines(run: RunDir) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line) of each non-blank line of a run's samples.jsonl."""
    with (run.path / "samples.jsonl").open("rb") as fh:
        offset = 0
        for line in fh:
            if line.strip():
                yield offset, line
            offset += len(line)


def column_values(run: RunDir, key: str) -> np.ndarray:
    """One number of every record (NaN where there is none), read as a stream."""
    found = [_number(json.loads(line).get(key)) for _, line in samples_lines(run)]
    return np.asarray(found, dtype=np.float64)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def _script(table: str, index: int, rows: Sequence[Mapping[str, Any]]) -> str:
    """A chunk file: rows as a JSON literal (no text in it can end or bend the script)."""
    try:  # rows read from samples.jsonl hold no NaN: skip the slow clean-up when none
        text = json.dumps(rows, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        text = json.dumps(clean_json(list(rows)), ensure_ascii=False, allow_nan=False,
                          separators=(",", ":"))
    text = json_safe(text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
    return f"veracityItems({json.dumps(table)},{index},{text});\n"


@dataclass
class _Picked:
    """Rows of the bounded set: (run, row) -> why it is shown."""

    why: dict[tuple[int, int], str] = field(default_factory=dict)


def _pick(values: list[np.ndarray], errors: set[tuple[int, int]], seed: int = 0,
          high_is_worse: bool = True) -> _Picked:
    """The worst rows (largest value, or smallest), a seeded random sample, and every error
    (capped)."""
    picked = _Picked()
    worst: list[tuple[float, int, int]] = []
    for run, arr in enumerate(values if high_is_worse else [-v for v in values]):
        scored = np.flatnonzero(~np.isnan(arr))
        top = scored[np.argsort(-arr[scored], kind="stable")[:WORST]]
        for line in top.tolist():
            worst.append((float(arr[line]), run, line))
    for _, run, line in heapq.nlargest(WORST, worst, key=lambda w: (w[0], -w[1], -w[2])):
        picked.why[(run, line)] = "worst"
    total = sum(a.size for a in values)
    chosen = random.Random(seed).sample(range(total), min(SAMPLE, total))
    starts = np.cumsum([0, *(a.size for a in values)])
    for flat in chosen:
        run = int(np.searchsorted(starts, flat, side="right") - 1)
        picked.why.setdefault((run, int(flat - starts[run])), "random sample")
    for place in sorted(errors)[:MAX_ERRORS]:
        picked.why.setdefault(place, "error")
    return picked


class Chunk(TypedDict):
    """One chunk file of a paged table, as its manifest lists it."""

    file: str
    n: int
    lo: float | None
    """Lowest scored ``key`` in the chunk (None: nothing scored)."""
    hi: float | None
    scored: int


def paged_items(
    name: str,
    columns: Sequence[Column],
    optional: set[str],
    runs: Sequence[RunDir],
    row_of: Callable[[int, dict[str, Any]], Mapping[str, Any]],
    *,
    key: str,
    drill: Drill | None = None,
    is_error: Callable[[dict[str, Any]], bool] = lambda r: False,
    split: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None,
    high_is_worse: bool = True,
) -> tuple[str, list[dict[str, Any]], list[Column]]:
    """Write every row of the runs, sorted by ``key``, into chunk files; return the paged
    table's HTML, the bounded set of rows for the page, and the columns shown.

    ``row_of(run index, record)`` makes a table row of a samples.jsonl record (of each part
    ``split`` makes of a record, when given: one row per answer source, say); a column in
    ``optional`` is shown only if some row has a value for it; the bounded set's worst rows
    are those with the largest ``key`` unless ``high_is_worse`` is False.
    """
    target = _CURRENT.get()
    if target is None:
        raise RuntimeError("paged_items needs a report being built (sidecar.beside)")
    parts_of = split or (lambda record: [record])
    values: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    subs: list[np.ndarray] = []
    errors: set[tuple[int, int]] = set()
    for run_index, run in enumerate(runs):
        found: list[float] = []
        where: list[int] = []
        which: list[int] = []
        for offset, line in samples_lines(run):
            for sub, piece in enumerate(parts_of(json.loads(line))):
                if is_error(piece):
                    errors.add((run_index, len(found)))
                found.append(_number(piece.get(key)))
                where.append(offset)
                which.append(sub)
        values.append(np.asarray(found, dtype=np.float64))
        offsets.append(np.asarray(where, dtype=np.int64))
        subs.append(np.asarray(which, dtype=np.int32))
    picked = _pick(values, errors, high_is_worse=high_is_worse)
    flat_values = np.concatenate(values) if values else np.zeros(0)
    owners = np.concatenate([np.full(v.size, i, dtype=np.int32) for i, v in enumerate(values)])
    lines = np.concatenate([np.arange(v.size, dtype=np.int64) for v in values])
    order = np.argsort(flat_values, kind="stable")  # NaN (unscored) last
    target.directory.mkdir(parents=True, exist_ok=True)
    handles = [(run.path / "samples.jsonl").open("rb") for run in runs]
    manifest: list[Chunk] = []
    shown: list[dict[str, Any]] = []
    seen: set[str] = set()
    try:
        for index, start in enumerate(range(0, order.size, CHUNK_ROWS)):
            part = order[start : start + CHUNK_ROWS]
            rows = []
            for position in part.tolist():
                run_index, at = int(owners[position]), int(lines[position])
                fh = handles[run_index]
                fh.seek(int(offsets[run_index][at]))
                piece = parts_of(json.loads(fh.readline()))[int(subs[run_index][at])]
                row = row_of(run_index, piece)
                seen.update(k for k, v in row.items() if v is not None)
                rows.append(row)
                why = picked.why.get((run_index, at))
                if why is not None:
                    shown.append({**row, "shown": why})
            chunk_values = flat_values[part]
            scored = chunk_values[~np.isnan(chunk_values)]
            file = f"{name}-{index:05d}.js"
            with writing(target.directory / file, "the report's item table"):
                (target.directory / file).write_text(_script(name, index, rows), encoding="utf-8")
            target.files.append(file)
            manifest.append({"file": file, "n": len(rows),
                             "lo": float(scored.min()) if scored.size else None,
                             "hi": float(scored.max()) if scored.size else None,
                             "scored": int(scored.size)})
    finally:
        for fh in handles:
            fh.close()
    shown_columns = [c for c in columns if c.key not in optional or c.key in seen]
    spec = {
        "name": name, "columns": [asdict(c) for c in shown_columns], "drill": drill,
        "search": [c.key for c in shown_columns if c.kind != "num"],
        "search_label": ", ".join(c.label for c in shown_columns if c.kind != "num"),
        "range": key, "page_size": 50, "total": int(order.size),
        "scored": int(np.count_nonzero(~np.isnan(flat_values))),
        "directory": target.directory.name, "chunks": manifest,
    }
    html = (f"<p class='muted'>All {order.size} rows, in {len(manifest)} files beside this "
            f"page ({esc(target.directory.name)}/), loaded as you page or filter; sorted by "
            f"{esc(key)}.</p><div class='vpaged' data-src=\"{esc(name)}\"></div>"
            + json_block(name, spec))
    order_shown = {"worst": 0, "error": 1, "random sample": 2}
    shown.sort(key=lambda r: order_shown.get(str(r["shown"]), 3))
    return html, shown, shown_columns
