"""Random neighbours drawn block by block: the same draws as a choice from each whole pool,
the same digits over a file as in memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from veracity.errors import ConfigError, DataError
from veracity.methods.fewl import chunked
from veracity.methods.fewl.chunked import RowFile
from veracity.methods.fewl.core import Neighbours, unit_rows
from veracity.methods.fewl.neighbours.random import random_neighbour_blocks, random_neighbours


def _per_row(unit: np.ndarray, k: int, near_duplicate: float, eligible: np.ndarray,
             seed: int) -> Neighbours:
    """The former algorithm: each row's cosines to every question (one matrix-vector
    product), its pool, and a choice from the pool itself."""
    n = unit.shape[0]
    rng = np.random.default_rng(seed)
    index = np.zeros((n, k), dtype=np.int64)
    cosine = np.full((n, k), np.nan)
    mask = np.zeros((n, k), dtype=bool)
    for row in range(n):
        cos = unit @ unit[row]
        allowed = eligible & (cos <= near_duplicate)
        allowed[row] = False
        pool = np.flatnonzero(allowed)
        chosen = rng.choice(pool, size=min(k, pool.size), replace=False) if pool.size else pool
        width = chosen.size
        index[row, :width], mask[row, :width], cosine[row, :width] = chosen, True, cos[chosen]
    return Neighbours(index, mask, cosine)


def _joined(parts: list[tuple[int, Neighbours]], k: int) -> Neighbours:
    assert [first for first, _ in parts] == sorted(first for first, _ in parts)
    if not parts:
        return Neighbours(np.zeros((0, k), np.int64), np.zeros((0, k), bool), np.zeros((0, k)))
    return Neighbours(*(np.concatenate([getattr(nb, f) for _, nb in parts])
                        for f in ("index", "mask", "cosine")))


def test_a_choice_from_a_pool_is_the_pool_at_a_choice_of_positions() -> None:
    """What the blocked draw rests on, in the installed numpy: both of choice's algorithms
    (Floyd's below 10,000 and a tail shuffle above, for samples over a 50th of the pool),
    and a generator carried on from draw to draw."""
    pools = [np.arange(3, 60, 2), np.arange(10_050) * 3 + 1, np.array([7]),
             np.arange(40), np.arange(12_000)[::-1].copy()]
    sizes = [5, 400, 1, 40, 0]
    a, b = np.random.default_rng(21), np.random.default_rng(21)
    for _ in range(3):
        for pool, size in zip(pools, sizes, strict=True):
            picked = a.choice(pool, size=size, replace=False)
            positions = b.choice(pool.size, size=size, replace=False)
            assert picked.tolist() == pool[positions].tolist()
    assert a.random() == b.random()


@pytest.mark.parametrize(("block", "column_block"), [(1024, 8192), (7, 11), (1, 5), (64, 1)])
def test_blocked_draws_equal_the_per_row_draws(block: int, column_block: int) -> None:
    rng = np.random.default_rng(8)
    for n, d, k, threshold in ((90, 6, 4, 0.2), (130, 3, 9, 0.5), (40, 2, 50, 0.0)):
        unit = unit_rows(rng.normal(size=(n, d)))
        eligible = rng.random(n) > 0.15
        cos = unit @ unit.T
        # the two ways multiply differently (last digits): keep every cosine clear of the
        # threshold so that the pools are the same
        assert np.abs(cos - threshold).min() > 1e-9
        expected = _per_row(unit, k, threshold, eligible, seed=n)
        got = random_neighbours(unit, k, threshold, eligible, n, block, column_block)
        assert (got.mask == expected.mask).all() and (got.index == expected.index).all()
        assert np.allclose(got.cosine, expected.cosine, rtol=0, atol=1e-15, equal_nan=True)
        assert np.isnan(got.cosine[~got.mask]).all() and (got.index[~got.mask] == 0).all()
        assert (got.mask.sum(axis=1) <= k).all() and got.mask.sum() > 0


def test_exact_cosines_at_the_threshold_and_ties_agree_to_the_digit() -> None:
    """Integer vectors: every product exact whatever the shapes, many at the threshold
    itself (kept: at most the threshold), so the cosines agree to the last digit too."""
    rng = np.random.default_rng(4)
    for trial in range(30):
        n, k = int(rng.integers(1, 70)), int(rng.integers(0, 9))
        v = rng.integers(-2, 3, size=(n, 4)).astype(np.float64)
        eligible = rng.random(n) > 0.2
        expected = _per_row(v, k, 3.0, eligible, seed=trial)
        for block, column_block in ((1, 3), (5, 8), (1024, 8192)):
            got = _joined(list(random_neighbour_blocks(
                lambda a, b, v=v: v[a:b], n, k, 3.0, eligible, trial, block, column_block)), k)
            assert (got.index == expected.index).all() and (got.mask == expected.mask).all()
            assert np.array_equal(got.cosine, expected.cosine, equal_nan=True)


def test_over_a_file_the_same_digits_as_in_memory(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(300, 24)).astype(np.float32)
    eligible = rng.random(300) > 0.1
    stored = RowFile(tmp_path / "q.f32", np.float32)
    for start in range(0, 300, 37):  # written in other chunks than it is read
        stored.append(vectors[start:start + 37])
    whole = random_neighbours(vectors, 6, 0.1, eligible, 3, block=64, column_block=100)
    parts = list(random_neighbour_blocks(lambda a, b: unit_rows(stored.read(a, b)), 300, 6,
                                         0.1, eligible, 3, block=64, column_block=100))
    assert [first for first, _ in parts] == [0, 64, 128, 192, 256]
    streamed = _joined(parts, 6)
    assert streamed.index.tobytes() == whole.index.tobytes()
    assert streamed.mask.tobytes() == whole.mask.tobytes()
    assert streamed.cosine.tobytes() == whole.cosine.tobytes()
    assert whole.mask.all()  # 6 of ~150 allowed questions each: every slot drawn


def test_no_questions_no_neighbours_and_a_negative_k_refused() -> None:
    empty = random_neighbours(np.zeros((0, 3)), 4)
    assert empty.index.shape == empty.mask.shape == empty.cosine.shape == (0, 4)
    zero = random_neighbours(np.ones((5, 3)) * np.arange(5)[:, None], 0)
    assert zero.index.shape == (5, 0)
    with pytest.raises(ConfigError, match="must be >= 0"):
        random_neighbours(np.ones((2, 3)), -1)
    with pytest.raises(ConfigError, match="must be >= 0"):
        list(random_neighbour_blocks(lambda a, b: np.ones((b - a, 3)), 2, -1))


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped-in-pieces", "positioned-reads"])
def test_row_file_takes_rows_in_any_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          mapped: bool) -> None:
    monkeypatch.setattr(chunked, "TAKE_PIECE", 3)  # several pieces, each mapping let go
    if not mapped:  # a platform that cannot let mapped pages go reads runs of rows instead
        monkeypatch.delattr(chunked.mmap, "MADV_DONTNEED")
    matrix = np.arange(40, dtype=np.float32).reshape(10, 4)
    stored = RowFile(tmp_path / "rows.f32", np.float32)
    stored.append(matrix[:6])
    stored.append(matrix[6:])
    for rows in ([3, 4, 5, 0, 1, 9, 9, 2], [7], list(range(10)), [9, 8, 7]):
        at = np.array(rows, dtype=np.int64)
        np.testing.assert_array_equal(stored.take(at), matrix[at])
    assert stored.take(np.zeros(0, dtype=np.int64)).shape == (0, 4)
    with pytest.raises(DataError, match="past its end"):
        stored.take(np.array([8, 9, 10], dtype=np.int64))
    with pytest.raises(DataError, match="past its end"):
        stored.take(np.array([-1], dtype=np.int64))
    with (tmp_path / "rows.f32").open("r+b") as fh:  # cut short behind its back
        fh.truncate(4 * 4 * 7)
    with pytest.raises(DataError, match="shorter than its 10 rows"):
        stored.take(np.array([1], dtype=np.int64))
