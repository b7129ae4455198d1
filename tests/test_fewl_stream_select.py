"""``fewl select`` streamed: the same run directory as the in-memory selection, byte for byte
(records, aggregates, ICL prompts, fine-tuning set, side files), in any chunk size, with
candidates from a model or a file; an interruption resumes with exactly the missing calls."""

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
from veracity.errors import DataError
from veracity.methods.fewl import modes
from veracity.methods.fewl.chunked import work_folders
from veracity.methods.fewl.modes import run_fewl_select
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings
from veracity.methods.fewl.selection.run import stream_select
from veracity.runs.common import Context
from veracity.runs.streamed import StoredRecords
from veracity.types import GenRequest, Item

WORDS = ("river", "paris", "seven", "blue", "moon", "iron", "salt", "capital", "north", "king")
FILES = ("results.json", "samples.jsonl", "icl_prompts.jsonl", "finetune.jsonl",
         "references.jsonl", "pairs.jsonl")


def _picky(request: GenRequest) -> str:
    """Pairs for every question but those about sums (asked again, then reported as failed);
    other prompts like ``stable``."""
    prompt = request.messages[-1].content
    if "Write" not in prompt:
        return stable(request)
    if "+" in prompt:
        return "Sorry, I only do words."
    tail = prompt.rsplit("Question:", 1)[-1]
    return (f" w one {tail}\n1. Corrected: c one {tail}\n2. Wrong: w two {tail}\n"
            f"2. Corrected: c two {tail}")


def _ctx(cache: Path | None) -> Context:
    ctx = Context(cache=None if cache is None else Cache(cache))
    ctx.clients["fake/picky"] = LLMClient(FakeBackend(responder=_picky), ctx.cache)
    return ctx


def _setup(tmp: Path, count: int) -> tuple[list[Item], Path, FewlSettings]:
    """Questions (every third multiple choice, every seventh a sum whose pairs fail) and a
    candidates file: one to four candidates a question, some split over two lines, the
    multiple-choice ones starting with a letter, one question with no candidate at all."""
    rng = random.Random(7)
    items, rows = [], []
    for i in range(count):
        words = " ".join(rng.choice(WORDS) for _ in range(4))
        question = f"What is {i}+{i}?" if i % 7 == 3 else f"Which {words} is number {i}?"
        texts = [f"{rng.choice(WORDS)} {rng.choice(WORDS)} {words}" for _ in range(1 + i % 4)]
        if i % 3 == 0:
            options = [[letter, f"{rng.choice(WORDS)} {letter} {i}"] for letter in "ABCD"]
            items.append(Item(f"q{i}", question, (), {"options": options,
                                                      "correct": "ABCD"[i % 4]}))
            texts = [f"{'ABCD'[(i // 3 + k) % 4]}) {text}" for k, text in enumerate(texts)]
        else:
            items.append(Item(f"q{i}", question))
        if i == 5:
            texts = []
        if i % 5 == 1 and len(texts) > 1:
            rows += [{"id": f"q{i}", "answers": texts[:1]}, {"id": f"q{i}", "answers": texts[1:]}]
        else:
            rows.append({"id": f"q{i}", "answers": texts})
    rng.shuffle(rows)
    path = tmp / "candidates.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    settings = FewlSettings(references=("fake/stable", "fake/context"), reference_samples=1,
                            pairs_model="fake/picky", pairs=PairSettings(r=2, retries=1),
                            similarity="hash/default", neighbours=4)
    return items, path, settings


def _in_memory(monkeypatch: pytest.MonkeyPatch, *args: Any, **kw: Any) -> Any:
    """The in-memory selection, run directory and all."""
    with monkeypatch.context() as patch:
        patch.setattr(modes, "streamable", lambda *_: False)
        outcome = run_fewl_select(*args, **kw)
    assert not isinstance(outcome.records, StoredRecords)
    return outcome


