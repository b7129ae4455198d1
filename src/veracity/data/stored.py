"""Question lists kept on disk: an :class:`ItemStore` is a ``Sequence[Item]`` backed by SQLite.

A million short questions take about 625 bytes each as ``Item`` objects (measured on JSONL lines
of an id, a question and one answer): over 600 MB before a run starts. A store reads the file
one record at a time into an SQLite file and gives the items back a page at a time, keeping a
few recent pages, so a run that walks its items in chunks holds only those pages.
:func:`selected_items` applies ``--limit`` / ``--sample`` to a store exactly as
:meth:`~veracity.data.sample.Selection.apply` does to a list, and keeps small files as lists;
:class:`MCStore` and :func:`selected_mc` do the same for multiple-choice items.
"""

from __future__ import annotations

import json
import operator
import shutil
import sqlite3
import tempfile
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar

from veracity.data.labelled import LABELLED_KINDS
from veracity.data.mc import load_mc, parse_dataset_spec, stream_mc_jsonl
from veracity.data.qa import STREAMED, dataset_source, load_items
from veracity.data.sample import Selection
from veracity.errors import DataError
from veracity.sequences import LazySequence
from veracity.space import writing
from veracity.types import Item, MCItem

T = TypeVar("T")


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


R = TypeVar("R", bound=_Identified)

PAGE = 4096
"""Items read back per query."""
CACHED_PAGES = 2
"""Recent pages kept: a chunk that straddles two pages reads each once."""
LARGE_FILE = 32 * 2**20
"""Dataset files above this size (32 MiB) are read into a store, smaller ones into a list.
Loading a list peaks at about ten times the file's size (1.18 GB for a 116 MB file of a million
short questions: the whole text, then 625 bytes an item), so 32 MiB costs some 330 MB, more
than a streamed run itself holds (about 170 MB); below it the list is faster to build (24.6
against 37.5 µs an item, bench/scale_items_load.py) and touches no disk."""
_IN_BATCH = 900  # positions per "IN (...)" query, below SQLite's oldest limit on parameters
_ELSEWHERE = (*LABELLED_KINDS, "haltt4llm")  # FEWL reads these with labelled loaders


