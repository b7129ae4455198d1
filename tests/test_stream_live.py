"""Live deception and self-consistency runs chunk by chunk: in chunks of 1, a few or all, the
run directory equals, byte for byte, what the records kept in a list write; interrupted
mid-chunk, a rerun resumes with no repeated model call; one progress bar over the whole run."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from interrupting import CtrlCOnce
from test_stream_progress import Recorded
from veracity.backends.base import Outcome
from veracity.backends.fake import FakeBackend
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.errors import EmptyReplyError
from veracity.methods.consistency.core import ConsistencySettings
from veracity.methods.consistency.run import run_consistency, summarise
from veracity.methods.deception.core import DeceptionSettings, build_request
from veracity.methods.deception.core import fake_deceive as deceive
from veracity.methods.deception.core import fake_deceive_flaky as deceive_flaky
from veracity.methods.deception.run import run_deception
from veracity.report import build_report
from veracity.runs.common import Context
from veracity.runs.driver import save_run
from veracity.stats import histogram, mean_stderr
from veracity.store import dumps
from veracity.types import GenRequest, Item, MCItem

SPEC = "mc-jsonl:items.jsonl"  # named in results.json only: the items are given


def _digest(text: str) -> int:
    return hashlib.sha256(text.encode("utf-8")).digest()[0]


def _patchy(request: GenRequest) -> str:
    """fake/deceive-flaky (an invalid first answer now and then: retried)."""
    return deceive_flaky(request)


class Patchy(FakeBackend):
    """Some misleading answers come back empty: no answer at all, the item unscored."""

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        out = super().generate(requests)
        for k, request in enumerate(requests):
            question = request.messages[-1].content
            misleading = not request.prefill.endswith("step by step.")
            if misleading and "#0 " not in question and _digest(question) % 6 == 1:
                out[k] = EmptyReplyError("the reply has no text")
        return out


def _mc_items(count: int) -> list[MCItem]:
    """Three subjects interleaved: 'easy' (gold = the fake's normal answer), 'hard' (never the
    normal answer) and 'mixed'; every item with a misleading opening."""
    items: list[MCItem] = []
    for i in range(count):
        subject = ("easy", "hard", "mixed")[i % 3]
        base = MCItem(f"{subject}/{i}", subject, f"#{i} What is {i} times {i + 3}?",
                      (str(i * (i + 3)), str(i + 1), str(2 * i), str(i * i)), "A",
                      f"Let's reason step by step. Surely {i} times {i + 3} is {2 * i}.")
        normal = deceive(build_request(base, "normal"))[-4]
        gold = {"easy": normal, "hard": "ABCD"[("ABCD".index(normal) + 1) % 4],
                "mixed": "ABCD"[i % 4]}[subject]
        items.append(MCItem(base.id, subject, base.question, base.options, gold,
                            base.misleading_start))
    return items


def _inject(ctx: Context, backend: FakeBackend) -> str:
    ctx.clients[backend.spec] = LLMClient(backend, ctx.cache, ctx.progress)
    return backend.spec


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _config(run: Path) -> dict[str, object]:
    config: dict[str, object] = json.loads(_text(run / "run.json"))["config"]
    return config


@pytest.mark.parametrize("size", [1, 3, None])
def test_streamed_deception_writes_what_the_whole_run_writes(tmp_path: Path,
                                                             size: int | None) -> None:
    items = _mc_items(31)
    settings = DeceptionSettings(threshold=0.4)
    with Context(cache=None) as ctx:  # every answer asked again: nothing comes from a cache
        whole = run_deception(_inject(ctx, Patchy(responder=_patchy, name="patchy")), SPEC, ctx,
                              settings, items=items, chunk_size=len(items))
        whole_calls = ctx.model_calls()
    assert whole.run is None  # no --out: the records in a list
    save_run(tmp_path / "whole", "deception", {}, whole.records, whole.results)
    with Context(cache=None) as ctx:
        streamed = run_deception(_inject(ctx, Patchy(responder=_patchy, name="patchy")), SPEC,
                                 ctx, settings, tmp_path / "streamed", items=items,
                                 chunk_size=size or len(items))
        assert ctx.model_calls() == whole_calls
    assert streamed.results == whole.results
    for name in ("results.json", "samples.jsonl"):  # to the last digit, key for key
        assert _text(tmp_path / "streamed" / name) == _text(tmp_path / "whole" / name)
    r = streamed.results
    # the test means something: retries, unscored items, and a subject in and out of S'
    assert 0 < r["n_unscored"] < 10 and r["susceptibility_subjects"] == ["easy"]
    assert r["per_subject"]["easy"]["normal_accuracy"] == 1.0
    assert any(rec.normal.attempts == 2 for rec in whole.records)
    assert [rec.id for rec in streamed.records] == [i.id for i in items]
    config = _config(tmp_path / "streamed")
    assert config["n_items"] == 31 and config["subjects"] == ["easy", "hard", "mixed"]
    assert config["source"] == "live" and config["settings"] == json.loads(dumps(settings.describe()))
    assert json.loads(_text(tmp_path / "streamed" / "run.json"))["finished"]


def test_deception_with_out_streams_and_reports(tmp_path: Path) -> None:
    items = _mc_items(12)
    shown = Recorded()
    with Context(cache=Cache(tmp_path / "cache.sqlite"), progress=shown) as ctx:
        outcome = run_deception("fake/deceive-flaky", SPEC, ctx, items=items,
                                out=tmp_path / "run")
        retries = ctx.clients["fake/deceive-flaky"].stats.by_stage["deception: retry 1"]
    assert shown.starts == [("deception: answers", 24)] and shown.finished == 1
    assert shown.updates[-1][0] == 24 + retries > 24  # retries carry the bar past its total
    assert outcome.run is not None and len(outcome.records) == 12
    html = _text(build_report([tmp_path / "run"], tmp_path / "run" / "report.html"))
    assert "easy" in html and "mixed" in html


def _ctrl_c_once_answered(monkeypatch: pytest.MonkeyPatch, answered: int,
                          key: Callable[[GenRequest], object]) -> list[object]:
    """The fake backend raises Ctrl-C once, on the first call after ``answered`` requests;
    returns the list of ``key`` of every request it answers, before and after."""
    return CtrlCOnce(monkeypatch, lambda _, r: key(r), answered).sent


def test_deception_interrupted_mid_chunk_resumes_without_a_repeated_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items, out = _mc_items(30), tmp_path / "run"
    with Context(cache=None) as ctx:
        fresh = run_deception("fake/deceive-flaky", SPEC, ctx, items=items)
        total = ctx.model_calls()
    sent = _ctrl_c_once_answered(monkeypatch, 30,
                                 lambda r: (r.messages[-1].content, r.prefill, r.sample_index))
    # 10 items a chunk (20 answers and their retries), a few at a time to the backend: Ctrl-C
    # once 30 are answered falls in the second chunk
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx, \
            pytest.raises(KeyboardInterrupt):
        run_deception("fake/deceive-flaky", SPEC, ctx, DeceptionSettings(), out, items=items,
                      chunk_size=10)
    lines = _text(out / "samples.jsonl").splitlines()
    assert len(lines) == 10  # the first chunk, written as it finished
    assert json.loads(_text(out / "run.json"))["finished"] is None
    before = len(sent)
    assert 20 < before < 40 < total  # the first chunk (20 + retries) and part of the second
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        resumed = run_deception("fake/deceive-flaky", SPEC, ctx, items=items, out=out)
        assert ctx.model_calls() == total - before
    assert len(sent) == len(set(sent)) == total  # every request sent once over both attempts
    assert resumed.results == fresh.results
    assert [r.to_json() for r in resumed.records] == [r.to_json() for r in fresh.records]


def _questions(count: int) -> list[Item]:
    return [Item(f"q{i}", f"Question {i}: what is {i % 5} plus {i}?") for i in range(count)]


def _varied(request: GenRequest) -> str:
    """Stable answers for some questions, varied samples for others, an empty greedy answer
    (unscored) now and then."""
    question = request.messages[-1].content
    k = int(question.split(":")[0].split()[-1])
    if k % 4 == 0:
        return f"It is {k % 5 + k}."
    if k % 9 == 4 and request.sampling.temperature == 0:
        return "   "
    return f"maybe {request.sample_index * (k % 7)} or {k} or else {request.sample_index}"


@pytest.mark.parametrize("size", [1, 3, None])
def test_streamed_consistency_writes_what_the_whole_run_writes(tmp_path: Path,
                                                               size: int | None) -> None:
    items, settings = _questions(29), ConsistencySettings(m=3)
    with Context(cache=None) as ctx:
        whole = run_consistency(items, _inject(ctx, FakeBackend(responder=_varied,
                                                                name="varied")),
                                "hash/default", settings, ctx, None, "prompts",
                                chunk_size=len(items))
        whole_calls = ctx.model_calls()
    assert whole.run is None
    save_run(tmp_path / "whole", "consistency", {}, whole.records, whole.results)
    with Context(cache=None) as ctx:
        streamed = run_consistency(items, _inject(ctx, FakeBackend(responder=_varied,
                                                                   name="varied")),
                                   "hash/default", settings, ctx, tmp_path / "streamed",
                                   "prompts", chunk_size=size or len(items))
        assert ctx.model_calls() == whole_calls == 29 * 4
    assert streamed.results == whole.results
    for name in ("results.json", "samples.jsonl"):
        assert _text(tmp_path / "streamed" / name) == _text(tmp_path / "whole" / name)
    r = streamed.results
    scores = [rec.score for rec in whole.records if rec.score is not None]
    assert r["n_unscored"] == 2 and r["n_scored"] == len(scores) == 27  # 13 and 22
    assert 0.0 < min(scores) < 1.0 and max(scores) == pytest.approx(1.0)
    # the mean is the exactly rounded one; numpy's (pairwise sums) agrees to rounding
    assert r["mean_score"] == float(sum(map(Fraction, scores)) / len(scores))
    mean, stderr = mean_stderr(scores)
    assert r["mean_score"] == pytest.approx(mean, rel=1e-15)
    assert r["stderr"] == pytest.approx(stderr, rel=1e-12)
    assert streamed.summary.histogram == histogram(scores, bins=20, upper=1.0)
    assert _config(tmp_path / "streamed")["settings"] == settings.describe()


def test_consistency_summary_by_hand() -> None:
    from veracity.methods.consistency.records import ConsistencyRecord

    def rec(score: float | None) -> ConsistencyRecord:
        return ConsistencyRecord("q", "p", "a", score)

    found = summarise([rec(0.1)] * 10 + [rec(None), rec(1.0)])
    # numpy's mean of ten 0.1 is 0.09999999999999999; the exact sums give 0.1 + 0.9 / 11
    assert found.mean_score == float(Fraction(0.1) * 10 / 11 + Fraction(1.0) / 11)
    assert found.histogram.counts[2] == 10 and found.histogram.counts[19] == 1
    assert found.n_scored == 11 and found.n_unscored == 1
    values = np.array([0.1] * 10 + [1.0])
    assert found.stderr == pytest.approx(values.std(ddof=1) / math.sqrt(11), rel=1e-12)


def test_consistency_interrupted_mid_chunk_resumes_without_a_repeated_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _ctrl_c_once_answered(
        monkeypatch, 30, lambda r: (r.messages[-1].content, r.sample_index, r.sampling.temperature))
    items, settings, out = _questions(20), ConsistencySettings(m=3), tmp_path / "run"
    shown = Recorded()
    # 5 questions x 4 answers a chunk: Ctrl-C once 30 are answered falls in the second chunk
    with Context(cache=Cache(tmp_path / "cache.sqlite"), progress=shown) as ctx, \
            pytest.raises(KeyboardInterrupt):
        run_consistency(items, "fake/unstable", "hash/default", settings, ctx, out, "prompts",
                        chunk_size=5)
    assert shown.starts == [("consistency: answers", 80)] and shown.finished == 1
    assert len(_text(out / "samples.jsonl").splitlines()) == 5
    assert json.loads(_text(out / "run.json"))["finished"] is None
    before = len(sent)
    assert 20 < before < 40
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        resumed = run_consistency(items, "fake/unstable", "hash/default", settings, ctx, out,
                                  "prompts")
        assert ctx.model_calls() == 80 - before
    assert len(sent) == len(set(sent)) == 80
    with Context(cache=None) as ctx:
        fresh = run_consistency(items, "fake/unstable", "hash/default", settings, ctx, None,
                                "prompts")
    assert resumed.results == fresh.results
    assert [r.to_json() for r in resumed.records] == [r.to_json() for r in fresh.records]
