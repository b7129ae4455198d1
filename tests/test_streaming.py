"""Streamed runs: exact running aggregates, chunked = whole run, resume mid-chunk, the sidecar
report of large runs and the single file of small ones."""

from __future__ import annotations

import json
import math
import random
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from veracity.cache import Cache
from veracity.errors import ConfigError
from veracity.methods.gamma.calibration.core import Calibration, fit_curve
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.records import GammaRecord
from veracity.methods.gamma.run import run_gamma, run_gamma_recorded
from veracity.methods.gamma.running import RunningGamma
from veracity.report import build_report, sidecar
from veracity.runs.common import Context
from veracity.runs.streamed import StoredRecords
from veracity.streaming import ExactSum, FloatColumn, MomentSums, chunks
from veracity.types import Item


def test_exact_sum_is_the_rational_sum_in_any_order() -> None:
    values = [0.1] * 10 + [1e-300, 3.5, 2.0**-1074, 1e16, -1e16]
    s = ExactSum()
    s.add(values)
    assert s.fraction() == sum((Fraction(v) for v in values), Fraction(0))
    shuffled = ExactSum()
    rng = random.Random(3)
    order = values[:]
    rng.shuffle(order)
    for part in chunks(order, 4):
        shuffled.add(part)
    assert shuffled.fraction() == s.fraction()
    with pytest.raises(ConfigError):
        s.add([math.nan])


def test_moments_hand_numbers() -> None:
    m = MomentSums()
    m.add([0.1] * 10)  # numpy's mean of these is 0.09999999999999999; the exact one is 0.1
    assert m.mean_stderr() == (0.1, 0.0)
    m = MomentSums()
    m.add([0.0, 0.02])
    m.add([0.1, math.nan])
    mean, se = m.mean_stderr()
    assert mean == pytest.approx(0.04) and se == pytest.approx(math.sqrt(0.0028) / math.sqrt(3))
    one = MomentSums()
    one.add([2.5])
    assert one.mean_stderr()[0] == 2.5 and math.isnan(one.mean_stderr()[1])


def test_float_column_grows() -> None:
    column = FloatColumn(capacity=2)
    for part in chunks(range(11), 3):
        column.extend(part)
    assert len(column) == 11 and column.array().tolist() == [float(i) for i in range(11)]


def _records(count: int, seed: int = 0) -> list[GammaRecord]:
    rng = random.Random(seed)
    out: list[GammaRecord] = []
    for i in range(count):
        gamma = None if i % 17 == 0 else rng.random() ** 3
        out.append(GammaRecord(f"q{i}", "?", "!", gamma, extra={
            "finish_reason": "length" if i % 23 == 0 else "stop", "perturbed_truncated": i % 5}))
    return out


@pytest.mark.parametrize("size", [1, 2, 7, 1000, 5000])
def test_chunked_aggregates_equal_whole_run_to_the_last_digit(size: int) -> None:
    records = _records(5000)
    whole = RunningGamma(0.05)
    whole.add(records)
    chunked = RunningGamma(0.05)
    for part in chunks(records, size):
        chunked.add(part)
    assert chunked.result() == whole.result()  # every float bit for bit
    agg = whole.result()
    values = np.array([r.gamma for r in records if r.gamma is not None])
    assert agg.n_scored == values.size and agg.n_items == 5000
    assert agg.median == float(np.median(values))
    assert agg.share_below_threshold == float((values < 0.05).mean())
    assert agg.mean == pytest.approx(values.mean(), rel=1e-15)
    assert agg.stderr == pytest.approx(values.std(ddof=1) / math.sqrt(values.size), rel=1e-12)
    assert agg.n_truncated == sum(1 for i in range(5000) if i % 23 == 0)


def _items(count: int) -> list[Item]:
    topics = ("capital", "river", "mountain", "language", "currency")
    return [Item(f"q{i}", f"What is the {topics[i % 5]} of place {i}?") for i in range(count)]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("size", [1, 4, 23])
def test_chunked_run_equals_one_chunk_in_memory_and_on_disk(tmp_path: Path, size: int) -> None:
    settings = GammaSettings(n=3)
    items = _items(23)
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        listed = run_gamma(items, "fake/unstable", "hash/default", settings, ctx, chunk_size=size)
        written = run_gamma(items, "fake/unstable", "hash/default", settings, ctx,
                            tmp_path / "run", "prompts", chunk_size=size)
        whole = run_gamma(items, "fake/unstable", "hash/default", settings, ctx,
                          tmp_path / "whole", "prompts", chunk_size=1000)
    assert listed.run is None and isinstance(listed.records, tuple)
    assert written.results == whole.results == listed.results
    assert _lines(tmp_path / "run" / "samples.jsonl") == _lines(tmp_path / "whole" / "samples.jsonl")
    assert (tmp_path / "run" / "results.json").read_bytes() == \
        (tmp_path / "whole" / "results.json").read_bytes()
    assert [r.to_json() for r in written.records] == listed.records_json()
    assert len(written.records) == 23 and written.records[-1].id == "q22"
    assert [r.id for r in written.records[2:5]] == ["q2", "q3", "q4"]


