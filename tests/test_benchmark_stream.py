"""``veracity benchmark`` chunk by chunk through the run driver: chunks of 1, a few or all
write the same files; interrupted mid-run, a rerun resumes with no repeated model call and
writes what an uninterrupted run writes; after a γ run, no new greedy call."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sklearn")

from interrupting import CtrlCOnce  # noqa: E402
from veracity.backends.fake import FakeBackend  # noqa: E402
from veracity.cache import Cache  # noqa: E402
from veracity.methods.benchmark.core import BenchmarkSettings  # noqa: E402
from veracity.methods.benchmark.run import run_benchmark  # noqa: E402
from veracity.methods.gamma.core import GammaSettings  # noqa: E402
from veracity.methods.gamma.run import run_gamma  # noqa: E402
from veracity.runs.common import Context  # noqa: E402
from veracity.types import Item  # noqa: E402

SETTINGS = BenchmarkSettings(budget=3, labels=("contains", "rouge-l"), resamples=200, folds=3)
TIMES = ("wall_seconds", "embed_seconds", "scorer_seconds")
"""What differs between two runs of the same questions (clock readings)."""


def _questions(n: int) -> list[Item]:
    # fake/unstable babbles 8 of 24 words: about a third of its answers contain "paris"
    return [Item(f"q{k}", f"Question {k}?", ("paris",)) for k in range(n)]


def _files(out: Path, drop: tuple[str, ...] = TIMES) -> dict[str, Any]:
    """The run's files, with the cost fields named in ``drop`` taken out."""
    bench = json.loads((out / "benchmark.json").read_text(encoding="utf-8"))
    for cost in bench["costs"].values():
        for key in drop:
            del cost[key]
    rows = list(csv.reader(io.StringIO((out / "benchmark.csv").read_text(encoding="utf-8"))))
    kept = [k for k, name in enumerate(rows[0]) if name not in drop]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    config = json.loads((out / "run.json").read_text(encoding="utf-8"))["config"]
    return {"samples": (out / "samples.jsonl").read_text(encoding="utf-8"), "benchmark": bench,
            "csv": [[row[k] for k in kept] for row in rows], "results_keys": list(results),
            "config": config}


def _run(out: Path, size: int, items: list[Item], cache: Cache | None = None) -> None:
    with Context(cache=cache) as ctx:
        run_benchmark(items, "fake/unstable", "hash/default", SETTINGS, ctx, out, "prompts",
                      chunk_size=size)


@pytest.mark.parametrize("size", [1, 5])
def test_chunks_of_any_size_write_the_same_files(tmp_path: Path, size: int) -> None:
    items = _questions(12)
    _run(tmp_path / "whole", len(items), items)
    _run(tmp_path / "chunked", size, items)
    whole, chunked = _files(tmp_path / "whole"), _files(tmp_path / "chunked")
    assert chunked == whole
    records = [json.loads(line) for line in whole["samples"].splitlines()]
    assert len(records) == 12
    table = whole["benchmark"]["tables"]["contains"]
    assert 0 < table["n_wrong"] < table["n"] == 12  # a real table, not an empty one
    assert "gamma" in table["metrics"] and "fused" in table["metrics"]
    # costs summed over the chunks: the same calls per question
    costs = whole["benchmark"]["costs"]
    assert costs["greedy answers"]["requests"] == 12 and costs["gamma"]["requests"] == 24


def test_an_interrupted_benchmark_resumes_without_a_repeated_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items, out = _questions(12), tmp_path / "run"
    trap = CtrlCOnce(monkeypatch, lambda backend, r: (
        r.messages[-1].content, r.sample_index, r.sampling.temperature, r.logprobs))
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        run_benchmark(items, "fake/unstable", "hash/default", SETTINGS, ctx, None, "prompts",
                      chunk_size=4)
        total = len(trap.sent)  # every request a whole run sends
    trap.sent.clear()
    (tmp_path / "cache.sqlite").unlink()
    trap.after = total // 2  # falls in the second of three chunks
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx, \
            pytest.raises(KeyboardInterrupt):
        run_benchmark(items, "fake/unstable", "hash/default", SETTINGS, ctx, out, "prompts",
                      chunk_size=4)
    # the first chunk's rows are on disk; the run is not finished
    assert len((out / "samples.jsonl").read_text(encoding="utf-8").splitlines()) == 4
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["finished"] is None
    before = len(trap.sent)
    assert 0 < before < total
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        run_benchmark(items, "fake/unstable", "hash/default", SETTINGS, ctx, out, "prompts",
                      chunk_size=4)
        assert ctx.model_calls() == total - before
    assert len(trap.sent) == len(set(trap.sent)) == total  # nothing asked twice
    _run(tmp_path / "fresh", 4, items)
    # the resumed run took some answers from the cache: its model calls and tokens differ
    spent = (*TIMES, "model_calls", "generated_tokens")
    assert _files(out, spent) == _files(tmp_path / "fresh", spent)


@pytest.mark.parametrize("size", [2, 256])
def test_a_benchmark_after_a_gamma_run_makes_no_new_greedy_call(
        ctx: Context, size: int) -> None:
    items = _questions(6)
    gamma = run_gamma(items, "fake/unstable", "hash/default", GammaSettings(n=10), ctx)
    backend = ctx.client("fake/unstable").backend
    assert isinstance(backend, FakeBackend)
    seen = len(backend.history)
    settings = BenchmarkSettings(budget=11, methods=("gamma", "length"), resamples=200, folds=3)
    outcome = run_benchmark(items, "fake/unstable", "hash/default", settings, ctx, None,
                            "prompts", chunk_size=size)
    assert len(backend.history) == seen  # not one request reached the model
    costs = outcome.summary.costs
    assert costs["greedy answers"].requests == 6 and costs["greedy answers"].model_calls == 0
    assert costs["gamma"].requests == 60 and costs["gamma"].model_calls == 0
    # the very answers the γ run scored
    assert [r.answer for r in outcome.records] == [r.answer for r in gamma.records]


def test_the_tables_can_be_recomputed_from_the_run_directory_alone(tmp_path: Path) -> None:
    from veracity.methods.benchmark.records import BenchmarkRecord, BenchmarkSummary
    from veracity.methods.benchmark.tables import Rows, tables
    from veracity.records import read_records
    from veracity.store import RunDir, dumps

    out = tmp_path / "run"
    _run(out, 5, _questions(12))
    run = RunDir.open(out)
    summary = BenchmarkSummary.from_json(
        json.loads((out / "benchmark.json").read_text(encoding="utf-8")))
    rows = Rows()
    rows.add(list(read_records(BenchmarkRecord, run.samples())))
    again = tables(rows, summary.signals, summary.settings)
    # as written (NaN as null)
    assert json.loads(dumps({s: t.to_json() for s, t in again.items()})) == \
        {s: t.to_json() for s, t in summary.tables.items()}
    assert summary.to_json() == json.loads((out / "results.json").read_text(encoding="utf-8"))
