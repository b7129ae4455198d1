"""FEWL's neighbour search through faiss: every index path finds the exact neighbours on small
data, recall@K on hand-made cases, the record a run keeps, and the CLI's route."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import veracity.methods.fewl.neighbours.core as nbmod
from veracity.errors import ConfigError
from veracity.methods.fewl.core import select_neighbours, unit_rows
from veracity.methods.fewl.neighbours.core import (
    IndexSettings,
    NeighbourSearch,
    merge_top,
    recall_at_k,
    search_all,
)

pytest.importorskip("faiss")


def _data(n: int = 240, dim: int = 24, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim))
    # near-duplicates of question 0 and 1 (cosine > 0.8): excluded as neighbours
    vectors[5] = vectors[0] + 0.01 * rng.normal(size=dim)
    vectors[7] = vectors[1] + 0.01 * rng.normal(size=dim)
    return vectors


def _same(found: object, exact: object) -> None:
    a, b = found, exact
    assert np.array_equal(a.mask, b.mask)  # type: ignore[attr-defined]
    assert np.array_equal(np.where(a.mask, a.index, -1),  # type: ignore[attr-defined]
                          np.where(b.mask, b.index, -1))  # type: ignore[attr-defined]
    assert np.allclose(np.nan_to_num(a.cosine), np.nan_to_num(b.cosine),  # type: ignore[attr-defined]
                       atol=1e-5)


@pytest.mark.parametrize("kind", ["exact", "hnsw", "ivf"])
def test_every_index_finds_the_exact_neighbours_on_small_data(kind: str) -> None:
    vectors = _data()
    eligible = np.ones(len(vectors), dtype=bool)
    eligible[[3, 11, 40]] = False  # no references: never a neighbour
    exact = select_neighbours(vectors, 6, 0.8, eligible)
    # an index small enough to be searched whole: ef_search and nprobe cover everything
    settings = IndexSettings(kind, ef_search=512, nlist=8, nprobe=8, recall_sample=50)
    found, record = search_all(vectors, 6, 0.8, eligible, settings)
    _same(found, exact)
    assert record.index == kind and record.questions == len(vectors) and record.k == 6
    assert record.recall_at_k == 1.0
    assert record.recall_questions == (0 if kind == "exact" else 50)
    assert 5 not in found.index[0][found.mask[0]]  # the near-duplicate is left out
    assert not np.isin(found.index[found.mask], [3, 11, 40]).any()


def test_exact_search_over_many_column_blocks_and_near_duplicate_crowds() -> None:
    """More near-duplicates of one question than the candidates fetched beyond K: the block
    is searched again in full for that row, and the answer stays exact."""
    rng = np.random.default_rng(9)
    vectors = rng.normal(size=(200, 16))
    for i in range(1, 30):  # 29 near-duplicates of question 0
        vectors[i] = vectors[0] + 0.02 * rng.normal(size=16)
    unit = unit_rows(vectors)
    exact = select_neighbours(vectors, 5, 0.8)
    search = NeighbourSearch(lambda a, b: unit[a:b], 200, 5, 0.8, None, IndexSettings("exact"),
                             block=17, column_block=23)
    parts = list(search.blocks())
    assert [start for start, _ in parts] == list(range(0, 200, 17))
    index = np.concatenate([nb.index for _, nb in parts])
    mask = np.concatenate([nb.mask for _, nb in parts])
    assert np.array_equal(np.where(mask, index, -1), np.where(exact.mask, exact.index, -1))
    assert not np.isin(index[0], range(1, 30)).any()


def test_exact_search_without_faiss_runs_in_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nbmod, "_faiss", lambda kind: None)
    vectors = _data(90)
    found, record = search_all(vectors, 4, 0.8, None, IndexSettings("exact"))
    _same(found, select_neighbours(vectors, 4, 0.8))
    assert record.library == "numpy"


def test_fewer_candidates_than_k_leave_slots_masked() -> None:
    vectors = _data(8, dim=4)
    for kind in ("exact", "hnsw", "ivf"):
        found, _ = search_all(vectors, 10, 0.8, None, IndexSettings(kind, nlist=2, nprobe=2))
        exact = select_neighbours(vectors, 10, 0.8)
        _same(found, exact)
        assert found.mask.sum(axis=1).max() <= 7 and not found.mask.all()


def test_recall_on_hand_made_cases() -> None:
    exact = np.array([[0.9, 0.8, 0.7], [0.6, 0.5, 0.0]])
    exact_mask = np.array([[True, True, True], [True, True, False]])
    # row 0: 0.9 and 0.7 reach its 3rd exact cosine (0.7), 0.65 does not; row 1: 0.6 reaches
    # 0.5, 0.55 is masked out, 0.4 falls short: 3 of 5
    found = np.array([[0.9, 0.7, 0.65], [0.6, 0.55, 0.4]])
    found_mask = np.array([[True, True, True], [True, False, True]])
    assert recall_at_k(found, found_mask, exact, exact_mask) == pytest.approx(3 / 5)
    assert recall_at_k(exact, exact_mask, exact, exact_mask) == 1.0
    # a tie with the K-th exact neighbour is as near: found, even if another question
    tie = np.array([[0.9, 0.8, 0.7 - 1e-9], [0.6, 0.5, 0.5]])
    assert recall_at_k(tie, np.ones((2, 3), bool), exact, exact_mask) == 1.0
    nothing = np.zeros((2, 3), dtype=bool)
    assert recall_at_k(found, nothing, exact, exact_mask) == 0.0
    assert recall_at_k(found, found_mask, exact, nothing) == 1.0  # no exact neighbour at all


def test_the_recorded_recall_is_the_share_of_exact_neighbours_found() -> None:
    """An HNSW graph searched with almost no candidates misses neighbours: the record says
    how many, against exact search on the sampled questions."""
    vectors = np.random.default_rng(1).normal(size=(400, 32))
    settings = IndexSettings("hnsw", hnsw_m=4, ef_construction=8, ef_search=1, recall_sample=400)
    found, record = search_all(vectors, 10, 0.99, None, settings)
    exact = select_neighbours(vectors, 10, 0.99)
    assert record.recall_questions == 400
    assert record.recall_at_k == pytest.approx(
        recall_at_k(found.cosine, found.mask, exact.cosine, exact.mask), abs=1e-6)
    assert record.recall_at_k < 1.0


def _hnsw_parts(search: NeighbourSearch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts = [nb for _, nb in search.blocks()]
    return (np.concatenate([nb.index for nb in parts]), np.concatenate([nb.mask for nb in parts]),
            np.concatenate([nb.cosine for nb in parts]))


def test_a_graph_grown_while_questions_arrive_is_the_one_built_after_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Questions fed a chunk at a time (chunks of 50 across column blocks of 64) grow the
    HNSW graph on a thread of its own from the very blocks a build after the fact adds: the
    same neighbours, digit for digit, and no build from the file. A search fed only part of
    the questions builds from the file instead."""
    vectors = unit_rows(_data(300, dim=16))
    eligible = np.ones(300, dtype=bool)
    eligible[[3, 64, 65, 200]] = False
    # a small graph searched narrowly: any difference between the two graphs would show
    settings = IndexSettings("hnsw", hnsw_m=4, ef_construction=8, ef_search=4, recall_sample=0)

    def search(given: np.ndarray) -> NeighbourSearch:
        return NeighbourSearch(lambda a, b: vectors[a:b], 300, 6, 0.8, given, settings,
                               column_block=64)

    after = _hnsw_parts(search(eligible))
    fed = search(np.zeros(300, dtype=bool))
    for start in range(0, 300, 50):
        fed.feed(start, vectors[start:start + 50], eligible[start:start + 50])
    built = []
    monkeypatch.setattr(NeighbourSearch, "_build", lambda self: built.append(1))
    grown = _hnsw_parts(fed)
    assert not built
    for a, b in zip(after, grown, strict=True):
        assert np.array_equal(np.nan_to_num(a), np.nan_to_num(b))
    assert not np.isin(grown[0][grown[1]], [3, 64, 65, 200]).any()
    monkeypatch.undo()

    part = search(eligible.copy())
    part.feed(0, vectors[:50], eligible[:50])
    for a, b in zip(after, _hnsw_parts(part), strict=True):
        assert np.array_equal(np.nan_to_num(a), np.nan_to_num(b))
    with pytest.raises(ValueError, match="out of order"):
        search(eligible).feed(50, vectors[50:60], eligible[50:60])