def _same_run(a: Path, b: Path) -> None:
    names = [*FILES, *(p.relative_to(a).as_posix() for p in sorted((a / "answers").iterdir()))]
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    info_a, info_b = (json.loads((d / "run.json").read_text()) for d in (a, b))
    assert info_a["config"] == info_b["config"] and info_a["files"] == info_b["files"]
    assert info_b["finished"] and not work_folders(b)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("neighbours_mode", ["nearest", "random"])
def test_sampled_candidates_streamed_equal_in_memory_in_any_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, neighbours_mode: str
) -> None:
    items, _, settings = _setup(tmp_path, 23)
    settings = replace(settings, neighbours_mode=neighbours_mode)
    source = AnswerSource("fake/unstable", model="fake/unstable")
    with _ctx(tmp_path / "cache.sqlite") as ctx:
        whole = _in_memory(monkeypatch, items, source, settings, ctx, tmp_path / "whole", "qs",
                           3, 0.7, 2)
        calls = ctx.model_calls()
        assert calls == 23 * 3 + 23 * 2 + 23 + 3  # candidates, references, pairs, retries
    for chunk, generate in ((1, 1), (3, 2), (1000, 1000)):
        out = tmp_path / f"c{chunk}"
        with _ctx(tmp_path / "cache.sqlite") as ctx:
            streamed = stream_select(items, source, settings, ctx, out, "qs",
                                     {"candidates": whole.run.info["config"]["candidates"]},
                                     3, 0.7, 2, chunk_size=chunk, generate_chunk=generate)
            assert ctx.model_calls() == 0  # every generation cached by the first run
        _same_run(tmp_path / "whole", out)
        assert streamed.results == whole.results
    records = _lines(tmp_path / "c3" / "samples.jsonl")
    assert whole.results["pairs_failed"] == ["q3", "q10", "q17"]
    for rec in records:
        values = [rec["answers"][f"candidate-{k}"]["fewl"] for k in range(3)]
        if rec["pairs_failed"]:
            assert rec["selected"] is None and rec["value"] is None and rec["answer"] is None
            continue
        assert rec["value"] == max(v for v in values if v is not None)
        assert values.index(rec["value"]) == rec["selected"]  # ties to the first
        assert rec["answer"] == rec["answers"][f"candidate-{rec['selected']}"]["answer"]
    selection = whole.results["selection"]
    assert selection["n"] == 20 and selection["n_labelled"] == 8
    icl = _lines(tmp_path / "c1" / "icl_prompts.jsonl")
    by_id = {r["id"]: r for r in records}
    for prompt, rec in zip(icl, records, strict=True):
        shown = [e["id"] for e in prompt["examples"]]
        assert shown == [n for n in rec["neighbours"] if by_id[n]["answer"] is not None][:2]
        assert [e["fewl"] for e in prompt["examples"]] == [by_id[n]["value"] for n in shown]
    assert len(_lines(tmp_path / "c1" / "finetune.jsonl")) == 20


