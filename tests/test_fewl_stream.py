"""FEWL on recorded files, streamed: chunked = whole run to the last digit, the CLI's route,
resume after an interruption mid-chunk with nothing embedded twice."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner

from veracity.cache import Cache
from veracity.embed.hashing import HashEmbedder
from veracity.errors import DataError
from veracity.methods.fewl.chunked import stream_fewl, work_folders
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings
from veracity.methods.fewl.similarity import load_similarity
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.types import Item

WORDS = ("river", "paris", "seven", "blue", "not", "the", "capital", "moon", "iron", "salt")


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _files(tmp: Path, count: int) -> tuple[list[Item], list[AnswerSource], FewlSettings]:
    """Questions, two answer files and the references / pairs files, in shuffled orders,
    with the cases a join must get right: a key by question text, ids split over two lines,
    empty references (ineligible as neighbours), no pairs (not scored), pair counts either
    side of 8 (numpy sums 8 at a time), an empty answer."""
    rng = random.Random(5)

    def text(i: int, n: int = 5) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n)) + f" {i % 7}"

    items = [Item(f"q{i}", f"which {text(i, 3)} question {i}?") for i in range(count)]
    refs, pairs = [], []
    for i, item in enumerate(items):
        found = ["" if i % 9 == 4 else text(i) for _ in range(3)]
        refs.append({"id": item.id, "references": found})
        n_pairs = 0 if i % 11 == 3 else 12 if i % 5 == 0 else 2
        pairs.append({"id": item.id, "pairs": [{"wrong": text(i), "corrected": text(i)}
                                               for _ in range(n_pairs)]})
    refs[2] = {"question": items[2].question, "references": refs[2]["references"]}
    split = pairs[10]["pairs"]
    pairs[10]["pairs"] = split[:5]
    pairs.append({"id": "q10", "pairs": split[5:]})
    sources = []
    for name, skew in (("stable", 0), ("drifting", 3)):
        rows = [{"id": item.id, "answer": "" if i == 6 and skew else
                 (refs[i]["references"][0] if not skew else text(i + skew))}
                for i, item in enumerate(items)]
        rng.shuffle(rows)
        sources.append(AnswerSource(name, path=_write(tmp / f"{name}.jsonl", rows)))
    rng.shuffle(refs)
    rng.shuffle(pairs)
    settings = FewlSettings(references_file=_write(tmp / "refs.jsonl", refs),
                            pairs_file=_write(tmp / "pairs.jsonl", pairs),
                            similarity="hash/default", neighbours=4,
                            pairs=PairSettings(r=12))
    return items, sources, settings


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_streamed_equals_whole_run_in_any_chunk_size(tmp_path: Path) -> None:
    items, sources, settings = _files(tmp_path, 53)
    with Context(cache=None) as ctx:
        whole = run_fewl(items, sources, settings, ctx)  # no run directory: in memory
        small = stream_fewl(items, sources, settings, ctx, tmp_path / "small", "qs",
                            {"answers": []}, chunk_size=5)
        one = stream_fewl(items, sources, settings, ctx, tmp_path / "one", "qs",
                          {"answers": []}, chunk_size=1000)
    records = whole.records_json()
    assert [r.to_json() for r in small.records] == records
    assert _lines(tmp_path / "small" / "samples.jsonl") == _lines(tmp_path / "one" / "samples.jsonl")
    whole_results = dict(whole.results, dataset="qs")
    assert small.results == one.results == whole_results
    models = small.results["models"]
    assert models["stable"]["n"] == 53 - 5 - 6  # 5 without pairs, 6 without references
    assert models["drifting"]["n"] == 53 - 5 - 6 - 1  # and its empty answer
    assert small.results["pairs_failed"] == ["q3", "q14", "q25", "q36", "q47"]
    assert models["stable"]["mean"] > models["drifting"]["mean"]
    by_id = {r["id"]: r for r in records}
    assert len(by_id["q10"]["pairs"]) == 12 and by_id["q2"]["references"][0]
    assert all(n not in ("q4", "q13") for r in records for n in r["neighbours"])  # no refs
    run = tmp_path / "small"
    assert not work_folders(run)
    info = json.loads((run / "run.json").read_text())
    assert info["finished"] and info["config"]["reference_models"] == [
        "refs.jsonl#0", "refs.jsonl#1", "refs.jsonl#2"]
    assert "answers/drifting.jsonl" in info["files"]
    refs = [json.loads(line) for line in _lines(run / "references.jsonl")]
    assert [r["id"] for r in refs] == [i.id for i in items]
    answers = [json.loads(line) for line in _lines(run / "answers" / "drifting.jsonl")]
    assert [a["answer"] for a in answers if a["id"] == "q6"] == [""] and len(answers) == 53


def test_random_neighbours_from_files_streamed_byte_for_byte_as_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from veracity.methods.fewl import modes

    items, sources, settings = _files(tmp_path, 53)
    drawing = replace(settings, neighbours_mode="random", seed=9)
    with monkeypatch.context() as patch, Context(cache=None) as ctx:
        patch.setattr(modes, "streamable", lambda *_: False)
        memory = run_fewl(items, sources, drawing, ctx, tmp_path / "memory", "qs")
    files = {}
    for chunk in (1, 5, 1000):
        with Context(cache=None) as ctx:
            streamed = stream_fewl(items, sources, drawing, ctx, tmp_path / f"c{chunk}", "qs",
                                   {"answers": []}, chunk_size=chunk)
        assert streamed.results == memory.results
        files[chunk] = {p.name: p.read_bytes() for p in sorted((tmp_path / f"c{chunk}").rglob("*"))
                        if p.is_file() and p.name not in ("run.json", "report.html")}
    expected = {p.name: p.read_bytes() for p in sorted((tmp_path / "memory").rglob("*"))
                if p.is_file() and p.name not in ("run.json", "report.html")}
    assert {"samples.jsonl", "results.json", "stable.jsonl", "drifting.jsonl"} <= set(expected)
    assert files[1] == files[5] == files[1000] == expected
    records = memory.records_json()
    # never a question without references, never itself, never above the threshold
    assert all(n not in ("q4", "q13") and n != r["id"] for r in records for n in r["neighbours"])
    assert all(c <= 0.8 for r in records for c in r["neighbour_cosine"])
    with Context(cache=None) as ctx:
        nearest = run_fewl(items, sources, settings, ctx)
    assert [r["neighbours"] for r in records] != [r["neighbours"] for r in nearest.records_json()]


def test_cli_route_scores_files_streamed_as_in_memory(tmp_path: Path) -> None:
    from veracity.cli import main

    items, sources, settings = _files(tmp_path, 30)
    dataset = _write(tmp_path / "qs.jsonl", [{"id": i.id, "question": i.question} for i in items])
    assert settings.references_file and settings.pairs_file and sources[0].path
    args = ["run", "--dataset", f"jsonl:{dataset}", "--answers", str(sources[0].path),
            "--references-file", str(settings.references_file), "--pairs-file",
            str(settings.pairs_file), "--pairs", "12", "--neighbours", "4",
            "--similarity", "hash/default", "--out", str(tmp_path / "run"),
            "--cache", str(tmp_path / "cache.sqlite")]
    result = CliRunner().invoke(main, ["fewl", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "0 model calls" in result.output
    with Context(cache=None) as ctx:
        whole = run_fewl(items, sources[:1], settings, ctx)
    run = RunDir.open(tmp_path / "run")
    assert list(run.samples()) == whole.records_json()
    assert run.results["models"] == whole.results["models"]
    assert (tmp_path / "run" / "report.html").is_file()


def test_missing_answers_named_before_any_record(tmp_path: Path) -> None:
    items, sources, settings = _files(tmp_path, 12)
    with Context(cache=None) as ctx, pytest.raises(DataError, match="no answers for question 'q12'"):
        stream_fewl([*items, Item("q12", "a question nobody answered?")], sources, settings, ctx,
                    tmp_path / "run", "qs", {}, chunk_size=5)
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_interrupted_mid_chunk_resumes_without_embedding_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items, sources, settings = _files(tmp_path, 40)
    embedded: list[str] = []
    stop = {"at": 0}
    original = HashEmbedder.embed

    def counted(self: HashEmbedder, texts: list[str]) -> Any:
        if stop["at"] and len(embedded) >= stop["at"]:
            stop["at"] = 0
            raise KeyboardInterrupt
        embedded.extend(texts)
        return original(self, texts)

    monkeypatch.setattr(HashEmbedder, "embed", counted)
    with Context(cache=None) as ctx:
        whole = run_fewl(items, sources, settings, ctx)
    distinct = len(set(embedded))
    embedded.clear()
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    with Context(cache=Cache(cache)) as ctx:
        # the questions (40) and the first chunks' texts go through; the embedder is stopped
        # in the middle of a later chunk
        ctx.embedder("hash/default").batch_size = 16
        stop["at"] = 40 + distinct // 2
        with pytest.raises(KeyboardInterrupt):
            stream_fewl(items, sources, settings, ctx, out, "qs", {}, chunk_size=8)
    written = len(_lines(out / "samples.jsonl"))
    assert 0 < written < 40 and written % 8 == 0  # whole chunks only, flushed as they came
    assert json.loads((out / "run.json").read_text())["finished"] is None
    before = len(embedded)
    with Context(cache=Cache(cache)) as ctx:
        resumed = stream_fewl(items, sources, settings, ctx, out, "qs", {}, chunk_size=8)
        assert ctx.embedders["hash/default"].stats.texts_embedded == len(embedded) - before
    assert len(embedded) == len(set(embedded)) == distinct  # every text embedded once
    assert [r.to_json() for r in resumed.records] == whole.records_json()
    assert resumed.results["models"] == whole.results["models"]
    assert not work_folders(out)


def test_blocked_neighbour_search_is_the_stable_sort_of_each_row() -> None:
    import numpy as np

    from veracity.methods.fewl.core import nearest_block

    rng = np.random.default_rng(4)
    for _ in range(50):
        # integer vectors: every dot product exact, many ties, whatever the block shapes
        n, k = int(rng.integers(1, 120)), int(rng.integers(0, 9))
        v = rng.integers(-2, 3, size=(n, 4)).astype(np.float64)
        ok = rng.random(n) > 0.2
        cos = v @ v.T
        cos[(cos > 3.0) | ~ok[None, :]] = -np.inf
        np.fill_diagonal(cos, -np.inf)
        order = np.argsort(-cos, axis=1, kind="stable")[:, :k]
        chosen = np.take_along_axis(cos, order, axis=1)
        for block in (1, 5, 8192):
            nb = nearest_block(v.copy(), 0, lambda a, b, v=v: v[a:b], n, k, 3.0, ok, block)
            real = np.isfinite(chosen)
            assert (nb.mask[:, :order.shape[1]] == real).all() and not nb.mask[:, order.shape[1]:].any()
            assert (nb.index[:, :order.shape[1]][real] == order[real]).all()
            assert (nb.cosine[:, :order.shape[1]][real] == chosen[real]).all()


def _chunk_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    return list(json.loads(text[text.index(",", text.index(",") + 1) + 1 : -3]))


def test_large_fewl_report_pages_every_answer_from_a_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the threshold the page keeps the lowest FEWL, a sample and the unscored answers;
    every (question, source) row is beside it, sorted by FEWL; below, one file as before."""
    import re

    from veracity.report import build_report, sidecar

    items, sources, settings = _files(tmp_path, 30)
    with Context(cache=None) as ctx:
        outcome = stream_fewl(items, sources, settings, ctx, tmp_path / "run", "qs",
                              {"answers": []}, chunk_size=8)
    single = build_report([tmp_path / "run"], tmp_path / "run" / "report.html")
    assert not (tmp_path / "run" / "report.items").exists()
    assert "fewl-all" not in single.read_text(encoding="utf-8")
    monkeypatch.setattr(sidecar, "SIDECAR_THRESHOLD", 40)  # 60 rows: 30 questions x 2
    monkeypatch.setattr(sidecar, "CHUNK_ROWS", 25)
    monkeypatch.setattr(sidecar, "WORST", 4)
    monkeypatch.setattr(sidecar, "SAMPLE", 3)
    html = build_report([tmp_path / "run"], tmp_path / "run" / "report.html").read_text(
        encoding="utf-8")
    files = sorted((tmp_path / "run" / "report.items").iterdir())
    assert [f.name for f in files] == [f"fewl-all-{i:05d}.js" for i in range(3)]  # 60 / 25
    rows = [row for f in files for row in _chunk_rows(f)]
    assert sorted((r["id"], r["source"]) for r in rows) == sorted(
        (i.id, s.name) for i in items for s in sources)
    every = {(r.id, name): e.fewl for r in outcome.records for name, e in r.answers.items()}
    assert all(r["fewl"] == every[r["id"], r["source"]] for r in rows)
    scored = [r["fewl"] for r in rows if r["fewl"] is not None]
    assert scored == sorted(scored) and all(r["fewl"] is None for r in rows[len(scored):])
    bounded = json.loads(re.search(r'id="fewl-items">(.*?)</script>', html).group(1))  # type: ignore[union-attr]
    why = [r["shown"] for r in bounded["rows"]]
    unscored = sum(v is None for v in every.values())
    assert why.count("worst") == 4 and why.count("error") == unscored > 0
    lowest = sorted(v for v in every.values() if v is not None)[:4]
    assert sorted(r["fewl"] for r in bounded["rows"] if r["shown"] == "worst") == lowest


