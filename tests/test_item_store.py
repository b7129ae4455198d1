"""Item stores: items kept in SQLite round-trip exactly, index and slice like a list, are
selected by --limit / --sample exactly as a list is, and runs over them write the very run
directory a run over the list writes."""

from __future__ import annotations

import csv
import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.data import stored
from veracity.data.qa import load_csv, load_items, load_jsonl, stream_csv, stream_jsonl
from veracity.data.sample import Sample, Selection
from veracity.data.stored import ItemStore, selected_items, stream_source, take
from veracity.errors import DataError
from veracity.store import RunDir
from veracity.types import Item

ODD = ["naïve café", "🧪 emoji 👩‍👩‍👧", "עברית RTL", "line\u2028separator", "nul\x00char",
       "lone \ud800 surrogate", "tab\tand\nnewline", "", "  spaces  ", "e\u0301 combining"]


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (1 is not 1.0, a list not a tuple)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _items(n: int) -> list[Item]:
    out = []
    for i in range(n):
        metadata: dict[str, Any] = {
            "int": i, "float": float(i), "half": i / 2, "big": 2**70 + i, "bool": i % 2 == 0,
            "none": None, "text": ODD[i % len(ODD)], "options": [["A", f"x{i}"], ["B", "y"]],
            "nested": {"k": [1, 2.5, {"deep": [True, None]}]}}
        out.append(Item(f"dup-{i % 3}", f"question {i}: {ODD[i % len(ODD)]}",
                        tuple(ODD[: i % 4]), metadata if i % 5 else {}))
    return out


def _check(got: Item, want: Item) -> None:
    assert _same((got.id, got.question, got.references, got.metadata),
                 (want.id, want.question, want.references, want.metadata))


def test_round_trip_keeps_text_duplicate_ids_and_metadata_types(tmp_path: Path) -> None:
    items = _items(53)
    with ItemStore.build(iter(items), tmp_path, page=8, cached_pages=2) as store:
        assert len(store) == 53 and bool(store)
        for got, want in zip(store, items, strict=True):
            _check(got, want)
        assert [x.id for x in store].count("dup-0") == 18  # duplicate ids stay distinct items
        assert isinstance(store[7].references, tuple) and type(store[7].metadata["float"]) is float
        folder = next(tmp_path.iterdir())
        assert (folder / "items.sqlite").is_file()
    assert not any(tmp_path.iterdir())  # closing removed the file
    with pytest.raises(DataError, match="closed"):
        store[0]


@pytest.mark.parametrize("metadata", [{"t": (1, 2)}, {1: "x"}, {"s": {1, 2}}, {"n": float("nan")},
                                      {"deep": [{"x": float("inf")}]}])
def test_metadata_json_cannot_keep_exactly_is_refused(tmp_path: Path, metadata: Any) -> None:
    with pytest.raises(DataError, match="item q"):
        ItemStore.build([Item("ok", "fine"), Item("q", "x", (), metadata)], tmp_path)
    assert not any(tmp_path.iterdir())  # nothing left behind


def test_empty_store(tmp_path: Path) -> None:
    with ItemStore.build([], tmp_path) as store:
        assert len(store) == 0 and not store and list(store) == [] and store[:] == []
        with pytest.raises(IndexError):
            store[0]


def test_indices_and_slices_behave_as_on_a_list(tmp_path: Path) -> None:
    items = _items(41)
    with ItemStore.build(items, tmp_path, page=6, cached_pages=2) as store:
        for i in (*range(-41, 41),):
            _check(store[i], items[i])
        for bad in (41, -42, 10**9):
            with pytest.raises(IndexError):
                store[bad]
        with pytest.raises(TypeError):
            store["1"]  # type: ignore[call-overload]
        cuts = [slice(None), slice(3, 17), slice(-5, None), slice(None, -30), slice(40, 2, -3),
                slice(None, None, -1), slice(5, 5), slice(39, 100), slice(-100, 3), slice(1, 38, 7)]
        for cut in cuts:
            got, want = store[cut], items[cut]
            assert isinstance(got, list) and len(got) == len(want)
            for a, b in zip(got, want, strict=True):
                _check(a, b)
        assert store.index(items[12]) == items.index(items[12]) == 12 and items[12] in store
        positions = [40, 0, 17, 17, 3, 39]
        assert [x.question for x in store.take(positions)] == \
            [items[p].question for p in positions]
        assert [x.question for x in take(items, positions)] == \
            [x.question for x in take(store, positions)]
        assert store[np.int64(-2)] == items[-2]
        assert store.take(np.array(positions)) == [items[p] for p in positions]


