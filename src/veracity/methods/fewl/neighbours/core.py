"""NN_K of every question through faiss: exact inner-product search, or an approximate index.

``exact`` (the default below ``APPROXIMATE_FROM`` questions) compares every question with every
other, a row block against a column block at a time (``faiss.knn``, float32), so memory is
bounded by the blocks whatever the number of questions; the cosines of the candidates it finds
are recomputed in float64 and the near-duplicate and self exclusions applied to those, and a
row that loses too many candidates to them is searched again over the whole block. The work
still grows with the square of the questions.

``hnsw`` (graph) and ``ivf`` (inverted lists over k-means cells) hold one float32 vector per
eligible question in memory (4 x dim bytes each, about 300 MB for 300,000 questions of 256
dimensions) and find neighbours in time that grows far slower than n. They can miss a true
neighbour: the share of exact neighbours they find (recall@K) is measured on a sample of
questions against exact search and recorded in ``run.json``.

An HNSW graph can also grow while the questions are still being embedded
(:meth:`NeighbourSearch.feed`): faiss lets go of the GIL, so a thread of its own adds each
column block as soon as it is complete (the blocks a build after the fact adds, so the same
graph) while the embedder works on the next chunk. That thread links the questions one at a
time (one OpenMP thread): the run's main thread keeps a core, and the graph does not depend
on how threads interleave, as faiss' parallel add can. While the graph's last blocks are
linked, the thread that waits for them runs the exact search the recall is measured against,
or, when the caller gives it work of its own to do then (``meanwhile``), that work, and the
exact search follows the blocks on a thread of its own.

Ties among equal cosines may go to any of the tied questions (the numpy search in
:mod:`veracity.methods.fewl.core` sends them to the lower index).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.errors import ConfigError
from veracity.methods.fewl.core import COLUMN_BLOCK, ColumnBlock, Neighbours, nearest_block
from veracity.text import terminal_safe
from veracity.threads import give_way

log = logging.getLogger("veracity")

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

INDEXES = ("auto", "exact", "hnsw", "ivf")
APPROXIMATE_FROM = 100_000
"""``auto`` searches exactly below this many questions and with ``hnsw`` from it on."""
MARGIN = 8
"""Candidates fetched beyond K (itself and near-duplicates are dropped afterwards)."""
WIDEN = 4
"""How much more an approximate index is asked for when a row lost too many candidates."""
TRUTH_BLOCK = 128
"""Sampled questions searched exactly at once for the recall (their candidates' float64
vectors are rows x (K + MARGIN) x dim: 128 x 33 x 256 x 8 bytes is 8.7 MB)."""
FETCH_LIMIT = 2048
"""Candidates an approximate index is asked for at most; rows that still lack K neighbours
after dropping near-duplicates are searched exactly."""


@dataclass(frozen=True)
class IndexSettings:
    """How NN_K is searched (``--neighbours-index``)."""

    kind: str = "auto"
    approximate_from: int = APPROXIMATE_FROM
    hnsw_m: int = 16
    """Graph links per vector (memory: about 2 x m x 4 bytes a question more)."""
    ef_construction: int = 96
    """Candidates kept while a question is linked into the graph. On 300,000 varied
    questions of 256 dimensions, K = 25, near-duplicate threshold 0.8, m 16, ef_search 128,
    the graph grown on one thread (per 1,000 questions): 128 builds in 0.45 s for recall
    0.9952, 96 in 0.33 s for 0.99288, 64 in 0.24 s for 0.98928."""
    ef_search: int = 128
    """Candidates the graph search keeps: recall against speed. On the same questions at
    threshold 0.95 (build, then search, two threads): m 16 gives recall 0.99644 at ef 128
    (0.24 s, 0.22 s) and 0.99432 at 96; m 32 gives 0.99816 at 128 (0.33 s, 0.31 s)."""
    nlist: int = 0
    """IVF cells (0: 4 x sqrt(n))."""
    nprobe: int = 32
    """IVF cells visited per search."""
    recall_sample: int = 1000
    """Questions whose approximate neighbours are checked against exact search."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in INDEXES:
            raise ConfigError(f"unknown neighbours index '{self.kind}'; known: {', '.join(INDEXES)}")
        if self.approximate_from < 1 or self.recall_sample < 0:
            raise ConfigError("approximate_from must be >= 1 and recall_sample >= 0")

    def resolve(self, n: int) -> str:
        """The index that runs for ``n`` questions.

        >>> IndexSettings().resolve(10), IndexSettings().resolve(200_000)
        ('exact', 'hnsw')
        >>> IndexSettings("ivf").resolve(10)
        'ivf'
        """
        if self.kind != "auto":
            return self.kind
        return "exact" if n < self.approximate_from else "hnsw"


