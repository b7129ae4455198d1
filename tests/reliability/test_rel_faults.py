"""Seeded faults on every reply path: each item ends correct or with an explicit error, none
silently wrong, and a rerun on the healed server mends every item."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faults import MARK, FaultPlan, fast_sleep, letter_answer
from mock_openai import MockOpenAI
from veracity.cache import Cache
from veracity.methods.deception.core import DeceptionSettings
from veracity.methods.deception.records import DeceptionRecord
from veracity.methods.deception.run import run_deception
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.run import run_gamma
from veracity.runs.common import Context
from veracity.types import Item, MCItem, Sampling

ITEMS = [Item(f"q{i}", f"What is {i} plus {i}?" + (f" {MARK}" if i % 5 == 0 else ""))
         for i in range(14)]
GAMMA = GammaSettings(n=4, sampling=Sampling(max_tokens=16))
MC_ITEMS = [MCItem(f"s{i % 2}/{i}", f"s{i % 2}", f"Which letter is number {i}?",
                   ("w", "x", "y", "z"), "ABCD"[i % 4], misleading_start=f"Surely not {i}.")
            for i in range(12)]


def _context(url: str, cache: Cache, max_retries: int = 5, **http: Any) -> Context:
    options = {"base_url": url, "timeout": 0.3, "max_concurrency": 8, "max_retries": max_retries,
               "sleep": fast_sleep, **http}
    return Context(cache=cache, model_options={"openai": options}, close_cache=False)


def _gamma(url: str, cache: Cache, max_retries: int = 5) -> list[dict[str, Any]]:
    ctx = _context(url, cache, max_retries)
    try:
        return run_gamma(ITEMS, "openai/mock", "hash/default", GAMMA, ctx).records_json()
    finally:
        ctx.close()


def _deception(url: str, cache: Cache, max_retries: int = 5) -> tuple[list[DeceptionRecord], Any]:
    ctx = _context(url, cache, max_retries, prefill_mode="continue")
    try:
        outcome = run_deception("openai/mock", "mc-jsonl:unused.jsonl", ctx,
                                DeceptionSettings(retries=1), items=MC_ITEMS)
        return list(outcome.records), outcome.results
    finally:
        ctx.close()


def _gamma_verdicts(records: list[dict[str, Any]], truth: list[dict[str, Any]]) -> dict[str, int]:
    keys = ("answer", "perturbed_answers", "gamma", "replaced_chars", "error")
    out = {"correct": 0, "reported": 0, "wrong": 0}
    for got, want in zip(records, truth, strict=True):
        if all(got[k] == want[k] for k in keys):
            out["correct"] += 1
        elif got["gamma"] is None and got["error"] and got["error_kind"] in ("server", "empty"):
            out["reported"] += 1
        else:
            out["wrong"] += 1
    return out


def _deception_verdicts(records: list[DeceptionRecord],
                        truth: list[DeceptionRecord]) -> dict[str, int]:
    out = {"correct": 0, "reported": 0, "wrong": 0}
    for got, want in zip(records, truth, strict=True):
        sides = [(s.answer, s.error_kind) for s in (got.normal, got.misleading)]
        if sides == [(s.answer, s.error_kind) for s in (want.normal, want.misleading)]:
            out["correct"] += 1
        elif not got.scored:
            out["reported"] += 1
        else:
            out["wrong"] += 1
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_gamma_under_faults_is_never_silently_wrong_and_heals(
    tmp_path: Path, server: MockOpenAI, plan: FaultPlan, seed: int
) -> None:
    truth = _gamma(server.url, Cache(tmp_path / "truth.sqlite"))
    assert all(r["gamma"] is not None for r in truth)
    assert [r["replaced_chars"] > 0 for r in truth] == [MARK in item.question for item in ITEMS]
    assert all("\ufffd" in r["answer"] for r in truth if r["replaced_chars"])

    plan.reset(0.3, seed)
    cache = Cache(tmp_path / "cache.sqlite")
    faulty = _gamma(server.url, cache)
    verdicts = _gamma_verdicts(faulty, truth)
    assert verdicts["wrong"] == 0, verdicts
    assert sum(plan.counts.get(k, 0) for k in ("null-content", "truncated", "no-choices")) > 0

    plan.reset(0.0)
    healed = _gamma(server.url, cache)
    assert _gamma_verdicts(healed, truth) == {"correct": len(ITEMS), "reported": 0, "wrong": 0}


def test_gamma_server_fault_after_retries_is_an_explicit_server_error(
    tmp_path: Path, server: MockOpenAI, plan: FaultPlan
) -> None:
    truth = _gamma(server.url, Cache(tmp_path / "truth.sqlite"))
    plan.reset(0.5, 3, ("500", "truncated", "no-message", "error-200"))
    records = _gamma(server.url, Cache(tmp_path / "cache.sqlite"), max_retries=0)
    verdicts = _gamma_verdicts(records, truth)
    assert verdicts["wrong"] == 0 and verdicts["reported"] > 0, verdicts
    for record in records:
        if record["error"]:
            assert record["error_kind"] == "server"
            assert record["error"].startswith("server fault: ")


@pytest.mark.parametrize("seed", [1, 2])
def test_deception_under_faults_never_blames_the_model_and_heals(
    tmp_path: Path, server: MockOpenAI, plan: FaultPlan, seed: int
) -> None:
    plan.answer = letter_answer
    truth, truth_results = _deception(server.url, Cache(tmp_path / "truth.sqlite"))
    invalid = [r for r in truth if r.normal.answer == "-" or r.misleading.answer == "-"]
    assert invalid and all(r.scored for r in truth)  # the model's own "-" counts
    assert truth_results["n_unscored"] == 0

    plan.reset(0.3, seed)
    cache = Cache(tmp_path / "cache.sqlite")
    records, results = _deception(server.url, cache)
    verdicts = _deception_verdicts(records, truth)
    assert verdicts["wrong"] == 0, verdicts
    assert results["n_unscored"] == verdicts["reported"]
    assert results["n_items"] == verdicts["correct"]

    plan.reset(0.0)
    healed, healed_results = _deception(server.url, cache)
    assert _deception_verdicts(healed, truth) == {"correct": len(MC_ITEMS), "reported": 0, "wrong": 0}
    assert healed_results == truth_results