def test_sequential_access_costs_one_query_per_page(tmp_path: Path) -> None:
    items = [Item(f"q{i}", f"question {i}") for i in range(1000)]
    with ItemStore.build(items, tmp_path, page=64, cached_pages=2) as store:
        assert list(store) == items and store.queries == 16  # ceil(1000 / 64)
        before = store.queries
        for start in range(0, 1000, 50):  # chunks that straddle pages
            assert store[start:start + 50] == items[start:start + 50]
        assert store.queries - before == 16
        before = store.queries
        assert [store[i] for i in range(1000)] == items
        assert store.queries - before == 16
        # scattered positions: a few hundred per query, not one page per position
        scattered = list(range(3, 1000, 37))
        before = store.queries
        assert store.take(scattered) == [items[p] for p in scattered]
        assert store.queries - before <= 2


@pytest.mark.parametrize("selection", [
    Selection(), Selection(10), Selection(1000), Selection(None, Sample(7, 0)),
    Selection(None, Sample(7, 123)), Selection(30, Sample(5, 9)), Selection(3, Sample(10, 1)),
    Selection(None, Sample(500, 4))])
def test_limit_and_sample_choose_what_selection_apply_chooses(tmp_path: Path,
                                                              selection: Selection) -> None:
    items = [Item(f"q{i}", f"question {i}", (str(i),), {"i": i}) for i in range(97)]
    want = selection.apply(items)
    with ItemStore.build(items, tmp_path, page=10) as store:
        kept = store.select(selection)
        assert list(kept) == want and [x.metadata for x in kept] == [x.metadata for x in want]
        assert selection.record(len(store), kept.ids()) == \
            selection.record(len(items), [x.id for x in want])
        # a sample of a sample's view, indices on it
        if want:
            assert kept[-1] == want[-1] and kept[: len(want) // 2] == want[: len(want) // 2]


# --- the streamed readers --------------------------------------------------------------------


def _jsonl(path: Path, lines: list[str], prefix: bytes = b"", newline: str = "\n") -> Path:
    path.write_bytes(prefix + newline.join(lines).encode("utf-8") + newline.encode())
    return path


def test_streamed_jsonl_and_csv_read_what_the_list_loaders_read(tmp_path: Path) -> None:
    records = [{"id": 7, "question": " What is 2+2? ", "answer": "4", "tags": ["a", 1, 2.0]},
               {"question": "Où est 🧪?", "answers": ["ici", " là "], "n": None},
               {"id": "x", "question": "q3", "references": "r", "extra": {"k": True}}]
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    for newline in ("\n", "\r\n", "\r"):
        path = _jsonl(tmp_path / "q.jsonl", [lines[0], "", lines[1], "  ", lines[2]],
                      b"\xef\xbb\xbf", newline)
        want, got = load_jsonl(path), list(stream_jsonl(path))
        assert len(got) == 3 and [x.id for x in got] == ["7", "line-3", "x"] or newline == "\r"
        for a, b in zip(got, want, strict=True):
            _check(a, b)
    path = tmp_path / "q.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\r\n")
        writer.writerows([["id", "question", "answer"], ["1", "multi\r\nline question", "a"],
                          ["", "short row"], ["3", "q, with comma", "b"]])
    want, got = load_csv(path), list(stream_csv(path))
    assert [x.question for x in got] == ["multi\nline question", "short row", "q, with comma"]
    for a, b in zip(got, want, strict=True):
        _check(a, b)


BAD_JSONL = [
    b'{"question": "fine"}\n{"question": "x",}\n',
    b'{"question": "fine"}\n[1, 2]\n',
    b'{"question": "fine"}\n\n{"prompt": "no question"}\n',
    b'{"question": "fine"}\n{"question": "   "}\n',
    b'{"question": "fine"}\n{"question": "caf\xc3"}\n',
    b'\xef\xbb\xbf{"question": "fine"}\n{"question": "\xff"}\n',
    b'{"question": "fine"}\n{"question": "bad \\ud800"}\n',
    b'{"question": "fine"}\n{"question": "x", "id": true}\n',
    b'{"question": "fine"}\n{"question": 1e999}\n',
    b'{"question": "fine"}\r\n{"question": "x", "answers": [1]}\r\n',
]
BAD_CSV = [
    b'question,answer\nfine,a\n"unclosed,b\n',
    b'question,answer\nfine,a\none,two,three\n',
    b'prompt,answer\nfine,a\n',
    b'question,answer\nfine,a\n"",b\n',
    b'question,answer\nfine,a\ncaf\xc3,b\n',
    b'',
]


