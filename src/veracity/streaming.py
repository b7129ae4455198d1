"""Runs in bounded memory: items in chunks, exact running sums, records appended as they come.

A streamed run keeps a chunk of items, its generations and embeddings, and a few running
aggregates in memory; each chunk's records go to ``samples.jsonl`` as soon as they are
scored. The sums are exact (every float is an integer times a power of two, and integers add
without rounding), so an aggregate does not depend on how the items were cut into chunks:
the whole run in one chunk gives the same digits as a thousand chunks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from fractions import Fraction
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import numpy as np
import numpy.typing as npt

from veracity.calls import CachedCalls, Progress
from veracity.errors import ConfigError
from veracity.jsontypes import JsonValue
from veracity.space import storage_error, writing
from veracity.store import dumps
from veracity.text import json_safe

T = TypeVar("T")
_HALF = 26  # a 53-bit mantissa split in two halves whose sums cannot overflow or round
_LOW_MASK = (1 << _HALF) - 1
_MAX_BATCH = 1 << 24  # halves of up to 2^27 summed in float64: exact below 2^53


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last may be shorter), read lazily.

    >>> [len(c) for c in chunks(range(7), 3)]
    [3, 3, 1]
    """
    if size < 1:
        raise ConfigError(f"chunk size must be at least 1, got {size}")
    source = iter(items)
    while chunk := list(islice(source, size)):
        yield chunk


class ExactSum:
    """The exact sum of many floats, in O(distinct exponents) memory.

    Each finite float64 is m * 2**(e - 53) with an integer m of at most 53 bits; the integers
    are summed per exponent (vectorised, in two 26/27-bit halves so float64 adds them without
    rounding) and kept as Python integers. The order and grouping of the values cannot
    change the result.

    >>> s = ExactSum()
    >>> s.add([0.1, 0.2]); s.add([0.3])
    >>> s.fraction() == Fraction(0.1) + Fraction(0.2) + Fraction(0.3), float(s)
    (True, 0.6)
    """

    def __init__(self) -> None:
        self._by_exponent: dict[int, int] = {}

    def add(self, values: npt.ArrayLike) -> None:
        """Add finite values (a ConfigError on NaN or infinity)."""
        arr = np.asarray(values, dtype=np.float64).ravel()
        if arr.size == 0:
            return
        if not np.all(np.isfinite(arr)):
            raise ConfigError("an exact sum takes finite values only")
        for start in range(0, arr.size, _MAX_BATCH):
            self._add(arr[start : start + _MAX_BATCH])

    def _add(self, arr: npt.NDArray[np.float64]) -> None:
        mantissa, exponent = np.frexp(arr)
        ints = np.ldexp(mantissa, 53).astype(np.int64)  # exact: |m| < 1 has 53 bits
        high = (ints >> _HALF).astype(np.float64)
        low = (ints & _LOW_MASK).astype(np.float64)
        found, where = np.unique(exponent, return_inverse=True)
        high_sums = np.bincount(where, weights=high, minlength=found.size)
        low_sums = np.bincount(where, weights=low, minlength=found.size)
        for e, hi, lo in zip(found.tolist(), high_sums.tolist(), low_sums.tolist(), strict=True):
            total = (int(hi) << _HALF) + int(lo)
            self._by_exponent[e] = self._by_exponent.get(e, 0) + total

    def merge(self, other: ExactSum) -> None:
        """Add another sum into this one (exactly)."""
        for e, total in other._by_exponent.items():
            self._by_exponent[e] = self._by_exponent.get(e, 0) + total

    def fraction(self) -> Fraction:
        """The sum as an exact rational number."""
        total = Fraction(0)
        for e, value in self._by_exponent.items():
            shift = e - 53
            total += value * (Fraction(2) ** shift)
        return total

    def __float__(self) -> float:
        return float(self.fraction())


class MomentSums:
    """Count, exact sum and exact sum of squares of finite values (up to 1e150): mean and
    standard error of the mean, correctly rounded, whatever order and chunks they come in."""

    def __init__(self) -> None:
        self.n = 0
        self.total = ExactSum()
        self.squares = ExactSum()

    def add(self, values: npt.ArrayLike) -> None:
        arr = np.asarray(values, dtype=np.float64).ravel()
        arr = arr[np.isfinite(arr)]
        self.n += int(arr.size)
        self.total.add(arr)
        # x^2 exactly, as three floats (Dekker): x = hi + lo with 26-bit halves, each product
        # exact, so a constant column has a variance of exactly 0
        split = 134217729.0 * arr  # 2^27 + 1
        hi = split - (split - arr)
        lo = arr - hi
        self.squares.add(hi * hi)
        self.squares.add(2.0 * hi * lo)
        self.squares.add(lo * lo)

    def mean_stderr(self) -> tuple[float, float]:
        """Mean and the sample standard deviation / sqrt(n); NaN when undefined (as
        :func:`veracity.stats.mean_stderr`)."""
        if self.n == 0:
            return math.nan, math.nan
        s1 = self.total.fraction()
        mean = s1 / self.n
        if self.n == 1:
            return float(mean), math.nan
        variance = (self.squares.fraction() - s1 * mean) / (self.n - 1)
        return float(mean), math.sqrt(max(0.0, float(variance / self.n)))