def _recorded(path: Path, count: int) -> Path:
    rng = random.Random(1)
    words = ("the", "answer", "is", "paris", "blue", "seven", "river", "not")
    with path.open("w", encoding="utf-8") as fh:
        for i in range(count):
            answer = "" if i % 13 == 5 else " ".join(rng.choice(words) for _ in range(5)) + f" {i}"
            others = [answer if rng.random() < 0.5 else f"other {rng.choice(words)} {i}"
                      for _ in range(3)]
            fh.write(json.dumps({"id": f"r{i}", "prompt": f"question {i}?", "answer": answer,
                                 "perturbed_answers": others}) + "\n")
    return path


@pytest.mark.parametrize("size", [1, 4, 31])
def test_chunked_recorded_equals_the_whole_file_in_memory(tmp_path: Path, size: int) -> None:
    recorded = _recorded(tmp_path / "rec.jsonl", 31)
    with Context(cache=None) as ctx:
        whole = run_gamma_recorded(recorded, "hash/default", ctx, chunk_size=1000)  # a list
        streamed = run_gamma_recorded(recorded, "hash/default", ctx, out=tmp_path / "run",
                                      chunk_size=size)
    assert streamed.results == whole.results
    assert [r.to_json() for r in streamed.records] == whole.records_json()
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["finished"] and info["config"]["settings"]["n"] == 3
    assert streamed.results["aggregate"]["n_unscored"] == 2  # answers 5 and 18 are empty


def _calibration(model: str, embedder: str, ball: str, n: int) -> Calibration:
    pytest.importorskip("sklearn")
    key = {"model": model, "embedder": embedder, "form": "sin", "ball": ball, "n": n}
    # spread where the fake model's γ on the hash embedder lies (about 0.85 to 1)
    gammas = [0.5, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.98, 0.99, 1.0]
    correct = [True, True, False, True, True, False, True, False, False, False]
    return Calibration([fit_curve(key, gammas, correct, ["labelled"], resamples=20)],
                       source="cal.json")


def _same_run_dirs(streamed: Path, whole: Path) -> None:
    """results.json and samples.jsonl byte for byte, and the same config in run.json."""
    for name in ("results.json", "samples.jsonl"):
        assert (streamed / name).read_bytes() == (whole / name).read_bytes(), name
    config = [json.loads((d / "run.json").read_text())["config"] for d in (streamed, whole)]
    assert json.dumps(config[0]) == json.dumps(config[1])


@pytest.mark.parametrize("size", [1, 3, 1000])
@pytest.mark.parametrize("model", ["fake/unstable", "fake/stable"])  # the second one forced
def test_streamed_calibrated_run_equals_the_whole_run(tmp_path: Path, size: int,
                                                      model: str) -> None:
    settings, items = GammaSettings(n=3), _items(11)
    calibration = _calibration("fake/unstable", "hash/256", "ascii-control", 3)
    forced = model != "fake/unstable"
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        run_gamma(items, model, "hash/default", settings, ctx, tmp_path / "whole", "prompts",
                  calibration, forced, chunk_size=1000)
        streamed = run_gamma(items, model, "hash/default", settings, ctx, tmp_path / "run",
                                "prompts", chunk_size=size, calibration=calibration,
                                force=forced)
    _same_run_dirs(tmp_path / "run", tmp_path / "whole")
    assert streamed.results["calibration"]["forced"] is forced
    curve = calibration.curves[0]
    low, high = curve.verdict_thresholds()
    for record in streamed.records:
        assert record.gamma is not None and record.p_correct == curve.p_correct(record.gamma)
        expected = "trustworthy" if record.gamma < low else \
            "untrustworthy" if record.gamma >= high else "uncertain"
        assert record.extra["verdict"] == expected
    if not forced:  # the stable model's answers never vary: all trustworthy
        assert len({r.extra["verdict"] for r in streamed.records}) == 2  # some of each side
        assert len({r.p_correct for r in streamed.records}) > 5


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_streamed_calibrated_recorded_equals_the_whole_file(tmp_path: Path, size: int) -> None:
    recorded = _recorded(tmp_path / "rec.jsonl", 31)
    calibration = _calibration("recorded", "hash/256", "recorded", 3)
    with Context(cache=None) as ctx:
        run_gamma_recorded(recorded, "hash/default", ctx, out=tmp_path / "whole",
                           calibration=calibration, chunk_size=1000)
        streamed = run_gamma_recorded(recorded, "hash/default", ctx, out=tmp_path / "run",
                                         chunk_size=size, calibration=calibration)
    _same_run_dirs(tmp_path / "run", tmp_path / "whole")
    ps = [r.p_correct for r in streamed.records]
    assert ps.count(None) == 2 and len(set(ps)) > 2  # the two empty answers have no γ


