"""FEWL with live models, streamed: answers, references and pairs generated a chunk at a time
equal the in-memory run to the last digit, in any chunk sizes; an interruption in the middle
of generation resumes with no repeated model call."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from interrupting import CtrlCOnce
from veracity.backends.fake import FakeBackend, stable
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.errors import ConfigError, DataError
from veracity.methods.fewl.chunked import stream_fewl, work_folders
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings, side_files
from veracity.runs.common import Context
from veracity.runs.streamed import StoredRecords
from veracity.types import GenRequest, Item

WORDS = ("river", "paris", "seven", "blue", "moon", "iron", "salt", "capital", "north", "king")


def _picky(request: GenRequest) -> str:
    """Pairs for every question but those about sums (asked again, then reported); the
    first attempt of questions about salt gives one pair only. Other prompts like stable."""
    prompt = request.messages[-1].content
    if "Write" not in prompt:
        return stable(request)
    if "+" in prompt:
        return "Sorry, I only do words."
    if "salt" in prompt and request.sample_index == 0:
        return " w salt\n1. Corrected: c salt"
    tail = prompt.rsplit("Question:", 1)[-1]
    return (f" w one {tail}\n1. Corrected: c one {tail}\n2. Wrong: w two {tail}\n"
            f"2. Corrected: c two {tail}")


def _ctx(cache: Path | None) -> Context:
    ctx = Context(cache=None if cache is None else Cache(cache))
    ctx.clients["fake/picky"] = LLMClient(FakeBackend(responder=_picky), ctx.cache)
    return ctx


def _setup(tmp: Path, count: int) -> tuple[list[Item], list[AnswerSource], FewlSettings]:
    """Questions (two sharing an id, sums whose pairs fail), two answering models and one
    answers file, two sampled reference models, pairs from a model that retries."""
    rng = random.Random(11)
    items = []
    for i in range(count):
        words = " ".join(rng.choice(WORDS) for _ in range(4))
        question = f"What is {i}+{i}?" if i % 7 == 3 else f"Which {words} is number {i}?"
        items.append(Item("twin" if i in (4, 9) else f"q{i}", question))
    answers = tmp / "given.jsonl"
    answers.write_text("".join(json.dumps({"id": item.id, "answer": f"{item.question} yes"}) + "\n"
                               for item in items if item.id != "twin")
                       + json.dumps({"id": "twin", "answer": "the twins"}) + "\n",
                       encoding="utf-8")
    sources = [AnswerSource("fake/stable", model="fake/stable"),
               AnswerSource("given", path=answers),
               AnswerSource("fake/unstable", model="fake/unstable")]
    settings = FewlSettings(references=("fake/pairs", "fake/context"), reference_samples=2,
                            pairs_model="fake/picky", pairs=PairSettings(r=2, retries=1),
                            similarity="hash/default", neighbours=4)
    return items, sources, settings


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_live_streamed_equals_in_memory_in_any_chunk_size(tmp_path: Path) -> None:
    items, sources, settings = _setup(tmp_path, 26)
    with _ctx(tmp_path / "cache.sqlite") as ctx:
        whole = run_fewl(items, sources, settings, ctx, dataset="qs")  # no run directory
        calls = ctx.model_calls()
    with _ctx(tmp_path / "cache.sqlite") as ctx:
        small = stream_fewl(items, sources, settings, ctx, tmp_path / "small", "qs",
                            {"answers": []}, chunk_size=5, generate_chunk=3)
        assert ctx.model_calls() == 0  # every generation was cached by the first run
    with _ctx(None) as ctx:  # no cache: every request sent again, in one chunk
        one = stream_fewl(items, sources, settings, ctx, tmp_path / "one", "qs",
                          {"answers": []}, chunk_size=1000, generate_chunk=1000)
        assert ctx.model_calls() == calls
    records = whole.records_json()
    assert [r.to_json() for r in small.records] == [r.to_json() for r in one.records] == records
    assert small.results == one.results == whole.results
    assert small.results["pairs_failed"] == ["q3", "q10", "q17", "q24"]
    assert records[3]["pairs_attempts"] == 2 and records[3]["pairs_raw"].startswith("1. Wrong:")
    assert "fewer than the 1 required" in records[3]["pairs_error"]
    salty = [r for r in records if "salt" in r["question"] and "+" not in r["question"]]
    assert salty and all(r["pairs_attempts"] == 1 and len(r["pairs"]) == 1 for r in salty)
    twins = [r for r in records if r["id"] == "twin"]
    assert twins[0]["answers"]["fake/stable"]["answer"] != twins[1]["answers"]["fake/stable"][
        "answer"]  # generated by position, not merged by id
    assert len(records[0]["references"]) == 4
    run = tmp_path / "small"
    info = json.loads((run / "run.json").read_text())
    assert info["finished"] and info["config"]["reference_models"] == [
        "fake/pairs#0", "fake/pairs#1", "fake/context#0", "fake/context#1"]
    expected = side_files(whole.records)
    for name in ("references.jsonl", "pairs.jsonl", "answers/fake-unstable.jsonl"):
        assert _lines(run / name) == expected[name]
    assert not work_folders(run)
    models = small.results["models"]
    assert models["fake/stable"]["n"] == 26 - 4
    assert set(models) == {"fake/stable", "given", "fake/unstable"}


def test_cli_route_streams_live_runs_with_nearest_and_random_neighbours(
    tmp_path: Path,
) -> None:
    items, sources, settings = _setup(tmp_path, 12)
    drawing = replace(settings, neighbours_mode="random")
    with _ctx(None) as ctx:
        streamed = run_fewl(items, sources, settings, ctx, tmp_path / "a", "qs")
        whole = run_fewl(items, sources, settings, ctx, None, "qs")
        drawn = run_fewl(items, sources, drawing, ctx, tmp_path / "b", "qs")
        drawn_whole = run_fewl(items, sources, drawing, ctx, None, "qs")
    assert isinstance(streamed.records, StoredRecords)
    assert streamed.records_json() == whole.records_json()
    assert isinstance(drawn.records, StoredRecords)
    assert drawn.records_json() == drawn_whole.records_json()
    assert drawn.results == drawn_whole.results


def _run_files(run: Path) -> dict[str, bytes]:
    """Every file a run wrote but its timestamps and the report."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name not in ("run.json", "report.html")}


