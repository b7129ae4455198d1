"""FEWL runs in bounded memory: chunks of questions through generate, embed, score and write.

What models write (answers, references, pairs) is asked a chunk of questions at a time, by
the same functions as the in-memory run, and kept in SQLite tables by question position;
answers, references and pairs given as files are indexed once into the same SQLite file and
looked up by id (or question) a chunk at a time. The question embeddings go, chunk by chunk,
into a float32 file read back a block at a time, over which the K nearest questions are found
by blocked matrix products (the row and column blocks of
:func:`veracity.methods.fewl.core.select_neighbours`, so the same digits), or K random ones
drawn as :func:`veracity.methods.fewl.neighbours.random.random_neighbours` draws them, and kept in files
too; so are the references' embeddings, made once. Each chunk is then scored together with
the neighbours it needs, its records appended to samples.jsonl (and references.jsonl,
pairs.jsonl, answers/) as they come, and the aggregates kept as exact running sums
(:class:`~veracity.methods.fewl.running.RunningFewl`).
Every generation and embedding is cached as it is made, so a rerun after an interruption
calls no model and embeds nothing twice. The tables and files live in the run directory while
it runs and are removed at the end.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from veracity.client import CachedEmbedder
from veracity.data.labelled import pair_rows, text_rows
from veracity.data.stored import take
from veracity.errors import ConfigError, DataError
from veracity.heap import frozen_heap
from veracity.methods.fewl.core import (
    FewlScores,
    LentReferences,
    Neighbours,
    table_texts,
    unit_rows,
)
from veracity.methods.fewl.neighbours.core import IndexSettings, NeighbourSearch
from veracity.methods.fewl.neighbours.random import random_neighbour_blocks
from veracity.methods.fewl.pairs import Pair, PairOutcome
from veracity.methods.fewl.ranking import RankTally
from veracity.methods.fewl.records import FewlRecord, FewlResults
from veracity.methods.fewl.run import (
    AnswerSource,
    FewlSettings,
    Prepared,
    answers_file,
    answers_from,
    build_records,
    fewl_results,
    pairs_for,
    pairs_model,
    question_spec,
    references_for,
    run_config,
    score_sets,
    side_files,
)
from veracity.methods.fewl.running import RunningFewl
from veracity.methods.fewl.similarity import (
    EmbeddingSimilarity,
    EmbeddingTable,
    Similarity,
    load_similarity,
    unit_vectors,
)
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.space import writing
from veracity.streaming import chunks, one_bar
from veracity.types import Item

CHUNK = 1024
"""Questions scored at once (with the neighbours they need)."""
GENERATE_CHUNK = 256
"""Questions whose answers, references and pairs are asked of the models at once."""
TAKE_PIECE = 256
"""Rows :meth:`RowFile.take` gathers from the mapped file before letting its pages go."""
INDEX_DIR = "fewl-index.tmp"
"""The work folder's name before it was named per process (``fewl-index.PID.tmp``)."""


def work_folders(out: Path) -> list[Path]:
    """The work folders a streamed run left in ``out`` (none once it finished)."""
    return sorted(p for p in (*out.glob("fewl-index.*.tmp"), out / INDEX_DIR) if p.is_dir())


_LOOKUP = 400  # keys per SQL query (under SQLite's bound on parameters)
_ANSWER_FIELDS = ("answers", "candidates", "answer")


def streamable(sources: Sequence[AnswerSource], settings: FewlSettings) -> bool:
    """Whether a run can go chunk by chunk: answers, references and pairs from models or
    files (not answers handed over in memory), with nearest or random neighbours."""
    return (all(s.path is not None or s.model is not None for s in sources)
            and settings.neighbours_mode in ("nearest", "random"))


