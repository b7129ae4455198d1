"""``fewl validate`` streamed: the same run directory as the in-memory validation, byte for
byte, in any chunk size (2 repeats, J = 2 sampled references, failed pairs, a judge's
Figures 2 and 3); an interrupted run resumed makes exactly the missing calls; measurement
accuracy as counts equals the whole-array computation."""

from __future__ import annotations

import csv
import json
import math
import random
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from interrupting import CtrlCOnce
from veracity.backends.fake import FakeBackend, stable
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.data.labelled import LabelledItem, load_labelled
from veracity.errors import ConfigError
from veracity.methods.fewl import modes
from veracity.methods.fewl.chunked import work_folders
from veracity.methods.fewl.core import FewlScores, Terms, measurement_accuracy
from veracity.methods.fewl.modes import run_fewl_validate
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import FewlSettings
from veracity.methods.fewl.validation.run import (
    AccuracyCounts,
    MeasurementTally,
    stream_fewl_validate,
)
from veracity.runs.common import Context
from veracity.runs.streamed import StoredRecords
from veracity.types import GenRequest, Item

WORDS = ("river", "paris", "seven", "blue", "moon", "iron", "salt", "capital", "north", "king")
FILES = ("results.json", "samples.jsonl", "references.jsonl", "pairs.jsonl")


def _writer(request: GenRequest) -> str:
    """Pairs for every question but those about sums (asked again, then reported as failed);
    sampled answers that depend on the seed, so each repeat has references of its own;
    the judge grades and rates by whether the gold answer is in the answer."""
    prompt = request.messages[-1].content
    if prompt.startswith("You are grading"):
        gold = prompt.split("Correct reference answers: ")[1].split("\n")[0]
        answer = prompt.split("Answer to grade: ")[1].split("\n")[0]
        return "CORRECT" if gold.split()[0] in answer else "INCORRECT"
    if prompt.startswith("You are rating"):
        gold = prompt.split("Reference answer: ")[1].split("\n")[0]
        answer = prompt.split("Answer to rate: ")[1].split("\n")[0]
        return "2" if gold.split()[0] in answer else "no digit" if "salt" in answer else "0"
    if "Write" in prompt:
        if "+" in prompt:
            return "Sorry, I only do words."
        tail = prompt.rsplit("Question:", 1)[-1].strip()
        seed = request.sampling.seed
        return (f"1. Wrong: w{seed} {tail}\n1. Corrected: c{seed} {tail}\n"
                f"2. Wrong: w two {tail}\n2. Corrected: c two {tail}")
    digest = zlib.crc32(f"{prompt}#{request.sample_index}#{request.sampling.seed}".encode())
    return f"{stable(request)} {WORDS[digest % len(WORDS)]} {WORDS[digest // 7 % len(WORDS)]}"


def _ctx(cache: Path | None) -> Context:
    ctx = Context(cache=None if cache is None else Cache(cache))
    client = LLMClient(FakeBackend(responder=_writer), ctx.cache)
    ctx.clients["fake/writer"] = client
    return ctx


def _question(rng: random.Random, i: int) -> str:
    if i % 5 == 3:
        return f"What is {i}+{i}?"
    return f"Which {' '.join(rng.choice(WORDS) for _ in range(4))} is number {i}?"


def _chale(tmp: Path, count: int) -> Path:
    """A CHALE file: mid-halu equal to non-halu on every fourth question (skipped)."""
    rng = random.Random(5)
    data: dict[str, list[str]] = {c: [] for c in ("Question", "Short_ans", "Long_ans", "halu",
                                                  "mid-halu", "non-halu")}
    for i in range(count):
        gold = f"{rng.choice(WORDS)} {i}"
        data["Question"].append(_question(rng, i))
        data["Short_ans"].append(gold)
        data["Long_ans"].append(f"<P> {gold} , as is known . </P>")
        data["non-halu"].append(f"{gold} , as is known .")
        data["mid-halu"].append(f"{gold} , as is known ." if i % 4 == 0
                                else f"{gold} or {rng.choice(WORDS)} .")
        data["halu"].append(f"{rng.choice(WORDS)} {rng.choice(WORDS)} .")
    path = tmp / "chale.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _truthfulqa(tmp: Path, count: int) -> Path:
    rng = random.Random(8)
    path = tmp / "truthfulqa.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["Type", "Category", "Question", "Best Answer", "Correct Answers",
                         "Incorrect Answers", "Source"])
        for i in range(count):
            best = f"{rng.choice(WORDS)} {i}"
            writer.writerow(["Adversarial", "Misc", _question(rng, i), best, best,
                             f"{rng.choice(WORDS)} {rng.choice(WORDS)}; never", "x"])
    return path