def _plain(value: Any) -> bool:
    """Whether JSON gives ``value`` back with the same types (no tuples, no non-string keys)."""
    if value is None or isinstance(value, str | int | float):
        return True
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _encode_item(item: Item) -> str:
    if not _plain(item.metadata):
        raise DataError(f"item {item.id}: metadata must hold JSON values only (strings, numbers, "
                        "booleans, null, lists, objects with string keys) to be stored")
    try:
        # ASCII escapes keep lone surrogates, which SQLite's UTF-8 text could not hold
        return json.dumps([item.id, item.question, list(item.references), item.metadata],
                          ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except ValueError:
        raise DataError(f"item {item.id}: metadata holds NaN or an infinity") from None


def _decode_item(text: str) -> Item:
    id_, question, references, metadata = json.loads(text)
    return Item(id_, question, tuple(references), metadata)


def _encode_mc(item: MCItem) -> str:
    return json.dumps([item.id, item.subject, item.question, list(item.options), item.answer,
                       item.misleading_start], ensure_ascii=True, separators=(",", ":"))


def _decode_mc(text: str) -> MCItem:
    id_, subject, question, options, answer, misleading = json.loads(text)
    return MCItem(id_, subject, question, tuple(options), answer, misleading)


class _File:
    """The SQLite file of a store and its views: removed when closed, or at the latest when
    the last of them is collected or the process exits."""

    def __init__(self, directory: Path | None) -> None:
        where = directory or Path(tempfile.gettempdir())
        with scratch_writes(where):
            self.folder = Path(tempfile.mkdtemp(prefix="veracity-items-", dir=directory))
        self.db = sqlite3.connect(self.folder / "items.sqlite", check_same_thread=False)
        # a scratch file: rebuilt from the dataset after a crash, so no journal and no fsync
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.lock = threading.Lock()
        self.tables = 0
        self._final = weakref.finalize(self, _remove, self.db, self.folder)

    def new_table(self) -> str:
        self.tables += 1
        name = f"items_{self.tables}"
        self.db.execute(f"CREATE TABLE {name} (pos INTEGER PRIMARY KEY, data TEXT NOT NULL)")
        return name

    def close(self) -> None:
        self._final()

    @property
    def closed(self) -> bool:
        return not self._final.alive


@contextmanager
def scratch_writes(folder: Path) -> Iterator[None]:
    """A failed write of the item store names its folder and how to move it (TMPDIR)."""
    what = "the item store of a large dataset (set TMPDIR to a folder with more room)"
    with writing(folder, what):
        yield


def _remove(db: sqlite3.Connection, folder: Path) -> None:
    db.close()
    shutil.rmtree(folder, ignore_errors=True)


class RowStore(LazySequence[R]):
    """Values in an SQLite file, in order: ``len``, ``store[i]`` (negative too), ``store[a:b]``
    (a list), iteration, and :meth:`take` for scattered positions (subclasses say how a value
    is written as JSON text)."""

    def _encode(self, value: R) -> str:
        raise NotImplementedError

    def _decode(self, text: str) -> R:
        raise NotImplementedError

    def __init__(self, file: _File, table: str, size: int, page: int | None = None,
                 cached_pages: int | None = None) -> None:
        page = PAGE if page is None else page
        cached_pages = CACHED_PAGES if cached_pages is None else cached_pages
        if page < 1 or cached_pages < 1:
            raise ValueError("page size and cached pages must be at least 1")
        self._file, self._table, self._size = file, table, size
        self._page, self._cached = page, cached_pages
        self._pages: OrderedDict[int, list[R]] = OrderedDict()
        self.queries = 0
        """Queries made so far (tests check that sequential access costs one per page)."""

    @classmethod
    def build(cls, items: Iterable[R], directory: Path | None = None,
              page: int | None = None, cached_pages: int | None = None,
              batch: int = PAGE) -> Self:
        """A store holding ``items`` (read once, ``batch`` at a time) in a new temporary
        folder under ``directory`` (default: the system's)."""
        file = _File(directory)
        try:
            table = file.new_table()
            store = cls(file, table, 0, page, cached_pages)
            source, size = iter(items), 0
            while rows := [(size + k, store._encode(item))
                           for k, item in enumerate(islice(source, batch))]:
                with scratch_writes(file.folder):
                    file.db.executemany(f"INSERT INTO {table} VALUES (?, ?)", rows)
                size += len(rows)
            with scratch_writes(file.folder):
                file.db.commit()
        except BaseException:
            file.close()
            raise
        store._size = size
        return store

    def close(self) -> None:
        """Remove the file (this store's and its views')."""
        self._pages.clear()
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._size

    def _query(self, sql: str, args: Sequence[int]) -> list[tuple[int, str]]:
        if self._file.closed:
            raise DataError("the item store is closed")
        with self._file.lock:
            self.queries += 1
            return self._file.db.execute(sql, args).fetchall()

    def _page_at(self, number: int) -> list[R]:
        found = self._pages.get(number)
        if found is not None:
            self._pages.move_to_end(number)
            return found
        start = number * self._page
        rows = self._query(f"SELECT pos, data FROM {self._table} WHERE pos >= ? AND pos < ? "
                           "ORDER BY pos", (start, min(start + self._page, self._size)))
        got = [self._decode(data) for _, data in rows]
        self._pages[number] = got
        while len(self._pages) > self._cached:
            self._pages.popitem(last=False)
        return got

    def _item(self, index: int) -> R:
        return self._page_at(index // self._page)[index % self._page]

    def _items(self, start: int, stop: int, step: int) -> list[R]:
        return self.take(range(start, stop, step), whole_pages=abs(step) == 1)

    def __iter__(self) -> Iterator[R]:
        for number in range((self._size + self._page - 1) // self._page):
            yield from self._page_at(number)

    def take(self, positions: Iterable[int], whole_pages: bool = False) -> list[R]:
        """The items at these positions (0-based, in range), in that order: runs of positions
        read by pages (every page touched with ``whole_pages``), scattered ones by a query for
        a few hundred at a time."""
        wanted = [operator.index(p) for p in positions]
        for p in wanted:
            if not 0 <= p < self._size:
                raise IndexError(f"item index {p} out of range for {self._size} items")
        counts = Counter(p // self._page for p in wanted)
        # from this many positions on, a page is read whole (and kept for the next chunk)
        dense = 1 if whole_pages else max(1, self._page // 16)
        pages = {n: self._page_at(n) for n, c in counts.items()
                 if c >= dense or n in self._pages}
        found: dict[int, R] = {}
        loose = []
        for p in dict.fromkeys(wanted):
            page = pages.get(p // self._page)
            if page is not None:
                found[p] = page[p % self._page]
            else:
                loose.append(p)
        for start in range(0, len(loose), _IN_BATCH):
            part = loose[start:start + _IN_BATCH]
            marks = ",".join("?" * len(part))
            for pos, data in self._query(
                    f"SELECT pos, data FROM {self._table} WHERE pos IN ({marks})", part):
                found[pos] = self._decode(data)
        return [found[p] for p in wanted]

    def ids(self) -> Sequence[str]:
        """The items' ids, read as they are asked for."""
        return _Ids(self)

    def select(self, selection: Selection) -> Self:
        """What ``selection.apply`` would keep of these items, in the same order: the first
        ``limit`` (a view of this store), then the seeded sample of them (copied into a table
        of its own in the same file)."""
        pool = self._size if selection.limit is None else min(selection.limit, self._size)
        if selection.sample is None:
            return type(self)(self._file, self._table, pool, self._page, self._cached)
        positions = selection.sample.positions(pool)
        table = self._file.new_table()
        for start in range(0, len(positions), self._page):
            part = positions[start:start + self._page]
            rows = self._raw(part)
            with self._file.lock, scratch_writes(self._file.folder):
                self._file.db.executemany(f"INSERT INTO {table} VALUES (?, ?)",
                                          [(start + k, rows[p]) for k, p in enumerate(part)])
        with scratch_writes(self._file.folder):
            self._file.db.commit()
        return type(self)(self._file, table, len(positions), self._page, self._cached)

    def _raw(self, positions: Sequence[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for start in range(0, len(positions), _IN_BATCH):
            part = positions[start:start + _IN_BATCH]
            marks = ",".join("?" * len(part))
            out.update(self._query(f"SELECT pos, data FROM {self._table} WHERE pos IN ({marks})",
                                   part))
        return out


class ItemStore(RowStore[Item]):
    """Free-form questions in a :class:`RowStore`.

    >>> with ItemStore.build(Item(f"q{i}", f"question {i}") for i in range(10)) as store:
    ...     len(store), store[-1].id, [x.id for x in store[2:8:3]]
    (10, 'q9', ['q2', 'q5'])
    """

    def _encode(self, value: Item) -> str:
        return _encode_item(value)

    def _decode(self, text: str) -> Item:
        return _decode_item(text)


class MCStore(RowStore[MCItem]):
    """Multiple-choice items in a :class:`RowStore`."""

    def _encode(self, value: MCItem) -> str:
        return _encode_mc(value)

    def _decode(self, text: str) -> MCItem:
        return _decode_mc(text)


class _Ids(LazySequence[str]):
    def __init__(self, store: RowStore[Any]) -> None:
        self._store = store

    def __len__(self) -> int:
        return len(self._store)

    def _item(self, index: int) -> str:
        return str(self._store[index].id)

    def _items(self, start: int, stop: int, step: int) -> list[str]:
        return [str(item.id) for item in self._store[start:stop:step]]

    def __iter__(self) -> Iterator[str]:
        return (item.id for item in self._store)


def take(items: Sequence[T], positions: Sequence[int]) -> list[T]:
    """``[items[p] for p in positions]``, in few queries when ``items`` is a store."""
    if isinstance(items, RowStore):
        return items.take(positions)
    return [items[p] for p in positions]


def stream_source(spec: str, question_field: str | None = None,
                  threshold: int | None = None) -> Iterator[Item] | None:
    """The items of a large JSONL / CSV dataset, read one record at a time; None for any other
    spec or a file of at most ``threshold`` bytes (default :data:`LARGE_FILE`)."""
    kind = spec.partition(":")[0]
    if kind in _ELSEWHERE:
        return None
    kind, path = dataset_source(spec)
    limit = LARGE_FILE if threshold is None else threshold
    if kind not in STREAMED or not path.is_file() or path.stat().st_size <= limit:
        return None
    reader = STREAMED[kind]
    return reader(path, question_field) if question_field else reader(path)


@contextmanager
def selected_items(spec: str, selection: Selection, question_field: str | None = None,
                   load: Callable[[], Sequence[Item]] | None = None, threshold: int | None = None,
                   ) -> Iterator[tuple[Sequence[Item], dict[str, Any]]]:
    """The items ``selection`` keeps of a dataset and what run.json records about the choice:
    a large JSONL / CSV file read into an :class:`ItemStore` (removed on leaving), anything
    else loaded whole by ``load`` (default :func:`~veracity.data.qa.load_items`)."""
    source = stream_source(spec, question_field, threshold)
    if source is None:
        items = load() if load is not None else load_items(spec, None, question_field)
        chosen = selection.apply(items)
        yield chosen, selection.record(len(items), [item.id for item in chosen])
        return
    with ItemStore.build(source) as store:
        if not store:
            raise DataError(f"dataset '{spec}' has no questions")
        kept = store.select(selection)
        yield kept, selection.record(len(store), kept.ids())


@contextmanager
def selected_mc(spec: str, subjects: Sequence[str] | None, limit_per_subject: int | None,
                selection: Selection, threshold: int | None = None,
                ) -> Iterator[tuple[Sequence[MCItem], dict[str, Any]]]:
    """:func:`selected_items` for multiple-choice datasets: a large ``mc-jsonl:`` file read
    into an :class:`MCStore`, anything else loaded whole by :func:`~veracity.data.mc.load_mc`."""
    parsed = parse_dataset_spec(spec)
    path, limit = parsed.path, LARGE_FILE if threshold is None else threshold
    if parsed.kind != "mc-jsonl" or not path.is_file() or path.stat().st_size <= limit:
        items = load_mc(parsed, subjects, limit_per_subject)
        chosen = selection.apply(items)
        yield chosen, selection.record(len(items), [item.id for item in chosen])
        return
    if limit_per_subject is not None and limit_per_subject < 1:
        raise DataError("limit per subject must be at least 1")
    with MCStore.build(stream_mc_jsonl(path, subjects, limit_per_subject)) as store:
        if not store:
            raise DataError(f"dataset '{parsed}' has no items")
        kept = store.select(selection)
        yield kept, selection.record(len(store), kept.ids())