def test_streamed_calibration_mismatch_is_refused_before_any_call(tmp_path: Path) -> None:
    calibration = _calibration("fake/unstable", "hash/256", "ascii-control", 2)  # not N = 3
    with Context(cache=None) as ctx:
        with pytest.raises(ConfigError, match=r"n \(2 vs 3\).*--force"):
            run_gamma(_items(5), "fake/unstable", "hash/default", GammaSettings(n=3), ctx,
                      tmp_path / "run", calibration=calibration)
        assert ctx.model_calls() == 0 and not (tmp_path / "run").exists()
    recorded = _recorded(tmp_path / "rec.jsonl", 7)
    with open(recorded, "a", encoding="utf-8") as fh:  # the last line has N = 2: "2-3"
        fh.write(json.dumps({"id": "r7", "prompt": "q?", "answer": "a b",
                             "perturbed_answers": ["a", "b"]}) + "\n")
    mixed = _calibration("recorded", "hash/256", "recorded", 3)
    with Context(cache=None) as ctx:
        with pytest.raises(ConfigError, match=r"n \(3 vs 2-3\)"):
            run_gamma_recorded(recorded, "hash/default", ctx, out=tmp_path / "rec",
                               calibration=mixed)
        assert ctx.embedder("hash/default").stats.requests == 0  # nothing embedded
        assert not (tmp_path / "rec").exists()


@pytest.mark.parametrize("size", [1, 3, 1000])
@pytest.mark.parametrize("calibrated", [False, True])
def test_streamed_null_control_equals_the_whole_run(tmp_path: Path, size: int,
                                                    calibrated: bool) -> None:
    settings, items = GammaSettings(n=3, control="numeric"), _items(11)
    calibration = _calibration("fake/unstable", "hash/256", "ascii-control", 3) \
        if calibrated else None
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        whole = run_gamma(items, "fake/unstable", "hash/default", settings, ctx,
                          tmp_path / "whole", "prompts", calibration, chunk_size=1000)
        streamed = run_gamma(items, "fake/unstable", "hash/default", settings, ctx,
                             tmp_path / "run", calibration=calibration) if size == 1000 else \
            run_gamma(items, "fake/unstable", "hash/default", settings, ctx, tmp_path / "run",
                         "prompts", chunk_size=size, calibration=calibration)
    _same_run_dirs(tmp_path / "run", tmp_path / "whole")
    assert isinstance(streamed.records, StoredRecords) and whole.run is not None
    control = streamed.results["control"]
    assert control["n_scored"] == 11 and control["n"] == 3
    nulls = [r.gamma_null for r in streamed.records]
    assert all(v is not None for v in nulls) and len(set(nulls)) > 1  # replicates differ
    assert control["mean_gamma_null"] == pytest.approx(sum(nulls) / 11, rel=1e-14)


def test_streamed_null_control_resumes_with_exactly_the_missing_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veracity.backends import fake

    sent: list[tuple[str, int]] = []
    stop = {"after": 115}
    original = fake.FakeBackend.generate

    def counted(self: fake.FakeBackend, requests: list) -> list:  # type: ignore[type-arg]
        if len(sent) >= stop["after"]:
            stop["after"] = 10**9
            raise KeyboardInterrupt
        sent.extend((r.messages[-1].content, r.sample_index) for r in requests)
        return original(self, requests)

    monkeypatch.setattr(fake.FakeBackend, "generate", counted)
    items, settings, out = _items(30), GammaSettings(n=3, control="numeric"), tmp_path / "run"
    # a chunk is 10 x 4 prompts, then 10 x 3 replicates of the control: once 115 are answered
    # the Ctrl-C falls in the second chunk's control
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx, \
            pytest.raises(KeyboardInterrupt):
        run_gamma(items, "fake/unstable", "hash/default", settings, ctx, out, "prompts",
                     chunk_size=10)
    assert len(_lines(out / "samples.jsonl")) == 10
    before = len(sent)
    assert 110 < before < 140
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        resumed = run_gamma(items, "fake/unstable", "hash/default", settings, ctx, out,
                               "prompts", chunk_size=10)
        assert ctx.model_calls() == 210 - before
    assert len(sent) == len(set(sent)) == 210  # every request once, over both attempts
    with Context(cache=None) as ctx:
        fresh = run_gamma(items, "fake/unstable", "hash/default", settings, ctx)
    assert resumed.results["control"] == fresh.results["control"]
    assert [r.to_json() for r in resumed.records] == fresh.records_json()