class FloatColumn:
    """A growing float64 array (8 bytes a value): what an exact median needs, and no more."""

    def __init__(self, capacity: int = 1024) -> None:
        self._data = np.empty(max(1, capacity), dtype=np.float64)
        self._size = 0

    def extend(self, values: npt.ArrayLike) -> None:
        arr = np.asarray(values, dtype=np.float64).ravel()
        need = self._size + arr.size
        if need > self._data.size:
            grown = np.empty(max(need, 2 * self._data.size), dtype=np.float64)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : need] = arr
        self._size = need

    def __len__(self) -> int:
        return self._size

    def array(self) -> npt.NDArray[np.float64]:
        """The values so far (a view: do not keep it across ``extend``)."""
        return self._data[: self._size]


def record_dumps(record: Mapping[str, JsonValue]) -> str:
    """:func:`veracity.store.dumps` of a record read from or made for JSON (string keys): the
    same text, without walking every value first unless a NaN or infinity needs replacing."""
    try:
        text = json.dumps(record, ensure_ascii=False, allow_nan=False)
    except ValueError:  # NaN / infinity: store.dumps writes them as null
        return dumps(record)
    return json_safe(text)


class SampleWriter:
    """Appends JSON lines to a file as records complete, flushed after every chunk so an
    interrupted run leaves every finished chunk on disk."""

    def __init__(self, path: Path, dumps: Any = record_dumps) -> None:
        self.path = path
        self._dumps = dumps
        self._fh: IO[str] | None = None
        self.count = 0

    def __enter__(self) -> SampleWriter:
        with writing(self.path, "the run's records"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("w", encoding="utf-8")
        return self

    def write(self, records: Iterable[Mapping[str, JsonValue]]) -> None:
        """One chunk of records, then a flush."""
        if self._fh is None:
            raise RuntimeError("SampleWriter used outside its with block")
        text = "".join(self._dumps(r) + "\n" for r in records if self._counted())
        with writing(self.path, "the run's records"):
            self._fh.write(text)
            self._fh.flush()

    def _counted(self) -> bool:
        self.count += 1
        return True

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._fh is not None:
            fh, self._fh = self._fh, None
            try:
                fh.close()
            except OSError as exc:  # what the last flush could not write
                if error is None:
                    raise storage_error(exc, self.path, "the run's records") from exc


class RunProgress:
    """One progress bar over a whole streamed run: every stage the clients start, chunk after
    chunk, advances the same bar (requests done, model calls and cache hits summed).

    >>> class Shown:
    ...     def start(self, stage, total): print("start", stage, total)
    ...     def update(self, done, calls, hits): print(done, calls, hits)
    ...     def finish(self): print("finish")
    >>> bar = RunProgress(Shown(), "answers", 6)
    >>> bar.start("chunk", 4); bar.update(4, 3, 1); bar.finish()
    start answers 6
    4 3 1
    >>> bar.start("chunk", 2); bar.update(2, 2, 0); bar.finish(); bar.close()
    6 5 1
    finish
    """

    def __init__(self, shown: Progress, stage: str, total: int | None) -> None:
        self.shown = shown
        self.stage = stage
        self.total = total
        self._started = False
        self._base = (0, 0, 0)
        self._last = (0, 0, 0)

    def start(self, stage: str, total: int | None) -> None:
        if not self._started:
            self.shown.start(self.stage, self.total)
            self._started = True
        self._last = (0, 0, 0)

    def update(self, done: int, calls: int, hits: int) -> None:
        self._last = (done, calls, hits)
        self.shown.update(*(b + n for b, n in zip(self._base, self._last, strict=True)))

    def finish(self) -> None:
        """One stage of one chunk is over: the bar stays."""
        (done, calls, hits), (more, more_calls, more_hits) = self._base, self._last
        self._base = (done + more, calls + more_calls, hits + more_hits)
        self._last = (0, 0, 0)

    def close(self) -> None:
        """The run is over: the bar goes."""
        if self._started:
            self.shown.finish()
            self._started = False


@contextmanager
def one_bar(clients: Sequence[CachedCalls], shown: Progress, stage: str,
            total: int | None) -> Iterator[None]:
    """The clients' stages, chunk after chunk, shown as one bar of ``total`` requests."""
    bar = RunProgress(shown, stage, total)
    before = [c.progress for c in clients]
    for c in clients:
        c.progress = bar
    try:
        yield
    finally:
        for c, progress in zip(clients, before, strict=True):
            c.progress = progress
        bar.close()