@pytest.mark.parametrize("content", BAD_JSONL)
def test_malformed_jsonl_lines_give_the_list_loaders_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataError) as listed:
        load_jsonl(path)
    with pytest.raises(DataError) as streamed:
        list(stream_jsonl(path))
    assert str(streamed.value) == str(listed.value)


@pytest.mark.parametrize("content", BAD_CSV)
def test_malformed_csv_rows_give_the_list_loaders_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(DataError) as listed:
        load_csv(path)
    with pytest.raises(DataError) as streamed:
        list(stream_csv(path))
    assert str(streamed.value) == str(listed.value)


def test_missing_file_same_error(tmp_path: Path) -> None:
    with pytest.raises(DataError) as listed:
        load_jsonl(tmp_path / "none.jsonl")
    with pytest.raises(DataError) as streamed:
        list(stream_jsonl(tmp_path / "none.jsonl"))
    assert str(streamed.value) == str(listed.value)


def _questions_file(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"q{i:06d}", "question": f"What is {i} plus {i % 7}?",
                                 "answer": str(i + i % 7)}) + "\n")
    return path


def test_only_large_jsonl_and_csv_files_are_streamed(tmp_path: Path) -> None:
    path = _questions_file(tmp_path / "q.jsonl", 20)
    size = path.stat().st_size
    assert stream_source(f"jsonl:{path}", threshold=size) is None
    assert stream_source(str(path), threshold=size - 1) is not None  # kind guessed
    assert stream_source("builtin", threshold=0) is None
    assert stream_source(f"halueval:{path}", threshold=0) is None  # FEWL's labelled loader
    with selected_items(f"jsonl:{path}", Selection(5)) as (small, record):
        assert isinstance(small, list) and len(small) == 5
    with selected_items(f"jsonl:{path}", Selection(5), threshold=0) as (large, record2):
        assert isinstance(large, ItemStore) and list(large) == small and record2 == record
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="has no questions"):
        with selected_items(f"jsonl:{empty}", Selection(), threshold=0):
            pass


def test_building_a_store_never_holds_the_whole_list(tmp_path: Path) -> None:
    path = _questions_file(tmp_path / "q.jsonl", 20_000)
    tracemalloc.start()
    try:
        items = load_items(f"jsonl:{path}")
        listed = tracemalloc.get_traced_memory()[0]
        del items
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        source = stream_source(f"jsonl:{path}", threshold=0)
        assert source is not None
        with ItemStore.build(source, tmp_path, page=512) as store:
            assert sum(1 for _ in store) == 20_000
            peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    # about 12 MB as a list; the store holds a batch of rows and two pages of items
    assert listed > 8_000_000 and peak < listed / 4, (listed, peak)


# --- runs over a store write what runs over the list write -----------------------------------


def _cli(*args: str) -> None:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output


def _files(out: Path) -> dict[str, Any]:
    config = dict(RunDir.open(out).info["config"])
    return {"results": (out / "results.json").read_bytes(),
            "samples": (out / "samples.jsonl").read_bytes(), "config": config}


def _on_disk(patch: pytest.MonkeyPatch) -> list[ItemStore]:
    """Every dataset file counts as large, with small pages so runs cross many of them; the
    stores built are returned."""
    built: list[ItemStore] = []
    real = ItemStore.build

    def spy(*args: Any, **kw: Any) -> ItemStore:
        store = real(*args, **kw)
        built.append(store)
        return store

    patch.setattr(stored.ItemStore, "build", spy)
    patch.setattr(stored, "PAGE", 7)
    patch.setattr(stored, "CACHED_PAGES", 2)
    patch.setattr(stored, "LARGE_FILE", 0)
    return built


SELECTIONS = [[], ["--limit", "23"], ["--sample", "11", "--sample-seed", "5"],
              ["--limit", "30", "--sample", "9"]]


