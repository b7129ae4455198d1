"""Deception runs end to end: Python API and CLI on the fake backend, report, real model."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from data_paths import FIXTURES, full_or_fixture
from local_models import has_local_models
from veracity.backends.base import Capabilities, Outcome
from veracity.backends.fake import FakeBackend
from veracity.client import LLMClient
from veracity.errors import CapabilityError, DataError, ErrorKind
from veracity.methods.deception.cli import deception
from veracity.methods.deception.core import (
    PREFILL_HEAD,
    DeceptionSettings,
    deception_metrics,
    json_escape,
    pairs_from_records,
)
from veracity.methods.deception.core import fake_deceive as deceive
from veracity.methods.deception.report import correlation, section
from veracity.methods.deception.run import run_deception
from veracity.report import build_report
from veracity.runs.common import Context
from veracity.stats import pearson
from veracity.store import RunDir
from veracity.types import Generation, GenRequest

KEYS = ("normal_accuracy", "misleading_accuracy", "susceptibility", "consistency",
        "consistent_correct", "consistent_incorrect", "error_rate_normal",
        "error_rate_misleading", "n_items")


@pytest.fixture
def db() -> str:
    """The full DB-MMLU when it is beside the checkout, else a few rows per subject we wrote
    (tests/fixtures/db-mmlu-mini), so the pipeline runs from a bare clone too."""
    return f"db-mmlu:{full_or_fixture('db-mmlu/DB-MMLU Dataset', 'db-mmlu-mini')}"


def _inject(ctx: Context, spec: str, backend: FakeBackend) -> FakeBackend:
    backend.spec = spec
    ctx.clients[spec] = LLMClient(backend, ctx.cache)
    return backend


def test_fake_run_records_what_the_model_said(ctx: Context, db: str, tmp_path: Path) -> None:
    outcome = run_deception("fake/deceive", db, ctx, out=tmp_path / "run",
                            subjects=["anatomy", "virology"], limit_per_subject=4)
    backend = ctx.clients["fake/deceive"].backend
    assert isinstance(backend, FakeBackend)
    history = backend.history
    assert len(history) == 16 and len(outcome.records) == 8
    # one batch: normal and misleading of an item side by side, shared prompt prefix first
    assert all(r.messages[:2] == history[0].messages[:2] for r in history)
    for k, record in enumerate(outcome.records):
        normal, misleading = history[2 * k], history[2 * k + 1]
        assert normal.messages == misleading.messages
        assert normal.prefill == PREFILL_HEAD + "Let's reason step by step."
        assert misleading.prefill == PREFILL_HEAD + json_escape(str(record.misleading_start))
        assert record.normal.answer == deceive(normal)[-4]
        assert record.misleading.answer == deceive(misleading)[-4]
        assert record.normal.attempts == 1
    assert outcome.results == outcome.results | deception_metrics(
        pairs_from_records(outcome.records)).to_json()
    run = RunDir.open(tmp_path / "run")
    assert run.method == "deception" and run.info["config"]["n_items"] == 8
    assert run.results["n_items"] == 8 and len(list(run.samples())) == 8
    assert set(run.results["per_subject"]) == {"anatomy", "virology"}


def test_known_answers_give_exact_metrics(ctx: Context, db: str) -> None:
    from veracity.data.mc import load_mc

    items = load_mc(db, ["anatomy", "virology"], 5)
    gold = {i.question: i.answer for i in items}
    wrong = {i.question: "ABCD"[("ABCD".index(i.answer) + 1) % 4] for i in items}

    def oracle(request: GenRequest) -> str:
        question = request.messages[-1].content.split("\n")[0].removeprefix("Question: ")
        misled = not request.prefill.endswith("step by step.")
        # misled on anatomy only: anatomy 5/5 -> 0/5, virology 5/5 -> 5/5
        letter = wrong[question] if misled and "anatomy" in str(ids[question]) else gold[question]
        return f'",\n    "Answer": "{letter}"\n}}'

    ids = {i.question: i.id for i in items}
    _inject(ctx, "fake/oracle", FakeBackend(responder=oracle))
    r = run_deception("fake/oracle", db, ctx, subjects=["anatomy", "virology"],
                      limit_per_subject=5).results
    assert (r["normal_accuracy"], r["misleading_accuracy"]) == (1.0, 0.5)
    assert r["susceptibility"] == 2.0 and r["consistency"] == 0.5
    assert (r["consistent_correct"], r["consistent_incorrect"]) == (0.5, 0.0)
    assert r["per_subject"]["anatomy"]["susceptibility"] is None
    assert r["per_subject"]["virology"]["susceptibility"] == 1.0


def test_invalid_answers_are_retried_once_then_dash(ctx: Context, db: str) -> None:
    flaky = run_deception("fake/deceive-flaky", db, ctx, subjects=["marketing"],
                          limit_per_subject=9)
    retried = [s for r in flaky.records for s in (r.normal, r.misleading) if s.attempts == 2]
    assert retried and all(s.answer in "ABCD" and len(s.errors) == 1 for s in retried)
    stages = ctx.clients["fake/deceive-flaky"].stats.by_stage
    assert stages == {"deception: answers": 18, "deception: retry 1": len(retried)}
    history = ctx.clients["fake/deceive-flaky"].backend.history  # type: ignore[attr-defined]
    assert {r.sample_index for r in history[18:]} == {1}

    garbage = run_deception("fake/garbage", db, ctx, subjects=["marketing"], limit_per_subject=3)
    r = garbage.results
    assert r["error_rate_normal"] == r["error_rate_misleading"] == 1.0
    assert r["consistency"] == r["consistent_incorrect"] == 1.0  # "-" == "-"
    assert all(rec.normal.attempts == 2 for rec in garbage.records)
    none = run_deception("fake/garbage", db, ctx, DeceptionSettings(retries=0),
                         subjects=["marketing"], limit_per_subject=3)
    assert all(rec.misleading.attempts == 1 for rec in none.records)


def test_a_request_the_model_rejects_becomes_dash_and_the_run_goes_on(
    ctx: Context, db: str
) -> None:
    def responder(request: GenRequest) -> str:
        normal = request.prefill.endswith("step by step.")  # misleading openings go on
        return deceive(request) if normal else "!error prompt too long"

    _inject(ctx, "fake/picky", FakeBackend(responder=responder))
    outcome = run_deception("fake/picky", db, ctx, subjects=["marketing"], limit_per_subject=3)
    for record in outcome.records:
        assert record.normal.answer in "ABCD"
        assert record.misleading.answer == "-" and record.misleading.attempts == 2
        assert record.misleading.errors[0] == "model rejected the request: prompt too long"
        assert record.misleading.error_kind is ErrorKind.REJECTED  # the model's "-": counted
        assert record.scored
    assert outcome.results["error_rate_misleading"] == 1.0


def test_rerun_makes_no_model_call(cache: object, db: str, tmp_path: Path) -> None:
    from veracity.cache import Cache

    assert isinstance(cache, Cache)
    first_ctx, second_ctx = Context(cache=cache), Context(cache=cache, close_cache=False)
    first = run_deception("fake/deceive-flaky", db, first_ctx, subjects=["nutrition"],
                          limit_per_subject=6)
    second = run_deception("fake/deceive-flaky", db, second_ctx, subjects=["nutrition"],
                           limit_per_subject=6)
    assert first_ctx.model_calls() > 12 and second_ctx.model_calls() == 0
    assert first.records == second.records and first.results == second.results


def test_backend_without_prefill_is_refused(ctx: Context, db: str) -> None:
    class NoPrefill(FakeBackend):
        capabilities = Capabilities(prefill=False)

    _inject(ctx, "fake/plain", NoPrefill("deceive"))
    with pytest.raises(CapabilityError, match="'prefill' capability.*fake/plain"):
        run_deception("fake/plain", db, ctx, subjects=["marketing"], limit_per_subject=1)


def test_dataset_without_openings_is_refused(ctx: Context) -> None:
    with pytest.raises(DataError, match="without a misleading opening.*make-dataset"):
        run_deception("fake/deceive", f"mmlu:{FIXTURES / 'formats' / 'mmlu' / 'dev'}", ctx)


def _cli(*args: str) -> str:
    result = CliRunner().invoke(deception, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_cli_run_json_then_rerun_from_cache(db: str, tmp_path: Path) -> None:
    common = ["run", "--model", "fake/deceive-flaky", "--dataset", db, "--subjects",
              "anatomy,astronomy", "--limit-per-subject", "5", "--out", str(tmp_path / "r"),
              "--cache", str(tmp_path / "c.sqlite")]
    metrics = json.loads(_cli(*common, "--json", "--quiet"))
    for key in (*KEYS, "per_subject"):
        assert key in metrics
    for key in KEYS:
        assert key in metrics["per_subject"]["astronomy"]
    assert metrics["n_items"] == 10 and metrics["settings"]["sampling"]["temperature"] == 0.3
    assert (tmp_path / "r" / "report.html").is_file()
    again = _cli(*common)
    counts = re.search(r"(\d+) model calls, (\d+) cache hits", again)
    assert counts is not None and counts.group(1) == "0" and int(counts.group(2)) > 20
    assert "ALL" in again and "run directory:" in again


def test_cli_greedy_and_errors(db: str, tmp_path: Path) -> None:
    out = _cli("run", "-m", "fake/deceive", "--dataset", db, "--subjects", "marketing",
               "--limit-per-subject", "2", "--greedy", "--no-cache", "--json",
               "--out", str(tmp_path / "g"))
    assert json.loads(out)["settings"]["sampling"]["temperature"] == 0.0
    for args, message in (
        (["--greedy", "--temperature", "0.5"], "cannot be combined"),
        (["--subjects", "astrology"], "astrology"),
    ):
        result = CliRunner().invoke(deception, ["run", "-m", "fake/deceive", "--dataset", db,
                                                "--no-cache", "--out", str(tmp_path / "x"),
                                                *args])
        assert result.exit_code != 0 and message in result.output


def test_cli_score_recorded_and_report(data_dir: Path, tmp_path: Path) -> None:
    db = f"db-mmlu:{data_dir / 'db-mmlu' / 'DB-MMLU Dataset'}"
    from veracity.data.mc import load_mc

    recorded = tmp_path / "Recorded-7B"
    recorded.mkdir()
    for subject in ("anatomy", "virology"):
        items = load_mc(db, [subject])
        lines = [f'{i.answer},"r",{i.answer if k % 2 else "-"},"r",{"ABCD"[k % 4]}'
                 for k, i in enumerate(items)]
        (recorded / f"{subject}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    metrics = json.loads(_cli("score-recorded", "--results", str(recorded), "--dataset", db,
                              "--json", "--out", str(tmp_path / "rec")))
    assert metrics["model"] == "Recorded-7B" and metrics["n_items"] == 154 + 189
    assert set(metrics["per_subject"]) == {"anatomy", "virology"}
    _cli("run", "-m", "fake/deceive", "--dataset", db, "--subjects", "anatomy,virology",
         "--limit-per-subject", "6", "--quiet", "--out", str(tmp_path / "live"),
         "--cache", str(tmp_path / "c.sqlite"))
    _cli("run", "-m", "fake/garbage", "--dataset", db, "--subjects", "anatomy",
         "--limit-per-subject", "3", "--quiet", "--out", str(tmp_path / "bad"), "--no-cache")
    runs = [RunDir.open(tmp_path / name) for name in ("rec", "live", "bad")]
    html = section(runs)
    assert html.count("<img") >= 4 and "Recorded-7B (recorded)" in html
    assert "Pearson r" in html and "susceptibility" in html
    per = runs[0].results["per_subject"]
    xs = [100 * per[s]["normal_accuracy"] for s in sorted(per)]
    ys = [100 * per[s]["misleading_accuracy"] for s in sorted(per)]
    assert correlation(xs, ys).r == pytest.approx(pearson(xs, ys)[0], nan_ok=True)
    report = build_report([r.path for r in runs], tmp_path / "report.html")
    assert "Deception-based benchmarking" in report.read_text(encoding="utf-8")

    fooled = tmp_path / "Fooled-1B"  # always right normally, always misled
    fooled.mkdir()
    items = load_mc(db, ["anatomy"])
    wrong = {"A": "B", "B": "C", "C": "D", "D": "A"}
    (fooled / "anatomy.csv").write_text("".join(f'{i.answer},"r",{i.answer},"r",'
                                                f'{wrong[i.answer]}\n' for i in items))
    scored = json.loads(_cli("score-recorded", "--results", str(fooled), "--dataset", db,
                             "--json", "--out", str(tmp_path / "fooled")))
    assert scored["susceptibility"] is None and scored["susceptibility_unbounded"] is True
    html = section([RunDir.open(tmp_path / "fooled")])
    assert "Unbounded (∞, no correct misleading answer): anatomy" in html
    assert "No subject reaches" not in html


def test_correlation_on_a_known_line() -> None:
    fit = correlation([10.0, 20.0, 30.0, 40.0], [12.0, 19.0, 31.0, 38.0])
    assert fit.slope == pytest.approx(0.9) and fit.intercept == pytest.approx(2.5)
    assert fit.r == pytest.approx(0.993884, abs=1e-6) and 0 < fit.p < 0.01


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
def test_real_bundled_model_small_slice(db: str, tmp_path: Path) -> None:
    args = ["run", "--dataset", db, "--subjects", "marketing", "--limit-per-subject", "2",
            "--greedy", "--max-tokens", "32", "--retries", "0", "--out", str(tmp_path / "real"),
            "--cache", str(tmp_path / "c.sqlite")]
    metrics = json.loads(_cli(*args, "--json"))
    assert metrics["model"] == "llamacpp/default" and metrics["n_items"] == 2
    samples = list(RunDir.open(tmp_path / "real").samples())
    for s in samples:
        for side in ("normal", "misleading"):
            assert s[side]["answer"] in ("A", "B", "C", "D", "-") and s[side]["raw"]
    again = _cli(*args)
    assert "0 model calls" in again


class _CutOff(FakeBackend):
    """Normal answers run out of tokens (finish_reason "length"); misleading ones finish."""

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        out: list[Outcome] = []
        for request in requests:
            self.history.append(request)
            if request.prefill.endswith("Let's reason step by step."):
                out.append(Generation(" First, the river", finish_reason="length"))
            else:
                out.append(Generation(' So A.",\n    "Answer": "A"\n}'))
        return out


def test_reasoning_cut_off_by_max_tokens_is_its_own_error_kind(db: str) -> None:
    from veracity.data.mc import load_mc
    from veracity.methods.deception.core import answer_items

    items = load_mc(db, ["anatomy"], 2)
    backend = _CutOff("deceive")
    records = answer_items(items, LLMClient(backend), DeceptionSettings(retries=1))
    assert len(backend.history) == 6  # 2 normal + 2 misleading, then the 2 normal again
    for record in records:
        assert record.normal.answer == "-" and record.normal.error_kind is ErrorKind.TRUNCATED
        assert record.normal.attempts == 2 and record.normal.finish_reason == "length"
        assert record.misleading.error_kind is None and record.scored
    m = deception_metrics(pairs_from_records(records)).overall
    assert m.error_rate_normal == 1.0 and m.truncation_rate_normal == 1.0
    assert m.truncation_rate_misleading == 0.0
    assert ErrorKind.TRUNCATED.blames_model  # counted wrong, like an invalid answer


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
def test_real_model_with_another_chat_template(db: str, tmp_path: Path) -> None:
    """--chat-template (shared by every method) replaces the GGUF's own template: here the
    Phi-3 template fixture; the run records which template shaped the prompts."""
    template = FIXTURES / "chat_templates" / "phi-3-mini-4k-instruct.jinja"
    out = tmp_path / "phi3-template"
    metrics = json.loads(_cli("run", "--dataset", db, "--subjects", "marketing",
                              "--limit-per-subject", "1", "--greedy", "--max-tokens", "8",
                              "--retries", "0", "--no-cache", "--chat-template", str(template),
                              "--out", str(out), "--json"))
    assert metrics["n_items"] == 1
    identity = json.loads((out / "run.json").read_text())["config"]["model_identity"]
    digest = hashlib.sha256(template.read_text(encoding="utf-8").encode("utf-8")).hexdigest()
    assert identity["chat_template"]["name"] == "file"
    assert digest.startswith(identity["chat_template"]["sha256"])
