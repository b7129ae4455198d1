"""Adversarial gamma search runs: one prompt walked on a model, written to a run directory.

``samples.jsonl`` holds one record per step (step 0 = the start), ``results.json`` the
start, final and best points. Every generation is cached, so rerunning the same command
replays the walk without model calls, and an interrupted walk resumes where it stopped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from veracity.methods.attack import AttackResult, AttackSettings, OnStep, run_attack, summarize
from veracity.runs.common import Context
from veracity.store import RunDir, check_run_target


@dataclass
class AttackOutcome:
    """The trajectory, the aggregates, and the run directory if one was written."""

    result: AttackResult
    results: dict[str, Any]
    run: RunDir | None


def attack_run(
    prompt: str,
    model: str,
    embedder: str,
    settings: AttackSettings,
    ctx: Context,
    out: Path | None = None,
    on_step: OnStep | None = None,
) -> AttackOutcome:
    """Walk ``prompt`` on ``model``; all generations go through the context's cache."""
    if out is not None:
        check_run_target(out)  # before any model call
    client = ctx.client(model)
    cached_embedder = ctx.embedder(embedder)
    paraphraser = ctx.client(settings.paraphraser) if settings.paraphraser else None
    result = run_attack(prompt, client, cached_embedder, settings, paraphraser, on_step)
    results = {
        "method": "attack",
        "model": client.spec,
        "embedder": cached_embedder.spec,
        "settings": settings.describe(),
        **summarize(result, settings.descend),
    }
    run = None
    if out is not None:
        config = {
            "model": client.spec,
            "model_identity": client.backend.identity(),
            "embedder": cached_embedder.spec,
            "prompt": prompt,
            "settings": settings.describe() | {"sampling": asdict(settings.sampling)},
            "model_options": ctx.options_record(),
        }
        run = RunDir.create(out, "attack", config, ctx.started)
        run.write_samples(result.steps)
        run.write_results(results)
        run.finish(ctx.stats())
    return AttackOutcome(result, results, run)