def test_the_scorings_embedding_is_done_ahead_while_the_graph_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While an HNSW graph is still being linked, the main thread makes the embedding calls
    every chunk's scoring will make, in the same order with the same texts, so the embedder
    sees the very batches of a run that waited; the scoring then embeds nothing and the
    records are the same to the byte, and so is the search's record in run.json (its recall
    searched behind the scoring). Without a cache nothing is done ahead."""
    import dataclasses
    import threading

    import faiss

    from veracity.methods.fewl import chunked

    items, sources, settings = _files(tmp_path, 60)
    settings = dataclasses.replace(settings, neighbours_index="hnsw")
    calls: list[list[str]] = []
    original = HashEmbedder.embed

    def recorded(self: HashEmbedder, texts: list[str]) -> Any:
        calls.append(list(texts))
        return original(self, texts)

    monkeypatch.setattr(HashEmbedder, "embed", recorded)

    def run(name: str) -> tuple[list[str], list[list[str]]]:
        calls.clear()
        with Context(cache=Cache(tmp_path / f"{name}.sqlite")) as ctx:
            stream_fewl(items, sources, settings, ctx, tmp_path / name, "qs", {}, chunk_size=8)
        return _lines(tmp_path / name / "samples.jsonl"), list(calls)

    real_ahead = chunked.embedding_ahead
    monkeypatch.setattr(chunked, "embedding_ahead", lambda *args: None)
    waited, waited_calls = run("waited")

    released = threading.Event()
    adding = faiss.IndexHNSWFlat.add

    def add(index: object, x: Any) -> None:
        released.wait(timeout=20)  # the graph links once every chunk is embedded ahead
        adding(index, x)

    steps: list[int] = []
    before_scoring: list[int] = []

    def ahead(*args: Any) -> Any:
        steps_of = real_ahead(*args)
        assert steps_of is not None

        def counted(index: Any) -> Any:
            for step in steps_of(index):
                steps.append(1)
                yield step
            before_scoring.append(len(calls))
            released.set()

        return counted

    monkeypatch.setattr(faiss.IndexHNSWFlat, "add", add)
    monkeypatch.setattr(chunked, "embedding_ahead", ahead)
    records, ahead_calls = run("ahead")
    assert len(steps) == 8  # every chunk of 8 of the 60 questions
    assert before_scoring == [len(ahead_calls)]  # the scoring itself embedded nothing
    assert ahead_calls == waited_calls and len(waited_calls) > 8
    assert records == waited
    # the recall, searched behind the scoring there, reaches run.json all the same
    searches = [json.loads((tmp_path / name / "run.json").read_text())["config"]
                ["neighbour_search"] for name in ("waited", "ahead")]
    assert searches[0] == searches[1] and searches[0]["recall_questions"] == 60
    assert searches[0]["recall_at_k"] is not None
    # and the embedder's requests and texts embedded are counted once, as in a run that waited
    counts = [{spec: (used["requests"], used["texts_embedded"]) for spec, used in
               json.loads((tmp_path / name / "run.json").read_text())["stats"].items()
               if spec.startswith("embedder:")} for name in ("waited", "ahead")]
    assert counts[0] == counts[1] and counts[0]
    with Context(cache=None) as ctx:
        uncached = load_similarity("hash/default", ctx.embedder, ctx.scorer, settings.mapping,
                                   settings.similarity_label)
        assert real_ahead(items, cast(Any, None), uncached, 8) is None