def test_a_graph_is_linked_on_one_thread_and_the_caller_keeps_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """faiss links a graph's questions in parallel in an order that depends on timing, so
    both ways of making it use one OpenMP thread: the thread that grows it, and a build after
    the fact, which gives the caller's setting back."""
    import faiss

    vectors = unit_rows(_data(300, dim=16))
    settings = IndexSettings("hnsw", hnsw_m=4, ef_construction=8, recall_sample=0)
    before = faiss.omp_get_max_threads()
    seen: list[int] = []
    adding = faiss.IndexHNSWFlat.add

    def add(index: object, x: np.ndarray) -> None:
        seen.append(faiss.omp_get_max_threads())
        adding(index, x)

    monkeypatch.setattr(faiss.IndexHNSWFlat, "add", add)
    fed = NeighbourSearch(lambda a, b: vectors[a:b], 300, 6, 0.8, None, settings,
                          column_block=64)
    for start in range(0, 300, 50):
        fed.feed(start, vectors[start:start + 50], np.ones(50, dtype=bool))
    _hnsw_parts(fed)
    grown = len(seen)
    _hnsw_parts(NeighbourSearch(lambda a, b: vectors[a:b], 300, 6, 0.8, None, settings,
                                column_block=64))
    assert grown == 5 and len(seen) == 10 and set(seen) == {1}  # five blocks of 64, twice
    assert faiss.omp_get_max_threads() == before