class KeyedRows:
    """id (or question) -> values of one JSONL file, in an SQLite table: lines with the same
    key add up in file order, and a question is looked up by its id, else by its text (as
    :func:`veracity.data.labelled.read_texts` and ``read_pairs`` do)."""

    def __init__(self, db: sqlite3.Connection, table: str, path: Path,
                 rows: Iterable[tuple[str, list[Any]]]) -> None:
        self.db, self.table, self.path = db, table, path
        db.execute(f"CREATE TABLE {table} (seq INTEGER PRIMARY KEY, key TEXT, value TEXT)")
        count = 0
        for part in chunks(rows, 4096):
            db.executemany(f"INSERT INTO {table} (key, value) VALUES (?, ?)",
                           [(key, json.dumps(values, ensure_ascii=False)) for key, values in part])
            count += len(part)
        if count == 0:
            raise DataError(f"{path}: no records")
        db.execute(f"CREATE INDEX {table}_key ON {table} (key)")
        db.commit()

    def get(self, items: Sequence[Item]) -> list[list[Any] | None]:
        """The values of each question, None where the file has none."""
        keys = list(dict.fromkeys([k for item in items for k in (item.id, item.question)]))
        found: dict[str, list[Any]] = {}
        for start in range(0, len(keys), _LOOKUP):
            part = keys[start:start + _LOOKUP]
            marks = ",".join("?" * len(part))
            for key, value in self.db.execute(
                    f"SELECT key, value FROM {self.table} WHERE key IN ({marks}) ORDER BY seq",
                    part):
                found.setdefault(key, []).extend(json.loads(value))
        return [found.get(item.id, found.get(item.question)) for item in items]

    def texts(self, items: Sequence[Item], what: str) -> list[list[str]]:
        """Stripped texts of each question; a DataError naming the first one missing."""
        out = []
        for item, values in zip(items, self.get(items), strict=True):
            if values is None:
                raise DataError(f"{self.path}: no {what} for question '{item.id}'")
            out.append([str(v).strip() for v in values])
        return out


class Generated:
    """The values of each question by position, appended a chunk at a time as a model
    writes them (a question's own row whatever its id: duplicate ids stay apart)."""

    def __init__(self, db: sqlite3.Connection, table: str) -> None:
        self.db, self.table, self.rows = db, table, 0
        db.execute(f"CREATE TABLE {table} (seq INTEGER PRIMARY KEY, value TEXT)")

    def append(self, values: Sequence[Any]) -> None:
        self.db.executemany(f"INSERT INTO {self.table} (seq, value) VALUES (?, ?)",
                            [(self.rows + i, json.dumps(v, ensure_ascii=False))
                             for i, v in enumerate(values)])
        self.db.commit()
        self.rows += len(values)

    def get(self, positions: Sequence[int]) -> list[Any]:
        """The values at these positions, in that order."""
        found: dict[int, Any] = {}
        for start in range(0, len(positions), _LOOKUP):
            part = list(dict.fromkeys(positions[start:start + _LOOKUP]))
            marks = ",".join("?" * len(part))
            for seq, value in self.db.execute(
                    f"SELECT seq, value FROM {self.table} WHERE seq IN ({marks})", part):
                found[seq] = json.loads(value)
        return [found[p] for p in positions]


Column = KeyedRows | Generated


def _texts(column: Column, positions: Sequence[int], items: Sequence[Item],
           what: str) -> list[list[str]]:
    if isinstance(column, KeyedRows):
        return column.texts(items, what)
    return [list(v) for v in column.get(positions)]