@pytest.mark.parametrize("select", SELECTIONS)
def test_gamma_run_over_a_store_equals_the_run_over_the_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, select: list[str]) -> None:
    path = _questions_file(tmp_path / "q.jsonl", 40)
    args = ["gamma", "--dataset", f"jsonl:{path}", "--model", "fake/unstable", "--embedder",
            "hash/default", "-n", "3", "--no-cache", "-q", "--json", *select]
    _cli(*args, "--out", str(tmp_path / "list"))
    with monkeypatch.context() as patch:
        built = _on_disk(patch)
        _cli(*args, "--out", str(tmp_path / "store"))
    assert len(built) == 1 and len(built[0]) == 40
    with pytest.raises(DataError, match="closed"):  # and its file removed
        built[0][0]
    listed, on_store = _files(tmp_path / "list"), _files(tmp_path / "store")
    assert on_store["results"] == listed["results"]
    assert on_store["samples"] == listed["samples"]
    assert on_store["config"] == listed["config"]
    assert json.loads(listed["results"])["aggregate"]["n_items"] == \
        listed["config"]["selection"]["n_selected"]


@pytest.mark.parametrize("select", SELECTIONS[:3])
def test_consistency_run_over_a_store_equals_the_run_over_the_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, select: list[str]) -> None:
    path = _questions_file(tmp_path / "q.jsonl", 40)
    args = ["consistency", "--dataset", f"jsonl:{path}", "--model", "fake/unstable",
            "--embedder", "hash/default", "-M", "2", "--no-cache", "-q", "--json", *select]
    _cli(*args, "--out", str(tmp_path / "list"))
    with monkeypatch.context() as patch:
        built = _on_disk(patch)
        _cli(*args, "--out", str(tmp_path / "store"))
    assert len(built) == 1
    listed, on_store = _files(tmp_path / "list"), _files(tmp_path / "store")
    assert on_store == listed
    assert len(listed["samples"].splitlines()) == listed["config"]["selection"]["n_selected"]


def test_fewl_run_over_a_store_equals_the_run_over_the_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _questions_file(tmp_path / "q.jsonl", 45)
    args = ["fewl", "run", "--dataset", f"jsonl:{path}", "--answers", "fake/stable",
            "--reference", "fake/pairs", "--reference-samples", "2", "--pairs", "2",
            "--neighbours", "3", "--similarity", "hash/default", "--no-cache", "--sample", "40"]
    _cli(*args, "--out", str(tmp_path / "list"))
    with monkeypatch.context() as patch:
        built = _on_disk(patch)
        _cli(*args, "--out", str(tmp_path / "store"))
    assert len(built) == 1
    listed, on_store = _files(tmp_path / "list"), _files(tmp_path / "store")
    assert on_store == listed
    assert len(listed["samples"].splitlines()) == 40


def test_streamed_fewl_reads_neighbours_from_other_chunks_of_a_store(tmp_path: Path) -> None:
    from veracity.methods.fewl.chunked import stream_fewl
    from veracity.methods.fewl.pairs import PairSettings
    from veracity.methods.fewl.run import AnswerSource, FewlSettings, side_files
    from veracity.runs.common import Context

    words = ("river", "paris", "seven", "blue", "moon", "iron", "salt", "north")
    items = [Item(f"q{i}", f"Which {words[i % 8]} {words[i * 3 % 8]} is number {i}?",
                  (f"gold {i}",)) for i in range(45)]
    sources = [AnswerSource("fake/stable", model="fake/stable"),
               AnswerSource("fake/unstable", model="fake/unstable")]
    settings = FewlSettings(references=("fake/pairs",), reference_samples=2,
                            pairs=PairSettings(r=2), similarity="hash/default", neighbours=3)
    runs = {}
    with ItemStore.build(items, tmp_path, page=7, cached_pages=2) as store:
        for name, given in (("list", items), ("store", store)):
            with Context(cache=None) as ctx:  # chunks of 8: neighbours from other chunks
                runs[name] = stream_fewl(given, sources, settings, ctx, tmp_path / name, "qs",
                                         {"answers": []}, chunk_size=8, generate_chunk=5)
        scattered = store.queries
    assert runs["store"].results == runs["list"].results
    for name in ("results.json", "samples.jsonl", *side_files(runs["list"].records)):
        assert (tmp_path / "store" / name).read_bytes() == (tmp_path / "list" / name).read_bytes()
    records = runs["list"].records_json()
    assert len(records) == 45 and all(len(r["neighbours"]) == 3 for r in records)
    assert any(abs(int(n.lstrip("q")) - int(r["id"].lstrip("q"))) > 8
               for r in records for n in r["neighbours"])
    assert scattered < 200  # pages and a few batched lookups, not a query per neighbour