def test_interrupted_mid_chunk_resumes_without_a_repeated_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veracity.backends import fake

    sent: list[str] = []
    sizes: list[int] = []
    stop = {"after": 50}
    original = fake.FakeBackend.generate

    def counted(self: fake.FakeBackend, requests: list) -> list:  # type: ignore[type-arg]
        if len(sent) >= stop["after"]:
            stop["after"] = 10**9
            raise KeyboardInterrupt
        sizes.append(len(requests))
        sent.extend(r.messages[-1].content for r in requests)
        return original(self, requests)

    monkeypatch.setattr(fake.FakeBackend, "generate", counted)
    items, settings, out = _items(30), GammaSettings(n=3), tmp_path / "run"
    # 10 questions x 4 prompts a chunk, a few at a time to the backend: Ctrl-C once 50 are
    # answered falls in the second chunk
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx, \
            pytest.raises(KeyboardInterrupt):
        run_gamma(items, "fake/unstable", "hash/default", settings, ctx, out, "prompts",
                     chunk_size=10)
    assert len(_lines(out / "samples.jsonl")) == 10  # the first chunk, written as it finished
    assert json.loads((out / "run.json").read_text())["finished"] is None
    before = len(sent)
    assert max(sizes) < 40 and 40 < before < 80  # part of the second chunk answered, cached
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        resumed = run_gamma(items, "fake/unstable", "hash/default", settings, ctx, out,
                               "prompts", chunk_size=10)
        assert ctx.model_calls() == 120 - before
    assert len(sent) == len(set(sent)) == 120  # every prompt sent once, over both attempts
    with Context(cache=None) as ctx:
        fresh = run_gamma(items, "fake/unstable", "hash/default", settings, ctx)
    assert resumed.results["aggregate"] == fresh.results["aggregate"]
    assert [r.to_json() for r in resumed.records] == fresh.records_json()


def _chunk_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    match = re.fullmatch(r'veracityItems\("gamma-all",(\d+),(.*)\);\n', text, re.S)
    assert match is not None
    rows: list[dict[str, Any]] = json.loads(match.group(2))
    return rows


def test_small_run_report_stays_one_file(tmp_path: Path) -> None:
    recorded = _recorded(tmp_path / "rec.jsonl", 40)
    with Context(cache=None) as ctx:
        run_gamma_recorded(recorded, "hash/default", ctx, out=tmp_path / "run")
    report = build_report([tmp_path / "run"], tmp_path / "run" / "report.html")
    html = report.read_text(encoding="utf-8")
    assert not (tmp_path / "run" / "report.items").exists()
    assert "'self'" not in html and "vpaged" not in html.split("<script>")[0]
    assert html.count('"id":"r') == 40  # every item inside the page


