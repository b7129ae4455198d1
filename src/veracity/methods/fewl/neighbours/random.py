"""Random neighbours (the paper's Table 8 ablation of NN_K) drawn in bounded memory.

A question's pool is every other eligible question whose cosine to it is at most the
near-duplicate threshold, in index order. ``Generator.choice(pool, size, replace=False)``
draws positions in ``range(len(pool))`` that depend only on the pool's size, the sample size
and the generator's state, then takes those positions of the pool (numpy's
``random/_generator.pyx``); so a first pass over the column blocks counts each row's pool,
the positions are drawn in row order from one generator, exactly as a draw from each whole
pool would be, and a second pass maps them to their columns and cosines. Both passes multiply
the same (row block x column block) shapes as the nearest search
(:func:`veracity.methods.fewl.core.nearest_block`), so a matrix in memory and a file read a
block at a time give the same digits. Memory: block x column_block cosines, whatever n is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.errors import ConfigError
from veracity.methods.fewl.core import (
    COLUMN_BLOCK,
    Bools,
    ColumnBlock,
    Floats,
    Ints,
    Neighbours,
    unit_rows,
)


def random_neighbour_blocks(
    unit: ColumnBlock, n: int, k: int, near_duplicate: float = 0.8,
    eligible: npt.ArrayLike | None = None, seed: int = 0, block: int = 1024,
    column_block: int = COLUMN_BLOCK,
) -> Iterator[tuple[int, Neighbours]]:
    """(first row, k random neighbours of rows first..first + block) for every block of the
    n questions whose unit vectors ``unit`` reads, drawn without replacement (one generator
    seeded with ``seed``, rows in order) among the other eligible questions of cosine at most
    ``near_duplicate``; fewer than k available: the remaining slots are masked out."""
    if k < 0:
        raise ConfigError(f"number of neighbours must be >= 0, got {k}")
    ok = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    rng = np.random.default_rng(seed)
    for start in range(0, n, block):
        stop = min(start + block, n)
        # a copy, as neighbour_blocks makes: the product of two arrays, never syrk
        rows = np.array(unit(start, stop), dtype=np.float64, copy=True)
        counts = np.zeros(stop - start, dtype=np.int64)
        for _, allowed, _ in _allowed(rows, start, unit, n, near_duplicate, ok, column_block):
            counts += allowed.sum(axis=1)
        position, drawn = _draw(rng, counts, k)
        yield start, _place(rows, start, unit, n, near_duplicate, ok, column_block, position,
                            drawn)


def _allowed(rows: Floats, first: int, columns: ColumnBlock, n: int, near_duplicate: float,
             eligible: Bools, column_block: int) -> Iterator[tuple[int, Bools, Floats]]:
    """(first column, which columns are in each row's pool, their cosines) per column block."""
    local = np.arange(rows.shape[0])
    own = first + local
    for start in range(0, n, column_block):
        stop = min(start + column_block, n)
        cos = rows @ columns(start, stop).T
        allowed = cos <= near_duplicate
        allowed &= eligible[start:stop]
        inside = (own >= start) & (own < stop)
        allowed[local[inside], own[inside] - start] = False
        yield start, allowed, cos


def _draw(rng: np.random.Generator, counts: Ints, k: int) -> tuple[Ints, Bools]:
    """Positions in each row's pool, (rows, k), and which slots hold one: the draws of
    ``rng.choice(pool, min(k, len(pool)), replace=False)`` row after row, without the pools
    (an empty pool draws nothing, as before)."""
    position = np.zeros((counts.shape[0], k), dtype=np.int64)
    drawn = np.zeros((counts.shape[0], k), dtype=bool)
    for row, count in enumerate(counts.tolist()):
        if count:
            width = min(k, count)
            position[row, :width] = rng.choice(count, size=width, replace=False)
            drawn[row, :width] = True
    return position, drawn


def _place(rows: Floats, first: int, columns: ColumnBlock, n: int, near_duplicate: float,
           eligible: Bools, column_block: int, position: Ints, drawn: Bools) -> Neighbours:
    """The columns and cosines at the drawn pool positions, found in a second pass."""
    size, k = position.shape
    index = np.zeros((size, k), dtype=np.int64)
    cosine = np.full((size, k), np.nan)
    before = np.zeros(size, dtype=np.int64)  # pool members in earlier column blocks
    for start, allowed, cos in _allowed(rows, first, columns, n, near_duplicate, eligible,
                                        column_block):
        width = allowed.shape[1]
        here = allowed.sum(axis=1)
        local = position - before[:, None]
        hit = drawn & (local >= 0) & (local < here[:, None])
        if hit.any():
            row, slot = np.nonzero(hit)
            # running pool counts, each row lifted above the previous one's, so a single
            # search over the flattened block finds the column of every hit at once
            kind = np.int32 if size * (width + 1) < 2**31 else np.int64  # half the memory
            lifted: npt.NDArray[np.integer[Any]] = np.cumsum(allowed, axis=1, dtype=kind)
            lifted += (np.arange(size, dtype=kind) * (width + 1))[:, None]
            wanted = (local[row, slot] + 1 + row * (width + 1)).astype(kind)
            at = np.searchsorted(lifted.ravel(), wanted)
            col = at - row * width
            index[row, slot] = start + col
            cosine[row, slot] = cos[row, col]
        before += here
    return Neighbours(index, drawn, cosine)


def random_neighbours(
    question_vectors: npt.ArrayLike,
    k: int,
    near_duplicate: float = 0.8,
    eligible: npt.ArrayLike | None = None,
    seed: int = 0,
    block: int = 1024,
    column_block: int = COLUMN_BLOCK,
) -> Neighbours:
    """k other questions drawn at random (without replacement, seeded) among those whose
    cosine to the question is at most ``near_duplicate``: the paper's Table 8 ablation of the
    nearest neighbours. Fewer than k available: the remaining slots are masked out.

    Rows go ``block`` at a time, as a streamed run reads them (:func:`random_neighbour_blocks`).
    """
    if k < 0:
        raise ConfigError(f"number of neighbours must be >= 0, got {k}")
    unit = unit_rows(question_vectors)
    parts = [nb for _, nb in random_neighbour_blocks(lambda a, b: unit[a:b], unit.shape[0], k,
                                                     near_duplicate, eligible, seed, block,
                                                     column_block)]
    if not parts:
        return Neighbours(np.zeros((0, k), np.int64), np.zeros((0, k), bool), np.zeros((0, k)))
    return Neighbours(np.concatenate([p.index for p in parts]),
                      np.concatenate([p.mask for p in parts]),
                      np.concatenate([p.cosine for p in parts]))