# --- multiple-choice items -------------------------------------------------------------------


def _mc_file(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({
                "id": f"m{i}", "subject": f"subject_{i % 3}",
                "question": f"Item {i}: which river is number {i * 13 % 97}?",
                "options": [f"river {i}", f"lake {i + 1}", f"sea {i + 2}", f"none {i}"],
                "answer": "ABCD"[i * 7 % 4] if i % 2 else i * 7 % 4,
                "misleading_start": f"Let's reason step by step. Surely it is the lake {i}."})
                     + "\n")
    return path


def test_mc_items_round_trip_and_stream_like_the_list_loader(tmp_path: Path) -> None:
    from veracity.data.mc import load_mc_jsonl, stream_mc_jsonl
    from veracity.data.stored import MCStore

    path = _mc_file(tmp_path / "mc.jsonl", 30)
    for subjects, limit in ((None, None), (["subject_1", "subject_2"], 4)):
        want = load_mc_jsonl(path, subjects, limit)
        assert list(stream_mc_jsonl(path, subjects, limit)) == want
        with MCStore.build(stream_mc_jsonl(path, subjects, limit), tmp_path) as store:
            assert list(store) == want and store[-1] == want[-1]
            assert list(store.select(Selection(None, Sample(5, 2)))) == \
                Selection(None, Sample(5, 2)).apply(want)
    for bad in (b'{"question": "q", "options": ["a", "b", "c", "d"]}\n',
                b'{"question": "q", "options": ["a", "b"], "answer": "A"}\n',
                b'{"question": "q", "options": ["a", "b", "c", "d"], "answer": "E"}\n',
                b'{"question": "q", "options": ["a", "b", "c", "d"], "answer": "A"}\n{]\n'):
        path.write_bytes(bad)
        with pytest.raises(DataError) as listed:
            load_mc_jsonl(path)
        with pytest.raises(DataError) as streamed:
            list(stream_mc_jsonl(path))
        assert str(streamed.value) == str(listed.value)
    _mc_file(path, 6)
    with pytest.raises(DataError, match="no items for subject") as listed:
        load_mc_jsonl(path, ["subject_9"])
    with pytest.raises(DataError) as streamed:
        list(stream_mc_jsonl(path, ["subject_9"]))
    assert str(streamed.value) == str(listed.value)


@pytest.mark.parametrize("select", [[], ["--sample", "13", "--sample-seed", "3"],
                                    ["--limit-per-subject", "5", "--subjects", "subject_0,subject_2"]])
def test_deception_run_over_a_store_equals_the_run_over_the_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, select: list[str]) -> None:
    path = _mc_file(tmp_path / "mc.jsonl", 36)
    args = ["deception", "run", "--dataset", f"mc-jsonl:{path}", "--model", "fake/deceive",
            "--no-cache", "--json", *select]
    _cli(*args, "--out", str(tmp_path / "list"))
    with monkeypatch.context() as patch:
        _on_disk(patch)
        built: list[Any] = []
        real = stored.MCStore.build

        def spy(*a: Any, **kw: Any) -> Any:
            built.append(real(*a, **kw))
            return built[-1]

        patch.setattr(stored.MCStore, "build", spy)
        _cli(*args, "--out", str(tmp_path / "store"))
    assert len(built) == 1
    listed, on_store = _files(tmp_path / "list"), _files(tmp_path / "store")
    assert on_store == listed
    assert len(listed["samples"].splitlines()) == listed["config"]["selection"]["n_selected"]


def test_fewl_select_over_a_store_equals_the_select_over_the_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _questions_file(tmp_path / "q.jsonl", 30)
    args = ["fewl", "select", "--dataset", f"jsonl:{path}", "--candidates", "fake/unstable",
            "--samples", "2", "--reference", "fake/pairs", "--pairs", "2", "--neighbours", "3",
            "--similarity", "hash/default", "--no-cache", "--limit", "25"]
    _cli(*args, "--out", str(tmp_path / "list"))
    with monkeypatch.context() as patch:
        built = _on_disk(patch)
        _cli(*args, "--out", str(tmp_path / "store"))
    assert len(built) == 1
    listed, on_store = _files(tmp_path / "list"), _files(tmp_path / "store")
    assert on_store == listed
    for name in ("icl_prompts.jsonl", "finetune.jsonl"):
        text = (tmp_path / "list" / name).read_text(encoding="utf-8")
        assert text and text == (tmp_path / "store" / name).read_text(encoding="utf-8")