def test_merge_keeps_each_index_once_and_ties_to_the_lower_index() -> None:
    values = np.array([[0.5, 0.9, 0.9, 0.9, -np.inf]])
    index = np.array([[1, 8, 3, 8, 0]])
    top, at = merge_top(values, index, 3)
    assert at.tolist() == [[3, 8, 1]] and top.tolist() == [[0.9, 0.9, 0.5]]


def test_settings_choose_and_reject() -> None:
    assert IndexSettings(approximate_from=50).resolve(49) == "exact"
    assert IndexSettings(approximate_from=50).resolve(50) == "hnsw"
    with pytest.raises(ConfigError, match="unknown neighbours index"):
        IndexSettings("annoy")


def test_a_fewl_run_records_its_neighbour_search(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from veracity.cli import main

    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is item {i} of "
                                             f"list {i % 3}?"}) + "\n" for i in range(12)))
    out = tmp_path / "run"
    result = CliRunner().invoke(main, [
        "fewl", "run", "--dataset", f"jsonl:{questions}", "--answers", "fake/stable",
        "--reference", "fake/pairs", "--similarity", "hash/default", "--neighbours", "3",
        "--pairs", "2", "--neighbours-index", "hnsw", "--out", str(out)])
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    search = run["config"]["neighbour_search"]
    assert search["index"] == "hnsw" and search["setting"] == "hnsw"
    assert search["recall_at_k"] == 1.0 and search["recall_questions"] == 12
    assert run["config"]["settings"]["neighbours_index"] == "hnsw"


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_rows_crowded_by_near_duplicates_are_searched_exactly(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """40 near-duplicates of question 0: past the fetch limit, those rows go to exact search
    (counted in the record), so the answer is exact and memory stays bounded."""
    monkeypatch.setattr(nbmod, "FETCH_LIMIT", 8)
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(160, 16))
    for i in range(1, 41):
        vectors[i] = vectors[0] + 0.02 * rng.normal(size=16)
    settings = IndexSettings(kind, nlist=4, nprobe=4, recall_sample=0)
    found, record = search_all(vectors, 5, 0.8, None, settings)
    _same(found, select_neighbours(vectors, 5, 0.8))
    assert record.searched_exactly >= 41