def test_large_run_report_pages_from_a_sidecar(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = _recorded(tmp_path / "rec.jsonl", 40)
    with Context(cache=None) as ctx:
        outcome = run_gamma_recorded(recorded, "hash/default", ctx, out=tmp_path / "run")
    monkeypatch.setattr(sidecar, "SIDECAR_THRESHOLD", 30)
    monkeypatch.setattr(sidecar, "CHUNK_ROWS", 7)
    monkeypatch.setattr(sidecar, "WORST", 5)
    monkeypatch.setattr(sidecar, "SAMPLE", 4)
    report = build_report([tmp_path / "run"], tmp_path / "run" / "report.html")
    html = report.read_text(encoding="utf-8")
    files = sorted((tmp_path / "run" / "report.items").iterdir())
    assert [f.name for f in files] == [f"gamma-all-{i:05d}.js" for i in range(6)]  # 40 / 7
    rows = [row for f in files for row in _chunk_rows(f)]
    assert sorted(r["id"] for r in rows) == sorted(f"r{i}" for i in range(40))
    scored = [r["gamma"] for r in rows if r["gamma"] is not None]
    assert scored == sorted(scored) and all(r["gamma"] is None for r in rows[len(scored):])
    assert "script-src 'sha256-" in html and "'self'" in html
    spec = json.loads(re.search(r'id="gamma-all">(.*?)</script>', html).group(1))  # type: ignore[union-attr]
    assert spec["total"] == 40 and spec["scored"] == len(scored) == 37
    assert [c["n"] for c in spec["chunks"]] == [7, 7, 7, 7, 7, 5]
    assert spec["chunks"][0]["lo"] == scored[0] and spec["chunks"][4]["hi"] == scored[34]
    bounded = json.loads(re.search(r'id="gamma-items">(.*?)</script>', html).group(1))  # type: ignore[union-attr]
    why = [r["shown"] for r in bounded["rows"]]
    assert why.count("worst") == 5 and why.count("error") == 3 and why.count("random sample") <= 4
    worst = sorted((r.gamma for r in outcome.records if r.gamma is not None), reverse=True)[:5]
    assert sorted((r["gamma"] for r in bounded["rows"] if r["shown"] == "worst"),
                  reverse=True) == worst
    # a later, smaller report of the same directory drops the old chunks
    monkeypatch.setattr(sidecar, "SIDECAR_THRESHOLD", 1000)
    build_report([tmp_path / "run"], tmp_path / "run" / "report.html")
    assert not (tmp_path / "run" / "report.items").exists()


def test_traffic_report_in_one_pass_matches_the_whole_log(tmp_path: Path) -> None:
    import statistics

    from veracity.report.traffic import build_traffic_report
    from veracity.report.traffic_stream import TrafficSummary, median
    from veracity.traffic import Entry, TrafficLog, iter_traffic, read_traffic

    rng = random.Random(2)
    log = TrafficLog(tmp_path / "traffic.sqlite")
    entries = []
    for i in range(300):
        gamma = None if i % 11 == 0 else round(rng.random(), 2)  # ties among the worst
        entries.append(Entry(f"x{i}", 1_700_000_000.0 + i, f"m{i % 3}", f"prompt {i}",
                             f"answer {i}", gamma, "unscored" if gamma is None else "uncertain",
                             1.0, 2.0, float(i), "empty answer" if gamma is None else None,
                             {"embedder": "hash/256", "form": "sin"},
                             None if i % 2 else gamma))
    log.append_many(entries)
    log.close()
    summary = TrafficSummary(shown=20)
    for entry in iter_traffic(tmp_path / "traffic.sqlite"):
        summary.add(entry)
    everything = read_traffic(tmp_path / "traffic.sqlite")
    expected = sorted((e for e in everything if e.gamma is not None), key=lambda e: -(e.gamma or 0))
    assert [e.id for e in summary.worst()] == [e.id for e in expected[:20]]
    for model, m in summary.models.items():
        mine = [e for e in everything if e.model == model]
        gammas = [e.gamma for e in mine if e.gamma is not None]
        assert m.exchanges == len(mine) and list(m.gammas) == gammas
        assert math.fsum(m.gammas) / len(m.gammas) == statistics.fmean(gammas)
        assert median(m.gammas) == statistics.median(gammas)
        assert median(m.latency) == statistics.median(e.total_ms for e in mine)
    assert summary.errors == {"empty answer": 28} and summary.count == 300
    html = build_traffic_report(tmp_path / "traffic.sqlite", tmp_path / "t.html").read_text()
    assert "300 exchanges" in html and html.count("<details>") == 50


def test_deception_score_recorded_streamed_equals_whole(tmp_path: Path) -> None:
    import shutil

    from test_deception_data import RECORDED, _csv, _tiny_dataset
    from veracity.methods.deception.run import run_deception_recorded

    data = _tiny_dataset(tmp_path)
    (data / "second.csv").write_text((data / "tiny.csv").read_text())
    results = tmp_path / "MyModel"
    results.mkdir()
    (results / "tiny.csv").write_text(_csv(RECORDED), encoding="utf-8")
    flipped = [RECORDED[0], [RECORDED[1][0]] * 5]  # row 2 all the gold letter
    (results / "second.csv").write_text(_csv(flipped), encoding="utf-8")
    whole = run_deception_recorded(results, f"db-mmlu:{data}")  # in memory
    streamed = run_deception_recorded(results, f"db-mmlu:{data}", out=tmp_path / "run")
    assert streamed.results == whole.results and streamed.results["n_subjects"] == 2
    assert [r.to_json() for r in streamed.records] == whole.records_json()
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["config"]["n_items"] == 4 and info["config"]["subjects"] == ["second", "tiny"]
    shutil.rmtree(tmp_path / "run")