def test_random_neighbours_streamed_byte_for_byte_as_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same draws, records and aggregates in chunks of 1, 5 and the whole run as in
    memory, and the draws are not the nearest questions."""
    from veracity.methods.fewl import modes

    items, sources, settings = _setup(tmp_path, 26)
    drawing = replace(settings, neighbours_mode="random", seed=3)
    cache = tmp_path / "cache.sqlite"
    with _ctx(cache) as ctx:
        nearest = run_fewl(items, sources, settings, ctx, None, "qs")
    with monkeypatch.context() as patch, _ctx(cache) as ctx:
        patch.setattr(modes, "streamable", lambda *_: False)
        memory = run_fewl(items, sources, drawing, ctx, tmp_path / "memory", "qs")
    assert not isinstance(memory.records, StoredRecords)
    runs = {}
    for chunk, generate in ((1, 1), (5, 3), (1000, 1000)):
        with _ctx(cache) as ctx:
            out = tmp_path / f"chunk-{chunk}"
            runs[chunk] = stream_fewl(items, sources, drawing, ctx, out, "qs", {"answers": []},
                                      chunk_size=chunk, generate_chunk=generate)
            assert ctx.model_calls() == 0
    expected = _run_files(tmp_path / "memory")
    assert {"samples.jsonl", "results.json", "references.jsonl", "pairs.jsonl"} <= set(expected)
    for chunk, result in runs.items():
        assert _run_files(tmp_path / f"chunk-{chunk}") == expected, chunk
        assert result.results == memory.results
    records = memory.records_json()
    drawn = [r["neighbours"] for r in records]
    assert drawn != [r["neighbours"] for r in nearest.records_json()]
    assert all(len(r["neighbours"]) == 4 and max(r["neighbour_cosine"]) <= 0.8 for r in records)
    for run in ("memory", "chunk-5"):
        info = json.loads((tmp_path / run / "run.json").read_text())
        assert info["config"]["settings"]["neighbours_mode"] == "random"


def test_bad_settings_fail_before_any_model_call(tmp_path: Path) -> None:
    items, sources, settings = _setup(tmp_path, 6)
    no_pairs_model = FewlSettings(references_file=tmp_path / "given.jsonl",
                                  similarity="hash/default")
    with _ctx(None) as ctx:
        with pytest.raises(ConfigError, match="pairs need a model"):
            stream_fewl(items, sources, no_pairs_model, ctx, tmp_path / "r1", "qs", {})
        with pytest.raises(DataError, match="no answers for question 'q99'"):
            stream_fewl([*items, Item("q99", "Unanswered?")], sources, settings, ctx,
                        tmp_path / "r2", "qs", {}, chunk_size=4, generate_chunk=2)
        assert ctx.model_calls() == 0


@pytest.mark.parametrize("neighbours_mode", ["nearest", "random"])
def test_interrupted_mid_generation_resumes_without_a_repeated_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, neighbours_mode: str
) -> None:
    interrupt = CtrlCOnce(monkeypatch, lambda b, r: (
        b.spec, r.messages[-1].content, r.sample_index, r.sampling.seed, r.sampling.temperature))
    sent = interrupt.sent
    items, sources, settings = _setup(tmp_path, 20)
    settings = replace(settings, neighbours_mode=neighbours_mode)
    with _ctx(None) as ctx:
        whole = run_fewl(items, sources, settings, ctx, dataset="qs")
    total = len(sent)
    assert len(set(sent)) == total
    sent.clear()
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    # 6 questions a chunk: 2 x 6 answers, 4 x 6 references, 6 pairs and retries; stopped
    # in the middle of the second chunk's generations
    interrupt.after = 50
    with _ctx(cache) as ctx, pytest.raises(KeyboardInterrupt):
        stream_fewl(items, sources, settings, ctx, out, "qs", {}, chunk_size=4,
                    generate_chunk=6)
    before = len(sent)
    assert 50 <= before < total - 20
    assert not (out / "samples.jsonl").exists() and work_folders(out)
    with _ctx(cache) as ctx:
        resumed = stream_fewl(items, sources, settings, ctx, out, "qs", {}, chunk_size=4,
                              generate_chunk=6)
        assert ctx.model_calls() == total - before
    assert len(sent) == len(set(sent)) == total  # every request sent once over both attempts
    assert [r.to_json() for r in resumed.records] == whole.records_json()
    assert resumed.results == whole.results
    assert not work_folders(out)


def _labelled(tmp: Path, count: int) -> tuple[list[Item], list[AnswerSource]]:
    """Multiple-choice questions (options and the correct letter), questions with TruthfulQA
    labels (correct and incorrect answers) and plain ones; a file answering every
    multiple-choice question with its correct letter."""
    rng = random.Random(3)
    items, rows = [], []
    for i in range(count):
        words = " ".join(rng.choice(WORDS) for _ in range(4))
        question = f"Which {words} is number {i}?"
        if i % 3 == 0:
            options = [[letter, f"{rng.choice(WORDS)} {letter} {i}"] for letter in "ABCD"]
            correct = "ABCD"[i % 4]
            items.append(Item(f"q{i}", question, (options["ABCD".index(correct)][1],),
                              {"options": options, "correct": correct}))
            rows.append({"id": f"q{i}", "answer": f"{correct}) {options['ABCD'.index(correct)][1]}"})
        elif i % 3 == 1:
            items.append(Item(f"q{i}", question, (f"{words} yes", "it is so"),
                              {"incorrect_answers": [f"{words} no", "never"]}))
            rows.append({"id": f"q{i}", "answer": f"{words} yes" if i % 2 else "never"})
        else:
            items.append(Item(f"q{i}", question))
            rows.append({"id": f"q{i}", "answer": words})
    path = tmp / "letters.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return items, [AnswerSource("fake/stable", model="fake/stable"),
                   AnswerSource("letters", path=path),
                   AnswerSource("fake/echo", model="fake/echo")]


def test_rank_streamed_equals_in_memory(tmp_path: Path) -> None:
    items, sources = _labelled(tmp_path, 23)
    settings = FewlSettings(references=("fake/pairs",), reference_samples=2,
                            pairs=PairSettings(r=3), similarity="hash/default", neighbours=3)
    with _ctx(tmp_path / "cache.sqlite") as ctx:
        whole = run_fewl(items, sources, settings, ctx, None, "qs", "rank")
        streamed = run_fewl(items, sources, settings, ctx, tmp_path / "run", "qs", "rank")
        small = stream_fewl(items, sources, settings, ctx, tmp_path / "small", "qs",
                            {"answers": []}, "rank", chunk_size=4, generate_chunk=3)
    assert isinstance(streamed.records, StoredRecords)
    assert streamed.results == small.results == whole.results
    assert [r.to_json() for r in small.records] == [r.to_json() for r in streamed.records] \
        == whole.records_json()
    ranking = small.results["ranking"]
    assert ranking["n_labelled"] == 8 and ranking["error_rate"]["letters"] == 0.0
    assert ranking["sample_level"]["n_questions"] == 8
    assert [(p["a"], p["b"]) for p in ranking["sample_level"]["pairs"]] == [
        ("fake/stable", "letters"), ("fake/stable", "fake/echo"), ("letters", "fake/echo")]
    level = ranking["sample_level"]["pairs"][1]["with_penalty"]
    assert level["n"] + level["metric_ties"] <= 8
    first = small.records[0].answers["letters"]
    assert first.extra["choice"] == items[0].metadata["correct"]
    assert "tqa_metric" in small.records[1].answers["fake/echo"].extra
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["config"]["mode"] == "rank" and small.results["mode"] == "rank"