def test_file_candidates_with_min_fewl_and_letters_streamed_equal_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items, path, settings = _setup(tmp_path, 26)
    source = AnswerSource("candidates", path=path)
    with _ctx(tmp_path / "cache.sqlite") as ctx:
        first = _in_memory(monkeypatch, items, source, settings, ctx, None, "qs")
        values = sorted(r.value for r in first.records if r.value is not None)
        threshold = values[len(values) // 2]
        whole = _in_memory(monkeypatch, items, source, settings, ctx, tmp_path / "whole", "qs",
                           icl_examples=3, min_fewl=threshold)
        extra = {"candidates": whole.run.info["config"]["candidates"]}
        for chunk in (1, 3, 1000):
            streamed = stream_select(items, source, settings, ctx, tmp_path / f"c{chunk}", "qs",
                                     extra, icl_examples=3, min_fewl=threshold,
                                     chunk_size=chunk, generate_chunk=4)
            _same_run(tmp_path / "whole", tmp_path / f"c{chunk}")
            assert streamed.results == whole.results
        # through the public entry point, a run directory means the streamed route
        routed = run_fewl_select(items, source, settings, ctx, tmp_path / "routed", "qs",
                                 icl_examples=3, min_fewl=threshold)
    assert isinstance(routed.records, StoredRecords)
    _same_run(tmp_path / "whole", tmp_path / "routed")
    records = _lines(tmp_path / "c3" / "samples.jsonl")
    assert sorted((tmp_path / "c3" / "answers").iterdir())[-1].name == "candidate-3.jsonl"
    no_candidate = records[5]
    assert no_candidate["answer"] is None and no_candidate["selected"] is None
    lines = [row["answers"] for row in _lines(path) if row["id"] == "q11"]
    assert sorted(len(texts) for texts in lines) == [1, 3]  # four candidates over two lines
    assert [a["answer"] for a in records[11]["answers"].values()] == lines[0] + lines[1]
    # hand count: the multiple-choice answers start with their letter, so the letter decides
    mc = [(item, rec) for item, rec in zip(items, records, strict=True)
          if "options" in item.metadata]
    first_right = sum(rec["answers"]["candidate-0"]["answer"][0] == item.metadata["correct"]
                      for item, rec in mc)
    chosen_right = sum(rec["answer"] is not None and rec["answer"][0] == item.metadata["correct"]
                       for item, rec in mc)
    selection = whole.results["selection"]
    assert selection["n_labelled"] == len(mc) == 9
    assert selection["accuracy_first_candidate"] == first_right / 9
    assert selection["accuracy_selected"] == chosen_right / 9
    assert 0 < first_right < 9 and 0 < chosen_right < 9
    exported = [r for r in records if r["value"] is not None and r["value"] >= threshold]
    tune = _lines(tmp_path / "c1" / "finetune.jsonl")
    assert 0 < len(tune) == len(exported) < len(values)
    assert [t["messages"][1]["content"] for t in tune] == [r["answer"] for r in exported]
    for prompt in _lines(tmp_path / "c1" / "icl_prompts.jsonl"):
        assert all(e["fewl"] >= threshold for e in prompt["examples"])


def test_missing_candidates_named_before_any_model_call(tmp_path: Path) -> None:
    items, path, settings = _setup(tmp_path, 8)
    with _ctx(None) as ctx, pytest.raises(DataError, match="no answers for question 'q99'"):
        stream_select([*items, Item("q99", "Unanswered?")], AnswerSource("c", path=path),
                      settings, ctx, tmp_path / "run", "qs", {}, chunk_size=3)
    assert ctx.model_calls() == 0
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_interrupted_select_resumes_with_exactly_the_missing_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupt = CtrlCOnce(monkeypatch, lambda b, r: (
        b.spec, r.messages[-1].content, r.sample_index, r.sampling.seed, r.sampling.temperature))
    sent = interrupt.sent
    items, _, settings = _setup(tmp_path, 20)
    source = AnswerSource("fake/unstable", model="fake/unstable")
    with _ctx(None) as ctx:
        whole = _in_memory(monkeypatch, items, source, settings, ctx, tmp_path / "whole", "qs",
                           3, 0.7)
    total = len(sent)
    assert len(set(sent)) == total
    sent.clear()
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    extra = {"candidates": whole.run.info["config"]["candidates"]}
    # 6 questions a generation chunk: 18 candidates, 12 references, 6 pairs (+ retries);
    # stopped in the middle of the second chunk
    interrupt.after = 45
    with _ctx(cache) as ctx, pytest.raises(KeyboardInterrupt):
        stream_select(items, source, settings, ctx, out, "qs", extra, 3, 0.7, chunk_size=4,
                      generate_chunk=6)
    before = len(sent)
    assert 45 <= before < total - 20
    assert not (out / "samples.jsonl").exists() and work_folders(out)
    with _ctx(cache) as ctx:
        stream_select(items, source, settings, ctx, out, "qs", extra, 3, 0.7, chunk_size=4,
                      generate_chunk=6)
        assert ctx.model_calls() == total - before
    assert len(sent) == len(set(sent)) == total  # every request sent once over both attempts
    _same_run(tmp_path / "whole", out)