class _Inputs:
    """The run's answers, references and pairs: files indexed once, and what models write,
    generated chunk by chunk into tables of their own (:meth:`generate`)."""

    def __init__(self, db: sqlite3.Connection, sources: Sequence[AnswerSource],
                 settings: FewlSettings) -> None:
        self.answers: dict[str, Column] = {
            s.name: KeyedRows(db, f"answers_{i}", s.path,
                              text_rows(s.path, _ANSWER_FIELDS, stream=True))
            if s.path is not None else Generated(db, f"answers_{i}")
            for i, s in enumerate(sources)}
        refs_file, pairs_file = settings.references_file, settings.pairs_file
        self.references: Column = (
            Generated(db, "refs") if refs_file is None else
            KeyedRows(db, "refs", refs_file, text_rows(refs_file, ("references",), stream=True)))
        self.pairs: Column = (
            Generated(db, "pairs") if pairs_file is None else
            KeyedRows(db, "pairs", pairs_file, pair_rows(pairs_file, stream=True)))
        self.reference_names: list[str] | None = None
        """The reference models' slots, when they are generated."""

    def generated(self) -> bool:
        return any(isinstance(c, Generated)
                   for c in (*self.answers.values(), self.references, self.pairs))

    def check_files(self, items: Sequence[Item], chunk_size: int) -> None:
        """Every question has its answers and references in the files given: a DataError
        naming the first one missing, before any model is called."""
        for start in range(0, len(items), chunk_size):
            part = items[start:start + chunk_size]
            for column in (*self.answers.values(), self.references):
                if isinstance(column, KeyedRows):
                    column.texts(part, "references" if column is self.references else "answers")

    def generate(self, items: Sequence[Item], sources: Sequence[AnswerSource],
                 settings: FewlSettings, ctx: Context, chunk_size: int) -> None:
        """The model stages of :func:`~veracity.methods.fewl.modes.run_fewl` (answers,
        references, pairs: the same functions and requests) a chunk of questions at a time;
        every generation is cached as it arrives."""
        for start in range(0, len(items), chunk_size):
            part = items[start:start + chunk_size]
            for source in sources:
                column = self.answers[source.name]
                if isinstance(column, Generated):
                    column.append([(a[0] if a else None)
                                   for a in answers_from(source, part, settings, ctx)])
            if isinstance(self.references, Generated):
                refs, self.reference_names = references_for(part, settings, ctx)
                self.references.append(refs)
            if isinstance(self.pairs, Generated):
                got = pairs_for(part, settings, ctx)
                self.pairs.append([[[[p.wrong, p.corrected] for p in pairs], raw, attempts, error]
                                   for pairs, raw, attempts, error in zip(
                                       got.pairs, got.raw, got.attempts, got.errors,
                                       strict=True)])

    def check_answers(self, positions: Sequence[int], items: Sequence[Item]) -> None:
        for column in self.answers.values():
            _texts(column, positions, items, "answers")

    def references_of(self, positions: Sequence[int], items: Sequence[Item]) -> list[list[str]]:
        return _texts(self.references, positions, items, "references")

    def pair_counts(self, positions: Sequence[int], items: Sequence[Item]) -> list[int]:
        if isinstance(self.pairs, KeyedRows):
            return [len(found or ()) for found in self.pairs.get(items)]
        return [len(row[0]) for row in self.pairs.get(positions)]

    def answer_sets(self, positions: Sequence[int],
                    items: Sequence[Item]) -> dict[str, list[str | None]]:
        out: dict[str, list[str | None]] = {}
        for name, column in self.answers.items():
            if isinstance(column, KeyedRows):
                out[name] = [(a[0] if a else None) for a in column.texts(items, "answers")]
            else:
                out[name] = column.get(positions)
        return out

    def pair_outcome(self, positions: Sequence[int], items: Sequence[Item]) -> PairOutcome:
        """The pairs of these questions as :func:`~veracity.methods.fewl.run.pairs_for` gave
        them: from the file, or as generated (raw replies, attempts, errors)."""
        if isinstance(self.pairs, KeyedRows):
            pairs = [[Pair(str(w), str(c)) for w, c in (found or [])]
                     for found in self.pairs.get(items)]
            missing = "not in the pairs file"
            return PairOutcome(pairs, [""] * len(items), [0] * len(items),
                               [None if p else missing for p in pairs])
        rows = self.pairs.get(positions)
        return PairOutcome([[Pair(w, c) for w, c in row[0]] for row in rows],
                           [row[1] for row in rows], [row[2] for row in rows],
                           [row[3] for row in rows])