def _settings() -> FewlSettings:
    return FewlSettings(references=("fake/writer",), reference_samples=2,
                        pairs=PairSettings(r=2, retries=1), similarity="hash/default",
                        neighbours=3)


def _whole(items: list[LabelledItem], settings: FewlSettings, ctx: Context, out: Path,
           judge: str | None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The in-memory validation, into a run directory."""
    with monkeypatch.context() as patch:
        patch.setattr(modes, "streamable", lambda sources, settings: False)
        return run_fewl_validate(items, settings, ctx, out, "toy", repeats=2, judge=judge)


@pytest.mark.parametrize("kind", ["chale", "truthfulqa"])
def test_streamed_validate_equals_in_memory_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    count = 14 if kind == "chale" else 11
    path = (_chale if kind == "chale" else _truthfulqa)(tmp_path, count)
    items = load_labelled(f"{kind}:{path}")
    settings, cache = _settings(), tmp_path / "cache.sqlite"
    judge = "fake/writer" if kind == "chale" else None
    with _ctx(cache) as ctx:
        whole = _whole(items, settings, ctx, tmp_path / "whole", judge, monkeypatch)
        calls = ctx.model_calls()
    assert not isinstance(whole.records, StoredRecords)
    runs = {}
    with _ctx(None) as ctx:  # no cache: every request sent again, by the route the CLI takes
        routed = run_fewl_validate(items, settings, ctx, tmp_path / "routed", "toy", repeats=2,
                                   judge=judge)
        assert ctx.model_calls() == calls
    assert isinstance(routed.records, StoredRecords)
    runs["routed"] = tmp_path / "routed"
    for chunk, generate in ((1, 1), (3, 2), (count, count)):
        out = tmp_path / f"chunk{chunk}"
        with _ctx(cache) as ctx:
            stream_fewl_validate(items, settings, ctx, out, "toy", 2, judge,
                                 chunk_size=chunk, generate_chunk=generate)
            assert ctx.model_calls() == 0  # the very requests of the in-memory run
        runs[f"chunk{chunk}"] = out
    for name in FILES:
        expected = (tmp_path / "whole" / name).read_bytes()
        for label, out in runs.items():
            assert (out / name).read_bytes() == expected, (label, name)
        assert not work_folders(out)
    results = whole.results
    first = next(iter(results["validation"].values()))
    cell = first["tv"]["fewl"]
    assert len(cell["repeats"]) == 2 and cell["repeats"][0] != cell["repeats"][1]
    assert results["pairs_failed"] == [r["id"] for r in whole.records_json()
                                       if "+" in r["question"]] != []
    worse = items[0].worse[0][0]
    same = [x.id for x in items if x.better.strip() == dict(x.worse)[worse].strip()]
    assert first["identical_skipped"] == len(same)
    assert cell["n"] == len(set(x.id for x in items) - set(results["pairs_failed"]) - set(same))
    assert len(whole.records_json()[0]["references"]) == 2
    if kind == "chale":
        assert first["identical_skipped"] == 4
        figures = results["figures"]
        assert figures["figure2"]["n_questions"] + figures["figure2"]["unjudged"] == count
        assert set(figures["figure3"]["references"]) == {"fake/writer#0", "fake/writer#1"}


def test_interrupted_streamed_validate_resumes_with_exactly_the_missing_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupt = CtrlCOnce(monkeypatch, lambda b, r: (
        r.messages[-1].content, r.sample_index, r.sampling.seed, r.sampling.temperature))
    sent = interrupt.sent
    items = load_labelled(f"chale:{_chale(tmp_path, 12)}")
    settings = _settings()
    with _ctx(None) as ctx:
        _whole(items, settings, ctx, tmp_path / "whole", None, monkeypatch)
    total = len(sent)
    assert len(set(sent)) == total
    sent.clear()
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    interrupt.after = total * 3 // 4  # in the second repeat, after the first wrote its records
    with _ctx(cache) as ctx, pytest.raises(KeyboardInterrupt):
        stream_fewl_validate(items, settings, ctx, out, "toy", 2, chunk_size=4,
                             generate_chunk=3)
    before = len(sent)
    assert total // 2 < before < total
    assert (out / "samples.jsonl").exists() and work_folders(out)
    assert not (out / "results.json").exists()
    with _ctx(cache) as ctx:
        stream_fewl_validate(items, settings, ctx, out, "toy", 2, chunk_size=4,
                             generate_chunk=3)
        assert ctx.model_calls() == total - before
    assert len(sent) == len(set(sent)) == total  # every request sent once over both attempts
    for name in FILES:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert not work_folders(out)


def test_accuracy_counts_on_hand_computed_numbers() -> None:
    counts = AccuracyCounts()
    assert math.isnan(counts.result().accuracy)
    # wins: 0.9 > 0.1 and 0.4 > -0.2; ties: 0.3 = 0.3 and 0.0 = 0.0; loss: 0.2 < 0.6;
    # NaN on either side and inf do not count
    counts.add([0.9, 0.3, float("nan"), 0.2], [0.1, 0.3, 0.5, 0.6])
    counts.add([], [])
    counts.add([0.0, 0.4, 1.0, float("inf")], [0.0, -0.2, float("nan"), 0.1])
    assert counts.result().to_json() == {"accuracy": (2 + 0.5 * 2) / 5, "n": 5, "ties": 2} \
        == {"accuracy": 0.6, "n": 5, "ties": 2}
    rng = np.random.default_rng(4)
    better = rng.choice([0.0, 0.25, 0.5, np.nan], size=301)
    worse = rng.choice([0.0, 0.25, 0.5, np.nan], size=301)
    for step in (1, 7, 301):
        counts = AccuracyCounts()
        for start in range(0, 301, step):
            counts.add(better[start:start + step], worse[start:start + step])
        assert counts.result().to_json() == measurement_accuracy(better, worse)


def _terms(values: list[float]) -> Terms:
    zeros = np.zeros(len(values))
    return Terms(zeros, zeros, np.array(values, dtype=np.float64))


def test_measurement_tally_skips_identical_answers_and_adds_chunks() -> None:
    tally = MeasurementTally("good", ["halu"])
    # question 3's worse answer is the better one (only spaces differ): skipped; question 2
    # unscored; then 0.5 > 0.1 wins, 0.2 = 0.2 ties, 0.1 < 0.3 loses
    chunks = [
        (["a", "b"], ["x", "y"], [0.5, 0.2], [0.1, 0.2]),
        (["c", "d ", "e"], ["z", " d", "w"], [float("nan"), 0.9, 0.1], [0.4, 0.0, 0.3]),
    ]
    for good, bad, scores_good, scores_bad in chunks:
        sets: dict[str, list[str | None]] = {"good": list(good), "halu": list(bad)}
        # a chunk's scores have rows for its neighbours too: the tally reads its own rows
        scores = SimpleNamespace(sets={
            "good": {"tv": {"fewl": _terms([*scores_good, 7.0])}},
            "halu": {"tv": {"fewl": _terms([*scores_bad, -7.0])}}})
        tally.add([Item(g, g) for g in good], sets, [], cast(FewlScores, scores),
                  cast(Any, None))
    assert {k: c.to_json() for k, c in tally.result().items()} == {"good vs halu": {
        "identical_skipped": 1, "tv": {"fewl": {"accuracy": 0.5, "n": 3, "ties": 1}}}}


def test_streamed_validate_checks_before_any_model_call(tmp_path: Path) -> None:
    items = load_labelled(f"chale:{_chale(tmp_path, 4)}")
    with _ctx(None) as ctx:
        with pytest.raises(ConfigError, match="repeats"):
            stream_fewl_validate(items, _settings(), ctx, tmp_path / "a", "toy", 0)
        with pytest.raises(ConfigError, match="pairs need a model"):
            stream_fewl_validate(items, FewlSettings(references_file=tmp_path / "r.jsonl",
                                                     similarity="hash/default"),
                                 ctx, tmp_path / "b", "toy")
        assert ctx.model_calls() == 0