@pytest.mark.parametrize("seed", range(20))
def test_cutting_a_wide_matrix_first_keeps_the_same_top(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows, width, k = 7, 60, 5
    values = rng.choice([0.1, 0.2, 0.3, 0.5, 0.9], size=(rows, width))  # many ties
    values[rng.random((rows, width)) < 0.3] = -np.inf
    values[0, :] = -np.inf  # a row with nothing
    values[1, 3:] = -np.inf  # a row with fewer than k
    index = np.stack([rng.permutation(1000)[:width] for _ in range(rows)])  # distinct per row
    top, at = merge_top(values, index, k)
    cut_top, cut_at = merge_top(values, index, k, distinct=True)
    assert cut_top.tolist() == top.tolist() and cut_at.tolist() == at.tolist()


def test_a_graph_row_first_asks_for_what_the_search_keeps_anyway(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph keeps ef_search candidates whatever it returns, so a row first asks for half
    of them (never fewer than K + MARGIN); only rows left short by near-duplicates ask again,
    four times as many, with a pool twice that."""
    import faiss

    vectors = unit_rows(_data(300, dim=16))
    vectors[1:40] = vectors[0] + 1e-3 * _data(39, dim=16)  # 40 near-duplicates of each other
    calls: list[tuple[int, int, int]] = []
    searching = faiss.IndexHNSWFlat.search

    def search(index: object, x: np.ndarray, k: int, params: object = None) -> object:
        calls.append((x.shape[0], k, params.efSearch))  # type: ignore[attr-defined]
        return searching(index, x, k, params=params)

    monkeypatch.setattr(faiss.IndexHNSWFlat, "search", search)
    for ef_search, first in ((40, 20), (4, 6 + nbmod.MARGIN)):
        calls.clear()
        settings = IndexSettings("hnsw", hnsw_m=8, ef_construction=40, ef_search=ef_search,
                                 recall_sample=0)
        found, _ = search_all(vectors, 6, 0.9, None, settings)
        assert calls[0] == (300, first, max(ef_search, 2 * first))
        # the 40 crowded rows lose 39 candidates each: asked again, wider
        assert calls[1] == (40, 4 * first, 8 * first)
        assert found.mask.all()
        assert not (found.cosine > 0.9).any()


def test_the_exact_search_for_the_recall_runs_while_the_graph_still_links(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the graph's last blocks are linked, the waiting thread searches the sampled
    questions exactly on one OpenMP thread (its own idle core); the recall recorded is the
    one a graph built after the fact gets, and the caller's thread count comes back."""
    import threading

    import faiss

    vectors = unit_rows(_data(300, dim=16))
    settings = IndexSettings("hnsw", hnsw_m=4, ef_construction=8, ef_search=2, recall_sample=100)
    before = faiss.omp_get_max_threads()
    searched = threading.Event()
    exact_threads: list[int] = []
    adding = faiss.IndexHNSWFlat.add
    exact_rows = NeighbourSearch._exact_rows

    def add(index: object, x: np.ndarray) -> None:
        searched.wait(timeout=10)  # held until the exact search has run
        adding(index, x)

    def exact(self: NeighbourSearch, rows: np.ndarray, own: np.ndarray) -> object:
        exact_threads.append(faiss.omp_get_max_threads())
        searched.set()
        return exact_rows(self, rows, own)

    built = NeighbourSearch(lambda a, b: vectors[a:b], 300, 6, 0.8, None, settings,
                            column_block=64)
    _hnsw_parts(built)
    after = built.record().recall_at_k
    monkeypatch.setattr(faiss.IndexHNSWFlat, "add", add)
    monkeypatch.setattr(NeighbourSearch, "_exact_rows", exact)
    fed = NeighbourSearch(lambda a, b: vectors[a:b], 300, 6, 0.8, None, settings,
                          column_block=64)
    for start in range(0, 300, 50):
        fed.feed(start, vectors[start:start + 50], np.ones(50, dtype=bool))
    _hnsw_parts(fed)
    assert exact_threads == [1]  # once, while waiting: not again for the record
    assert fed.record().recall_at_k == after < 1.0
    assert faiss.omp_get_max_threads() == before


def test_work_given_to_the_waiting_thread_runs_only_while_the_graph_links(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread that waits for a graph's last blocks advances the caller's work a step at a
    time instead, and stops as soon as the graph is linked (the work here never ends by
    itself); the neighbours are those of a graph nobody waited for. An exact search has no
    graph to wait for: the work is never started."""
    import threading
    import time

    import faiss

    vectors = unit_rows(_data(300, dim=16))
    settings = IndexSettings("hnsw", hnsw_m=4, ef_construction=8, ef_search=4, recall_sample=0)

    def search(given: IndexSettings) -> NeighbourSearch:
        return NeighbourSearch(lambda a, b: vectors[a:b], 300, 6, 0.8, None, given,
                               column_block=64)

    expected = _hnsw_parts(search(settings))
    released = threading.Event()
    adding = faiss.IndexHNSWFlat.add

    def add(index: object, x: np.ndarray) -> None:
        released.wait(timeout=10)  # the graph links only once the work has begun
        adding(index, x)

    steps: list[int] = []

    def work() -> Iterator[None]:
        while True:
            steps.append(1)
            if len(steps) == 3:
                released.set()
            time.sleep(0.001)
            yield

    monkeypatch.setattr(faiss.IndexHNSWFlat, "add", add)
    fed = search(settings)
    for start in range(0, 300, 50):
        fed.feed(start, vectors[start:start + 50], np.ones(50, dtype=bool))
    parts = [nb for _, nb in fed.blocks(work())]
    assert len(steps) >= 3
    for a, b in zip(expected, (np.concatenate([nb.index for nb in parts]),
                               np.concatenate([nb.mask for nb in parts]),
                               np.concatenate([nb.cosine for nb in parts])), strict=True):
        assert np.array_equal(np.nan_to_num(a), np.nan_to_num(b))

    def untouched() -> Iterator[None]:
        raise AssertionError("an exact search advanced the caller's work")
        yield

    exact = search(IndexSettings("exact"))
    assert len([nb for _, nb in exact.blocks(untouched())]) == 1
    linked = search(settings)  # a graph linked before anyone waits for it: no step either
    for start in range(0, 300, 50):
        linked.feed(start, vectors[start:start + 50], np.ones(50, dtype=bool))
    linked._add_block()
    for add in linked._adds:
        add.result()
    assert len([nb for _, nb in linked.blocks(untouched())]) == 1


def test_given_work_for_the_wait_the_recall_is_searched_behind_the_blocks(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """With work of the caller's own for the wait, the exact search the recall is measured
    against runs after the last block, on a thread of its own with one OpenMP thread; the
    record says no recall until it is asked to wait for it, then the recall a graph built
    after the fact gets. ``stop`` ends such a search at its next block of columns, and the
    record then says why it has no recall."""
    import threading

    import faiss

    vectors = unit_rows(_data(300, dim=16))
    settings = IndexSettings("hnsw", hnsw_m=4, ef_construction=8, ef_search=2, recall_sample=300)

    def search() -> NeighbourSearch:
        fed = NeighbourSearch(lambda a, b: vectors[a:b], 300, 6, 0.8, None, settings,
                              column_block=64)
        for start in range(0, 300, 50):
            fed.feed(start, vectors[start:start + 50], np.ones(50, dtype=bool))
        return fed

    after = search()
    _hnsw_parts(after)
    searched: list[tuple[str, int]] = []
    exact_rows = NeighbourSearch._exact_rows
    held = threading.Event()

    def exact(self: NeighbourSearch, rows: np.ndarray, own: np.ndarray) -> object:
        held.wait(timeout=10)
        searched.append((threading.current_thread().name, faiss.omp_get_max_threads()))
        return exact_rows(self, rows, own)

    monkeypatch.setattr(NeighbourSearch, "_exact_rows", exact)
    fed = search()
    parts = [nb for _, nb in fed.blocks(iter(()))]
    assert len(parts) == 1 and not searched  # nothing searched exactly in the wait
    assert fed.record(wait=False).recall_at_k is None
    held.set()
    assert fed.record().recall_at_k == after.record().recall_at_k < 1.0
    assert fed.record().recall_questions == 300
    assert all(name.startswith("veracity-recall") for name, _ in searched)
    assert {threads for _, threads in searched} == {1} and len(searched) == 3  # 128 at a time

    held.clear()
    searched.clear()
    stopped = search()
    list(stopped.blocks(iter(())))
    stopped.stop()
    held.set()
    with caplog.at_level("WARNING", logger="veracity"):
        assert stopped.record().recall_at_k is None  # the neighbours stand, unchecked
    assert "recall of the neighbour search was not measured" in caplog.text
    assert len(searched) <= 1