@dataclass
class SearchRecord:
    """What ``run.json`` records of the neighbour search."""

    setting: str
    index: str
    questions: int
    k: int
    library: str = ""
    recall_at_k: float | None = None
    """Share of the sampled questions' exact neighbours the index found, ties with the K-th
    counting as found (1.0 for exact; see :func:`recall_at_k`)."""
    recall_questions: int = 0
    searched_exactly: int = 0
    """Questions an approximate index left short of K (crowded by near-duplicates), searched
    exactly instead."""
    parameters: dict[str, int] = field(default_factory=dict)
    """The index's own parameters (hnsw: m, ef_construction, ef_search; ivf: nlist, nprobe,
    trained_on)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _faiss(kind: str) -> Any:
    """faiss, or None for exact search without it (numpy then)."""
    try:
        import faiss
    except ImportError:
        if kind == "exact":
            return None
        raise ConfigError(f"--neighbours-index {kind} needs faiss: pip install 'veracity[fewl]'"
                          ) from None
    return faiss


def recall_at_k(found: Floats, found_mask: Bools, exact: Floats, exact_mask: Bools,
                tolerance: float = 1e-6) -> float:
    """Share of the exact neighbours an index found, from cosines: in each row, a found
    neighbour counts when its cosine is at least the row's K-th exact cosine (less
    ``tolerance``), at most as many as the row has exact neighbours. Questions whose cosines
    tie with the K-th are equally near, so which of them an index returns does not matter
    (the "recall with epsilon" of approximate-search benchmarks); 1.0 when there is no exact
    neighbour at all.

    >>> recall_at_k(np.array([[0.9, 0.5]]), np.array([[True, True]]),
    ...             np.array([[0.9, 0.7]]), np.array([[True, True]]))
    0.5
    """
    hit = total = 0
    for row in range(exact.shape[0]):
        truth = exact[row][exact_mask[row]]
        total += truth.size
        if truth.size:
            near = found[row][found_mask[row]] >= truth.min() - tolerance
            hit += min(int(near.sum()), truth.size)
    return 1.0 if total == 0 else hit / total


def merge_top(values: Floats, index: Ints, k: int, distinct: bool = False) -> tuple[Floats, Ints]:
    """Per row, the k largest finite values (ties to the lower index), padded with -inf / 0;
    the same index may appear twice (once per source) and counts once. With ``distinct`` (no
    index twice in a row: one block of columns, or blocks that do not overlap) a wide matrix is
    first cut to each row's values at or above its k-th largest, in linear time, so only those
    are sorted.

    >>> v, i = merge_top(np.array([[0.5, 0.9, -np.inf, 0.9]]), np.array([[4, 7, 1, 2]]), 2)
    >>> v.tolist(), i.tolist()
    ([[0.9, 0.9]], [[2, 7]])
    """
    rows = values.shape[0]
    out = np.full((rows, k), -np.inf)
    out_index = np.zeros((rows, k), dtype=np.int64)
    if k == 0 or values.size == 0:
        return out, out_index
    finite = np.isfinite(values)
    if distinct and values.shape[1] > 2 * k:
        # ties with the k-th largest are all kept, so the order by index still decides them
        kth = np.partition(np.where(finite, values, -np.inf), -k, axis=1)[:, -k]
        finite &= values >= kth[:, None]
    row, col = np.nonzero(finite)
    found, at = values[row, col], index[row, col]
    order = np.lexsort((at, -found, row))
    row, found, at = row[order], found[order], at[order]
    fresh = np.ones(row.size, dtype=bool)
    fresh[1:] = (row[1:] != row[:-1]) | (at[1:] != at[:-1])
    row, found, at = row[fresh], found[fresh], at[fresh]
    starts = np.searchsorted(row, np.arange(rows))
    rank = np.arange(row.size) - starts[row]
    take = rank < k
    out[row[take], rank[take]] = found[take]
    out_index[row[take], rank[take]] = at[take]
    return out, out_index


def _exclude(values: Floats, index: Ints, own: Ints, near_duplicate: float) -> Floats:
    """-inf for each question itself and its near-duplicates (and faiss' -1 padding)."""
    out = values.copy()
    out[(index == own[:, None]) | (values > near_duplicate) | (index < 0)] = -np.inf
    return out


def _contiguous(own: Ints) -> bool:
    return bool(own.size == 0 or (own[-1] - own[0] == own.size - 1 and np.all(np.diff(own) == 1)))


def _as_neighbours(best: Floats, best_index: Ints) -> Neighbours:
    mask = np.isfinite(best)
    return Neighbours(np.where(mask, best_index, 0), mask, np.where(mask, best, np.nan))


@contextmanager
def _one_omp_thread(faiss: Any, when: bool = True) -> Iterator[None]:
    """faiss on one OpenMP thread for the calling thread (if ``when``), its own setting given
    back afterwards."""
    threads = faiss.omp_get_max_threads()
    if when:
        faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


def _graph_thread(faiss: Any) -> None:
    """The thread that grows a graph: one OpenMP thread, giving way to the run's own."""
    faiss.omp_set_num_threads(1)
    give_way()


class NeighbourSearch:
    """NN_K of n questions whose unit float64 vectors ``read(start, stop)`` gives, a block of
    rows at a time (:meth:`blocks`), then the record of the search (:meth:`record`)."""

    def __init__(self, read: ColumnBlock, n: int, k: int, near_duplicate: float,
                 eligible: npt.ArrayLike | None, settings: IndexSettings | None = None,
                 block: int = 1024, column_block: int = COLUMN_BLOCK) -> None:
        if k < 0:
            raise ConfigError(f"number of neighbours must be >= 0, got {k}")
        self.read, self.n, self.k = read, n, k
        self.near_duplicate = near_duplicate
        self.eligible: Bools = (np.ones(n, dtype=bool) if eligible is None
                                else np.asarray(eligible, dtype=bool))
        self.settings = settings or IndexSettings()
        self.block, self.column_block = block, column_block
        self.kind = self.settings.resolve(n)
        self._lib = _faiss(self.kind)
        library = f"faiss {self._lib.__version__}" if self._lib is not None else "numpy"
        self._record = SearchRecord(self.settings.kind, self.kind, n, k, library=library)
        rng = np.random.default_rng(self.settings.seed)
        size = min(self.settings.recall_sample, n) if self.kind != "exact" else 0
        self._sample = np.sort(rng.choice(n, size=size, replace=False)) if size else \
            np.zeros(0, np.int64)
        self._sampled: dict[int, tuple[Floats, Bools]] = {}
        self._truth: Neighbours | None = None
        """The sampled questions' exact neighbours, once searched."""
        self._truth_behind: Future[Neighbours] | None = None
        """That search on a thread of its own, behind the caller's next work."""
        self._stop_truth = threading.Event()
        self._fed = 0
        self._growing: Any = None
        """The HNSW graph being grown from what :meth:`feed` gave, on ``_builder``."""
        self._builder: ThreadPoolExecutor | None = None
        self._adds: list[Future[None]] = []
        self._block_rows: list[npt.NDArray[np.float32]] = []

    # --- exact: blocks of rows against blocks of columns ----------------------------------

    def _exact_rows(self, rows: Floats, own: Ints) -> Neighbours:
        faiss = self._lib
        if faiss is None:
            return nearest_block(rows, int(own[0]) if own.size else 0, self.read, self.n, self.k,
                                 self.near_duplicate, self.eligible, self.column_block) \
                if _contiguous(own) else self._numpy_rows(rows, own)
        best = np.full((rows.shape[0], self.k), -np.inf)
        best_index = np.zeros((rows.shape[0], self.k), dtype=np.int64)
        queries = np.ascontiguousarray(rows, dtype=np.float32)
        for start in range(0, self.n, self.column_block):
            if self._stop_truth.is_set():  # a recall's search behind a run that failed
                raise RuntimeError("the neighbour search was closed")
            stop = min(start + self.column_block, self.n)
            keep = np.flatnonzero(self.eligible[start:stop])
            if keep.size == 0 or self.k == 0:
                continue
            columns = np.asarray(self.read(start, stop), dtype=np.float64)[keep]
            fetch = min(keep.size, self.k + MARGIN)
            _, local = faiss.knn(queries, np.ascontiguousarray(columns, dtype=np.float32), fetch,
                                 metric=faiss.METRIC_INNER_PRODUCT)
            local = np.asarray(local, dtype=np.int64)
            safe = np.maximum(local, 0)
            # the cosines in float64, as the numpy search computes them
            cos = np.einsum("rkd,rd->rk", columns[safe], rows)
            cos[local < 0] = -np.inf
            at = start + keep[safe]
            cos = _exclude(cos, at, own, self.near_duplicate)
            short = np.flatnonzero(np.isfinite(cos).sum(axis=1) < min(self.k, fetch))
            if fetch < keep.size and short.size:
                # too many dropped (itself, near-duplicates): this block in full for those rows
                whole = rows[short] @ columns.T
                whole_at = np.broadcast_to(start + keep, whole.shape)
                whole = _exclude(whole, whole_at, own[short], self.near_duplicate)
                top, top_at = merge_top(whole, np.ascontiguousarray(whole_at), self.k,
                                       distinct=True)
                cos[short], at[short] = -np.inf, 0
                cos[short, : self.k], at[short, : self.k] = top, top_at
            best, best_index = merge_top(np.concatenate([best, cos], axis=1),
                                         np.concatenate([best_index, at], axis=1), self.k)
        return _as_neighbours(best, best_index)

    # --- approximate: one index of every eligible question -------------------------------

    def _numpy_rows(self, rows: Floats, own: Ints) -> Neighbours:
        """Exact search in numpy for rows that are not one run of questions (recall samples)."""
        best = np.full((rows.shape[0], self.k), -np.inf)
        best_index = np.zeros((rows.shape[0], self.k), dtype=np.int64)
        for start in range(0, self.n, self.column_block):
            stop = min(start + self.column_block, self.n)
            cos = rows @ np.asarray(self.read(start, stop), dtype=np.float64).T
            at = np.broadcast_to(np.arange(start, stop, dtype=np.int64), cos.shape)
            cos = _exclude(cos, at, own, self.near_duplicate)
            cos[:, ~self.eligible[start:stop]] = -np.inf
            best, best_index = merge_top(np.concatenate([best, cos], axis=1),
                                         np.concatenate([best_index, at], axis=1), self.k,
                                         distinct=True)  # blocks do not overlap
        return _as_neighbours(best, best_index)

    def _new_index(self, dim: int) -> Any:
        faiss = self._lib
        s = self.settings
        if self.kind == "hnsw":
            index = faiss.IndexHNSWFlat(dim, s.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = s.ef_construction
            index.hnsw.efSearch = s.ef_search
            self._record.parameters = {"m": s.hnsw_m, "ef_construction": s.ef_construction,
                                       "ef_search": s.ef_search}
            return index
        ids = np.flatnonzero(self.eligible)
        nlist = s.nlist or max(1, min(ids.size, int(4 * math.sqrt(max(ids.size, 1)))))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.nprobe = min(s.nprobe, nlist)
        train = self._training_rows(ids, nlist)
        index.train(train)
        self._keep_quantizer = quantizer  # the IVF index does not own it in Python
        self._record.parameters = {"nlist": nlist, "nprobe": int(index.nprobe),
                                   "trained_on": int(train.shape[0])}
        return index

    def _build(self) -> tuple[Any, Ints]:
        ids = np.flatnonzero(self.eligible).astype(np.int64)
        dim = int(np.asarray(self.read(0, 1)).shape[1]) if self.n else 1
        index = self._new_index(dim)
        # a graph is linked on one thread, as feed grows it: the same graph whatever the timing
        with _one_omp_thread(self._lib, when=self.kind == "hnsw"):
            for start in range(0, self.n, self.column_block):
                stop = min(start + self.column_block, self.n)
                keep = np.flatnonzero(self.eligible[start:stop])
                if keep.size:
                    part = np.asarray(self.read(start, stop), dtype=np.float32)[keep]
                    index.add(np.ascontiguousarray(part))
        return index, ids

    def feed(self, start: int, rows: Floats, eligible: npt.ArrayLike) -> None:
        """Unit vectors of questions start..start + len(rows) and which of them are eligible,
        as they are made and in order. For ``hnsw`` the graph grows from them on a thread of
        its own, a column block at a time; the other kinds only note the eligibility (they
        read the questions when :meth:`blocks` starts)."""
        if start != self._fed:
            raise ValueError(f"questions fed out of order: {start} after {self._fed}")
        stop = start + rows.shape[0]
        self.eligible[start:stop] = np.asarray(eligible, dtype=bool)
        self._fed = stop
        if self.kind != "hnsw" or rows.shape[0] == 0:
            return
        if self._growing is None:
            self._growing = self._new_index(rows.shape[1])
            # one OpenMP thread for the graph (the setting is the calling thread's own)
            self._builder = ThreadPoolExecutor(1, thread_name_prefix="veracity-hnsw",
                                               initializer=_graph_thread, initargs=(self._lib,))
        at = start
        while at < stop:  # split at the column blocks that _build adds one by one
            upto = min(stop, (at // self.column_block + 1) * self.column_block)
            keep = np.flatnonzero(self.eligible[at:upto])
            if keep.size:
                self._block_rows.append(np.asarray(rows[at - start:upto - start][keep],
                                                   dtype=np.float32))
            at = upto
            if at % self.column_block == 0 or at == self.n:
                self._add_block()

    def _add_block(self) -> None:
        if self._block_rows and self._builder is not None:
            block = np.ascontiguousarray(np.concatenate(self._block_rows))
            self._adds.append(self._builder.submit(self._growing.add, block))
        self._block_rows = []

    def _index(self, meanwhile: Iterator[None] | None = None) -> tuple[Any, Ints]:
        """The approximate index of every eligible question: the graph :meth:`feed` grew
        (once its last block is in), or one built now from the questions' file. While the
        graph's last blocks are linked, ``meanwhile`` is advanced a step at a time."""
        if self._growing is None or self._fed != self.n:
            self.close()
            return self._build()
        self._add_block()
        index = self._growing
        try:
            if meanwhile is None and self._sample.size \
                    and any(not add.done() for add in self._adds):
                # the graph is still linking: meanwhile, on this thread's idle core only, the
                # exact search the recall is measured against
                with _one_omp_thread(self._lib):
                    self._exact_truth()
            while meanwhile is not None and not all(add.done() for add in self._adds):
                if next(meanwhile, False) is False:  # the caller's work is all done
                    break
            for add in self._adds:
                add.result()
        finally:
            self.close()
        return index, np.flatnonzero(self.eligible).astype(np.int64)

    def stop(self) -> None:
        """Stop all this search runs on threads of its own, for a run that failed: the
        graph (:meth:`close`), and an exact search for the recall left behind the blocks, at
        its next block of columns."""
        self._stop_truth.set()
        self.close()

    def close(self) -> None:
        """Stop growing the graph: adds not yet started are dropped, with the graph (a search
        then builds the index from the questions' file)."""
        if self._builder is not None:
            self._builder.shutdown(wait=True, cancel_futures=True)
        self._builder, self._adds, self._block_rows, self._growing = None, [], [], None

    def _training_rows(self, ids: Ints, nlist: int) -> npt.NDArray[np.float32]:
        """At most 64 x nlist eligible questions, spread evenly, for the k-means of IVF."""
        want = min(ids.size, 64 * nlist)
        chosen = ids[np.linspace(0, ids.size - 1, want).astype(np.int64)] if want else ids
        rows = [np.asarray(self.read(int(i), int(i) + 1), dtype=np.float32)[0] for i in chosen]
        return np.ascontiguousarray(np.stack(rows)) if rows else np.zeros((0, 1), np.float32)

    def _approximate_rows(self, index: Any, ids: Ints, rows: Floats, own: Ints) -> Neighbours:
        """The index's K best for each row after the exclusions; a row that loses too many
        candidates to them asks again for four times as many (the graph searched as widely),
        up to ``FETCH_LIMIT``, and past that is searched exactly: memory stays bounded by the
        block whatever the number of near-duplicates."""
        queries = np.ascontiguousarray(rows, dtype=np.float32)
        fetch = min(ids.size, self._first_fetch())
        best = np.full((rows.shape[0], self.k), -np.inf)
        best_index = np.zeros((rows.shape[0], self.k), dtype=np.int64)
        todo = np.arange(rows.shape[0])
        while todo.size and fetch > 0:
            values, labels = index.search(queries[todo], fetch, params=self._params(fetch))
            labels = np.asarray(labels, dtype=np.int64)
            at = np.where(labels >= 0, ids[np.maximum(labels, 0)], -1)
            cos = _exclude(np.asarray(values, dtype=np.float64), at, own[todo],
                           self.near_duplicate)
            top, top_at = merge_top(cos, at, self.k)
            best[todo], best_index[todo] = top, top_at
            short = np.isfinite(top).sum(axis=1) < self.k
            if fetch >= ids.size or not short.any():
                break
            todo = todo[short]
            if fetch >= FETCH_LIMIT:  # crowded by near-duplicates: exactly, row by row block
                exact = self._exact_rows(rows[todo], own[todo])
                best[todo] = np.where(exact.mask, exact.cosine, -np.inf)
                best_index[todo] = exact.index
                self._record.searched_exactly += int(todo.size)
                break
            fetch = min(ids.size, fetch * WIDEN)
        return _as_neighbours(best, best_index)

    def _first_fetch(self) -> int:
        """Candidates a row first asks for: K + ``MARGIN``, or for a graph as many as its
        search keeps anyway (half of ef_search, as :meth:`_params` looks twice as wide): the
        graph visits the same questions whether it returns 33 or 64 of them, and a row
        crowded by near-duplicates then seldom needs a second, wider search. On 300,000
        varied questions (K 25, threshold 0.8, ef_search 128) one row in three asked again
        with 33; with 64 the search took 25 % less CPU for recall 0.99184 (0.99288)."""
        if self.kind == "hnsw":
            return max(self.k + MARGIN, min(self.settings.ef_search // 2, FETCH_LIMIT))
        return self.k + MARGIN

    def _params(self, fetch: int) -> Any:
        """Search parameters that look at least twice as wide as the answers asked for."""
        faiss = self._lib
        if self.kind == "hnsw":
            return faiss.SearchParametersHNSW(efSearch=max(self.settings.ef_search, 2 * fetch))
        return None

    # --- the search ----------------------------------------------------------------------

    def blocks(self, meanwhile: Iterator[None] | None = None
               ) -> Iterator[tuple[int, Neighbours]]:
        """(first row, NN_K of rows first..first + block) for every block of rows.
        ``meanwhile``: work the calling thread does a step at a time instead of waiting for a
        graph :meth:`feed` is still linking (nothing else runs it)."""
        index: Any = None
        ids = np.zeros(0, np.int64)
        if self.kind != "exact" and self.n:
            index, ids = self._index(meanwhile)
        for start in range(0, self.n, self.block):
            stop = min(start + self.block, self.n)
            rows = np.array(self.read(start, stop), dtype=np.float64, copy=True)
            own = np.arange(start, stop, dtype=np.int64)
            nb = (self._exact_rows(rows, own) if index is None else
                  self._approximate_rows(index, ids, rows, own))
            for row in self._sample[(self._sample >= start) & (self._sample < stop)]:
                self._sampled[int(row)] = (nb.cosine[row - start], nb.mask[row - start])
            yield start, nb
        del index
        if meanwhile is not None and self._truth is None and self._sample.size:
            self._search_truth_behind()
        else:
            self._measure_recall()

    def _search_truth_behind(self) -> None:
        """The exact search the recall is measured against, on a thread of its own (one
        OpenMP thread, giving way to the run's own) behind whatever the caller does next:
        given work to do while the graph linked, the caller had no idle core for it then.
        :meth:`record` waits for it."""
        behind = ThreadPoolExecutor(1, thread_name_prefix="veracity-recall",
                                    initializer=_graph_thread, initargs=(self._lib,))
        self._truth_behind = behind.submit(self._exact_truth)
        behind.shutdown(wait=False)

    def _measure_recall(self) -> None:
        if self.kind == "exact":
            self._record.recall_at_k = 1.0
            return
        if not self._sample.size:
            return
        exact = self._exact_truth()
        found = np.stack([self._sampled[int(i)][0] for i in self._sample])
        found_mask = np.stack([self._sampled[int(i)][1] for i in self._sample])
        self._record.recall_at_k = round(recall_at_k(np.nan_to_num(found, nan=-np.inf), found_mask,
                                                     np.nan_to_num(exact.cosine, nan=-np.inf),
                                                     exact.mask), 6)
        self._record.recall_questions = int(self._sample.size)

    def _exact_truth(self) -> Neighbours:
        """The sampled questions' exact neighbours (searched once), a block of rows at a time:
        this may run while the graph is still in memory, so its own arrays stay small."""
        if self._truth is None:
            parts = []
            for first in range(0, self._sample.size, TRUTH_BLOCK):
                own = self._sample[first:first + TRUTH_BLOCK].astype(np.int64)
                rows = np.concatenate([np.asarray(self.read(int(i), int(i) + 1),
                                                  dtype=np.float64) for i in own])
                parts.append(self._exact_rows(rows, own))
            self._truth = Neighbours(np.concatenate([p.index for p in parts]),
                                     np.concatenate([p.mask for p in parts]),
                                     np.concatenate([p.cosine for p in parts]))
        return self._truth

    def record(self, wait: bool = True) -> SearchRecord:
        """What the search did; complete once :meth:`blocks` has been read to its end and,
        with ``wait``, the recall searched behind it is measured (without ``wait`` its
        recall_at_k may still be None)."""
        if wait and self._truth_behind is not None:
            behind, self._truth_behind = self._truth_behind, None
            try:
                self._truth = behind.result()
            except Exception as exc:  # the neighbours stand; only their check is missing
                log.warning("%s", terminal_safe(
                    f"the recall of the neighbour search was not measured: {exc}"))
            else:
                self._measure_recall()
        return self._record


def search_all(vectors: npt.ArrayLike, k: int, near_duplicate: float,
               eligible: npt.ArrayLike | None, settings: IndexSettings | None = None
               ) -> tuple[Neighbours, SearchRecord]:
    """NN_K of every row of an in-memory matrix (rows scaled to unit length first)."""
    from veracity.methods.fewl.core import unit_rows

    unit = unit_rows(vectors)
    search = NeighbourSearch(lambda a, b: unit[a:b], unit.shape[0], k, near_duplicate,
                             eligible, settings)
    parts = [nb for _, nb in search.blocks()]
    if not parts:
        empty = Neighbours(np.zeros((0, k), np.int64), np.zeros((0, k), bool), np.zeros((0, k)))
        return empty, search.record()
    return (Neighbours(np.concatenate([p.index for p in parts]),
                       np.concatenate([p.mask for p in parts]),
                       np.concatenate([p.cosine for p in parts])), search.record())