class RowFile:
    """A matrix of fixed-width rows appended to a file and read back by row ranges with plain
    reads, or by row numbers from a mapping whose pages are let go as it goes: what was read
    is the process's memory only while it is used, so the resident size does not grow with
    the file."""

    def __init__(self, path: Path, dtype: Any, width: int | None = None) -> None:
        self.path, self.dtype, self.width = path, np.dtype(dtype), width
        self.rows = 0
        path.write_bytes(b"")

    def append(self, rows: npt.ArrayLike) -> None:
        arr = np.ascontiguousarray(rows, dtype=self.dtype)
        if self.width is None:
            self.width = arr.shape[1]
        with self.path.open("ab") as fh:
            fh.write(arr.tobytes())
        self.rows += arr.shape[0]

    def read(self, start: int, stop: int) -> npt.NDArray[Any]:
        """Rows start..stop, one read."""
        width = self.width or 0
        count = (stop - start) * width
        if count == 0:
            return np.zeros((stop - start, width), dtype=self.dtype)
        return np.fromfile(self.path, dtype=self.dtype, count=count,
                           offset=start * width * self.dtype.itemsize).reshape(-1, width)

    def take(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """Rows by number, in that order, gathered from a mapping of the file
        ``TAKE_PIECE`` rows at a time; after each piece the mapped pages are let go
        (``MADV_DONTNEED``), since the kernel maps the pages around each one touched and a
        chunk's neighbours touch pages all over the file: the resident size grows by a
        piece's pages, not by the file. Where the platform cannot let pages go, each run of
        consecutive rows is one positioned read instead."""
        width = self.width or 0
        if rows.size == 0 or not self.rows:
            return np.zeros((rows.size, width), dtype=self.dtype)
        if int(rows.max()) >= self.rows or int(rows.min()) < 0:
            raise DataError(f"{self.path}: rows {int(rows.max())}.. are past its end")
        out = np.empty((rows.size, width), dtype=self.dtype)
        length = self.rows * width * self.dtype.itemsize
        with self.path.open("rb", buffering=0) as fh:
            if os.fstat(fh.fileno()).st_size < length:  # a mapping past the end would crash
                raise DataError(f"{self.path}: shorter than its {self.rows} rows")
            if not hasattr(mmap, "MADV_DONTNEED"):
                return self._read_runs(fh.fileno(), rows, out)
            mapped = mmap.mmap(fh.fileno(), length, access=mmap.ACCESS_READ)
        with mapped:
            whole = np.frombuffer(mapped, dtype=self.dtype).reshape(-1, width)
            try:
                for first in range(0, rows.size, TAKE_PIECE):
                    # bounds checked above; "raise" would gather into a buffer, then copy
                    np.take(whole, rows[first:first + TAKE_PIECE], axis=0,
                            out=out[first:first + TAKE_PIECE], mode="clip")
                    mapped.madvise(mmap.MADV_DONTNEED)
            finally:
                del whole  # the mapping closes only once no array looks into it
        return out

    def _read_runs(self, fd: int, rows: npt.NDArray[np.int64],
                   out: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Each run of consecutive rows one positioned read, straight into ``out``."""
        size = out.shape[1] * self.dtype.itemsize
        view = memoryview(out.data).cast("B")
        cuts = np.flatnonzero(np.diff(rows) != 1) + 1
        firsts = np.concatenate([[0], cuts]).astype(np.int64)
        lasts = np.concatenate([cuts, [rows.size]]).astype(np.int64)
        for first, last, at in zip((firsts * size).tolist(), (lasts * size).tolist(),
                                   (rows[firsts] * size).tolist(), strict=True):
            if os.preadv(fd, [view[first:last]], at) != last - first:
                raise DataError(f"{self.path}: shorter than its {self.rows} rows")
        return out


class _Index:
    """Question vectors, eligibility and NN_K of every question, in files."""

    def __init__(self, work: Path, items: Sequence[Item], inputs: _Inputs,
                 settings: FewlSettings, ctx: Context, chunk_size: int,
                 similarity: Similarity, ahead: Ahead | None = None) -> None:
        """``ahead``: work for the main thread while an approximate index's graph is still
        being linked after every question is embedded (see :func:`embedding_ahead`)."""
        n, k = len(items), settings.neighbours
        embedder = ctx.embedder(question_spec(settings))
        self.eligible = np.zeros(n, dtype=bool)
        self.widths = (0, 0)
        questions = RowFile(work / "questions.f32", np.float32)
        self.questions = questions
        """The question vectors, as the embedder gave them."""
        # every reference embedded once, here, into a file, scaled to unit length as a table
        # scales its rows: a chunk reads its neighbours' from it instead of embedding and
        # scaling them again (each time they are a neighbour)
        by_vector = similarity.embedder if isinstance(similarity, EmbeddingSimilarity) else None
        self.ref_offsets = np.zeros(n + 1, dtype=np.int64)
        self.ref_vectors = RowFile(work / "references.f32", np.float32) if by_vector else None
        self.ref_columns = RowFile(work / "references.col", np.int16, 1)
        """The reference slot of each row of ``ref_vectors`` (unit vectors)."""

        def read(a: int, b: int) -> npt.NDArray[np.float64]:
            return unit_rows(questions.read(a, b))

        self.search: NeighbourSearch | None = None
        if settings.neighbours_mode != "random":
            # made first, so that an approximate index grows while the questions are embedded
            self.search = NeighbourSearch(read, n, k, settings.near_duplicate, self.eligible,
                                          IndexSettings(settings.neighbours_index))
        try:
            self._embed(items, inputs, embedder, by_vector, chunk_size)
        except BaseException:
            if self.search is not None:
                self.search.close()  # no graph keeps growing behind a failed chunk
            raise
        self.index = RowFile(work / "neighbours.i64", np.int64, k)
        self.mask = RowFile(work / "neighbours.mask", np.bool_, k)
        self.cosine = RowFile(work / "neighbours.f64", np.float64, k)
        found = (self.search.blocks(None if ahead is None else ahead(self))
                 if self.search is not None else
                 random_neighbour_blocks(read, n, k, settings.near_duplicate, self.eligible,
                                         settings.stochastic_seed()))
        for _, nb in found:
            self.index.append(nb.index)
            self.mask.append(nb.mask)
            self.cosine.append(nb.cosine)

    def _embed(self, items: Sequence[Item], inputs: _Inputs, embedder: CachedEmbedder,
               by_vector: CachedEmbedder | None, chunk_size: int) -> None:
        """Every question's vector and eligibility, and every reference's vector, a chunk at
        a time (each question vector also fed to the neighbour search as it is made)."""
        for start in range(0, len(items), chunk_size):
            part = items[start:start + chunk_size]
            at = range(start, start + len(part))
            inputs.check_answers(at, part)  # every question answered, before any scoring
            refs = inputs.references_of(at, part)
            self.eligible[start:start + len(part)] = [any(r.strip() for r in row)
                                                      for row in refs]
            self.widths = (max(self.widths[0], *(len(r) for r in refs)),
                           max(self.widths[1], *inputs.pair_counts(at, part)))
            vectors = np.asarray(embedder.embed([item.question for item in part]),
                                 dtype=np.float32)
            self.questions.append(vectors)
            if self.search is not None:
                self.search.feed(start, unit_rows(vectors), self.eligible[start:start + len(part)])
            if by_vector is not None and self.ref_vectors is not None:
                flat = [t for row in refs for t in row if t]
                counts = np.cumsum([sum(1 for t in row if t) for row in refs])
                self.ref_offsets[start + 1:start + len(part) + 1] = self.ref_offsets[start] + counts
                if flat:
                    self.ref_vectors.append(unit_vectors(by_vector.embed(flat)))
                    self.ref_columns.append(np.array([[c for row in refs
                                                       for c, t in enumerate(row) if t]]).T)

    def lent_references(self, positions: Sequence[int], first_row: int) -> LentReferences | None:
        """The reference vectors of these questions, from the index file, for the rows
        first_row, first_row + 1, ... of a chunk: its neighbours lend their references'
        vectors, so their texts are not read back. None without the file."""
        if self.ref_vectors is None or not self.ref_vectors.rows:
            return None
        at = np.asarray(positions, dtype=np.int64)
        first, last = self.ref_offsets[at], self.ref_offsets[at + 1]
        rows = _spans(first, last)
        return LentReferences(first_row + np.repeat(np.arange(at.size, dtype=np.int64), last - first),
                              self.ref_columns.take(rows)[:, 0].astype(np.int64),
                              self.ref_vectors.take(rows), scaled=True)

    def described(self, final: bool = True) -> dict[str, Any]:
        """run.json's record of the nearest-neighbour search (none for random neighbours);
        not ``final``: as known now (a recall searched behind the scoring is not yet)."""
        return {} if self.search is None else {
            "neighbour_search": self.search.record(wait=final).as_dict()}

    def close(self) -> None:
        """Stop what the neighbour search still runs behind the scoring."""
        if self.search is not None:
            self.search.stop()


Ahead = Callable[["_Index"], Iterator[None]]
"""The index whose questions and references are embedded -> work done a step at a time."""


def embedding_ahead(items: Sequence[Item], inputs: _Inputs, similarity: Similarity,
                    chunk_size: int) -> Ahead | None:
    """The embedding each chunk's scoring will ask for, chunk after chunk from the first, a
    step per chunk: while a graph is still being linked, the main thread embeds (into the
    cache) what the scoring would embed later, instead of waiting. Each step makes the very
    call the chunk's scoring makes (:func:`_primed` over
    :func:`~veracity.methods.fewl.core.table_texts`, the scoring's texts in its order), so
    the embedder sees the same texts in the same batches and every vector is the same; the
    scoring then finds them in the cache (and counts the requests; its cache hits include
    the vectors embedded ahead that the embedder's memory no longer holds). None (nothing
    ahead) without an embedding similarity that caches its vectors: there the scoring's own
    embedding could not be reused. A run whose chunks embed anything else between scorings
    (a ranking's labelled answers) should not use it, as the order of the embedder's calls
    would change."""
    if not isinstance(similarity, EmbeddingSimilarity) or similarity.embedder.cache is None:
        return None

    def steps(index: _Index) -> Iterator[None]:
        for start in range(0, len(items), chunk_size):
            at = list(range(start, min(start + chunk_size, len(items))))
            part = take(items, at)
            refs = inputs.references_of(at, part)
            pairs = [[(p.wrong, p.corrected) for p in row]
                     for row in inputs.pair_outcome(at, part).pairs]
            texts = table_texts(refs, pairs, inputs.answer_sets(at, part))
            _primed(similarity, index, at, refs, counted=False).table(texts)
            yield

    return steps


class _Primed:
    """An embedding similarity whose table takes the vectors it is given (the references'
    from the index file: the embedder's float32 vectors as :func:`unit_vectors` scaled
    them) and embeds the rest."""

    def __init__(self, base: EmbeddingSimilarity, known: dict[str, npt.NDArray[np.float32]],
                 counted: bool = True) -> None:
        self.base, self.known, self.spec = base, known, base.spec
        self.counted = counted
        """Not: the embedding is done ahead of the scoring, which counts its requests."""

    def describe(self) -> dict[str, Any]:
        return self.base.describe()

    def table(self, texts: Sequence[str]) -> EmbeddingTable:
        missing = [t for t in texts if t not in self.known]
        # scaled as the known ones were (each row on its own, so the digits are a table's)
        got = dict(zip(missing, unit_vectors(self.base.embedder.embed(missing, self.counted)),
                       strict=True)) if missing else {}
        if not texts:
            return EmbeddingTable(np.zeros((0, 0), np.float32), self.base.mapping)
        return EmbeddingTable(np.stack([self.known[t] if t in self.known else got[t]
                                        for t in texts]), self.base.mapping, scaled=True)


def _primed(similarity: Similarity, index: _Index, wanted: list[int],
            refs: list[list[str]], counted: bool = True) -> Similarity:
    """The similarity a chunk scores with: reference vectors from the index where it has them
    (not ``counted``: made ahead of the scoring, see :func:`embedding_ahead`)."""
    if index.ref_vectors is None or not index.ref_vectors.rows \
            or not isinstance(similarity, EmbeddingSimilarity):
        return similarity
    texts = [t for row in refs for t in row if t]
    at = np.asarray(wanted, dtype=np.int64)
    vectors = index.ref_vectors.take(_spans(index.ref_offsets[at], index.ref_offsets[at + 1]))
    return _Primed(similarity, dict(zip(texts, vectors, strict=True)), counted)


def _spans(first: npt.NDArray[np.int64], last: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The rows first[i]..last[i] of every i, one after another."""
    return np.repeat(first - np.cumsum(last - first) + (last - first), last - first) \
        + np.arange(int((last - first).sum()))


def _local(items: Sequence[Item], start: int, stop: int,
           index: _Index) -> tuple[list[int], Neighbours]:
    """The questions a chunk needs (its own, then the other neighbours of its questions) and
    its neighbours renumbered into that list."""
    nb_index = index.index.read(start, stop)
    nb_mask = index.mask.read(start, stop)
    nb_cosine = index.cosine.read(start, stop)
    others = np.array(sorted(set(nb_index[nb_mask].tolist()) - set(range(start, stop))),
                      dtype=np.int64)
    wanted = list(range(start, stop)) + others.tolist()
    size = stop - start
    inside = (nb_index >= start) & (nb_index < stop)
    local = np.where(inside, nb_index - start, size + np.searchsorted(others, nb_index))
    k = nb_index.shape[1]
    pad = others.size
    return wanted, Neighbours(
        np.concatenate([np.where(nb_mask, local, 0), np.zeros((pad, k), np.int64)]),
        np.concatenate([nb_mask, np.zeros((pad, k), bool)]),
        np.concatenate([nb_cosine, np.full((pad, k), np.nan)]))


class ChunkTally(Protocol):
    """Counts a streamed run keeps beside its records, fed a chunk of questions at a time."""

    def add(self, items: Sequence[Item], answer_sets: dict[str, list[str | None]],
            recs: list[FewlRecord], scores: FewlScores, similarity: Similarity) -> None:
        """One chunk: its questions, answers, records and scores (rows 0..len(items)-1)."""


Labels = Callable[[Sequence[int]], list[tuple[str, list[str]]]]
"""Positions -> the labelled (better, worse answers) of those questions."""
GivenAnswers = Callable[[int, int], dict[str, list[str | None]]]
"""start, stop -> answer sets of questions start..stop that come with the items."""


def _scored_chunks(items: Sequence[Item], inputs: _Inputs, index: _Index,
                   similarity: Similarity, names: list[str], settings: FewlSettings,
                   chunk_size: int, tally: ChunkTally | None, given: GivenAnswers | None = None,
                   labels: Labels | None = None,
                   variants: bool = False) -> Iterator[list[FewlRecord]]:
    """Records of each chunk; ``given`` adds answer sets, ``labels`` the labelled answers
    of ideal λ, ``variants`` the ablations (as ``fewl validate`` scores)."""
    for start in range(0, len(items), chunk_size):
        stop = min(start + chunk_size, len(items))
        wanted, neighbours = _local(items, start, stop, index)
        local = take(items, wanted)  # a store reads the scattered neighbours in few queries
        size = stop - start
        sets = inputs.answer_sets(wanted[:size], local[:size])
        if given is not None:
            sets |= given(start, stop)
        answer_sets = {name: values + [None] * (len(local) - size)
                       for name, values in sets.items()}
        # the neighbours lend their references only: no answers, no pairs (one empty list,
        # read only, for all their rows: a list each is garbage the collector scans)
        own = inputs.pair_outcome(wanted[:size], local[:size])
        others = len(local) - size
        pairs = PairOutcome(own.pairs + [[]] * others,
                            own.raw + [""] * others, own.attempts + [0] * others,
                            own.errors + [None] * others)
        refs = inputs.references_of(wanted[:size], local[:size])
        lent = index.lent_references(wanted[size:], size) if others else None
        refs += ([[]] * others if lent is not None
                 else inputs.references_of(wanted[size:], local[size:]))
        prep = Prepared(refs, names, pairs,
                        _primed(similarity, index, wanted[:size], refs[:size]), neighbours)
        scores = score_sets(local, answer_sets, prep, settings,
                            labelled=None if labels is None else labels(wanted),
                            widths=index.widths, scored=size, lent=lent)
        records = build_records(local, answer_sets, prep, scores, settings,
                                variants=variants, count=size)
        if tally is not None:
            tally.add(local[:size], sets, records, scores, prep.similarity)
        yield records


def _total(items: Sequence[Item], sources: Sequence[AnswerSource], settings: FewlSettings,
           inputs: _Inputs) -> int | None:
    """The requests the model stages send; None when pair retries make it unknown."""
    n = len(items)
    total = n * sum(1 for s in sources if isinstance(inputs.answers[s.name], Generated))
    if isinstance(inputs.references, Generated):
        per_question = 1 if settings.reference_mode == "one-call" else settings.reference_samples
        total += n * per_question * len(settings.references)
    if isinstance(inputs.pairs, Generated):
        if settings.pairs.retries:
            return None
        total += n
    return total


def reference_names(inputs: _Inputs, settings: FewlSettings, index: _Index) -> list[str]:
    """The reference slots' names: the reference models', or the references file's columns."""
    if inputs.reference_names is not None:
        return inputs.reference_names
    assert settings.references_file is not None
    return [f"{settings.references_file.name}#{j}" for j in range(index.widths[0])]


def fresh_work(out: Path | None) -> Path:
    """The run's work folder, named for this process and empty: what an interrupted run left
    is removed (this process holds the directory's lock, so no other run is using it) and
    rebuilt (every call in it is cached); a temporary folder for a run kept in memory."""
    if out is None:
        return Path(tempfile.mkdtemp(prefix="veracity-fewl-"))
    for left in work_folders(out):
        shutil.rmtree(left)
    work = out / f"fewl-index.{os.getpid()}.tmp"
    with writing(work, "the run's work folder"):
        work.mkdir(parents=True)
    return work


def generation_bar(ctx: Context, settings: FewlSettings, models: Sequence[str],
                   total: int | None) -> AbstractContextManager[None]:
    """One progress bar over every model a streamed run asks: ``models``, then the reference
    and pair models unless their outputs come from files."""
    specs = list(models)
    if settings.references_file is None:
        specs += settings.references
    if settings.pairs_file is None:
        specs.append(pairs_model(settings))
    clients = list({id(c): c for c in (ctx.client(s) for s in specs)}.values())
    return one_bar(clients, ctx.progress, "fewl: generations", total)


@frozen_heap()  # the run's questions are not scanned again after every chunk
def stream_fewl(
    items: Sequence[Item], sources: Sequence[AnswerSource], settings: FewlSettings,
    ctx: Context, out: Path | None, dataset: str, extra: dict[str, Any], mode: str = "run",
    chunk_size: int = CHUNK, generate_chunk: int = GENERATE_CHUNK,
) -> RunResult[FewlRecord, FewlResults]:
    """:func:`veracity.methods.fewl.modes.run_fewl` (mode ``run`` or ``rank``) chunk by
    chunk: the same run directory, records and aggregates. What comes from models is generated
    ``generate_chunk`` questions at a time into the run's lookup tables, then scored as
    recorded files are."""
    check_target(out)
    settings.check()
    if not items:
        raise DataError("no questions to score")
    if any(s.path is None and s.model is None for s in sources):
        raise ConfigError("a streamed FEWL run takes answers from models or files")
    if settings.pairs_file is None:
        pairs_model(settings)  # a ConfigError before any model call
    work = fresh_work(out)
    db = sqlite3.connect(work / "lookup.sqlite")
    index: _Index | None = None
    try:
        inputs = _Inputs(db, sources, settings)
        if inputs.generated():
            inputs.check_files(items, chunk_size)
            models = [s.model for s in sources if s.model is not None]
            with generation_bar(ctx, settings, models, _total(items, sources, settings, inputs)):
                inputs.generate(items, sources, settings, ctx, generate_chunk)
        similarity = load_similarity(settings.similarity, ctx.embedder, ctx.scorer,
                                     settings.mapping, settings.similarity_label)
        # a ranking embeds its labelled answers between chunks: nothing ahead of it
        ahead = embedding_ahead(items, inputs, similarity, chunk_size) if mode == "run" \
            else None
        index = _Index(work, items, inputs, settings, ctx, chunk_size, similarity, ahead)
        names = reference_names(inputs, settings, index)
        config = run_config(mode, dataset, len(items), similarity, names, settings, ctx,
                            extra | index.described(final=False))
        sources_names = [s.name for s in sources]
        described = index.described
        running = RunningFewl(sources_names)
        tally = RankTally(sources_names, settings.divergence) if mode == "rank" else None
        batches = _scored_chunks(items, inputs, index, similarity, names, settings, chunk_size,
                                 tally)

        def finish() -> Finish[FewlResults]:
            models = running.summaries()
            ranking = None if tally is None else tally.result(
                {n: models[n].mean for n in sources_names})
            results = fewl_results(mode, dataset, len(items), running.failed, similarity,
                                   settings, models, ranking)
            # the recall is known now, if it was searched behind the scoring
            return Finish(results, {"model_options": ctx.options_record()} | described(),
                          ctx.stats())

        files = tuple(dict.fromkeys(["references.jsonl", "pairs.jsonl",
                                     *(answers_file(n) for n in sources_names)]))
        plan = RunPlan("fewl", FewlRecord, config, ctx.started, files, side_files)
        outcome = drive(out, plan, batches, [running], finish)
    finally:
        if index is not None:
            index.close()
        db.close()
    shutil.rmtree(work)
    return outcome
