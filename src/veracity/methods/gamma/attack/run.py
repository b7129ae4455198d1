"""Adversarial gamma search runs: one prompt walked on a model, written to a run directory.

``samples.jsonl`` holds one record per step (step 0 = the start), ``results.json`` the
start, final and best points. Every generation is cached, so rerunning the same command
replays the walk without model calls, and an interrupted walk resumes where it stopped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from veracity.jsontypes import JsonObject
from veracity.methods.gamma.attack.core import (
    AttackResults,
    AttackSettings,
    OnStep,
    aggregate,
    walk_attack,
)
from veracity.methods.gamma.attack.records import AttackStep
from veracity.runs.common import Context
from veracity.runs.driver import check_target, save_summary
from veracity.runs.result import RunResult


@dataclass(frozen=True)
class AttackRunConfig:
    """run.json's ``config`` of an adversarial search."""

    model: str
    model_identity: JsonObject
    embedder: str
    prompt: str
    settings: AttackSettings
    model_options: JsonObject

    def to_json(self) -> JsonObject:
        return {"model": self.model, "model_identity": self.model_identity,
                "embedder": self.embedder, "prompt": self.prompt,
                "settings": self.settings.describe() | {"sampling": asdict(self.settings.sampling)},
                "model_options": self.model_options}


def run_attack(
    prompt: str,
    model: str,
    embedder: str,
    settings: AttackSettings,
    ctx: Context,
    out: Path | None = None,
    on_step: OnStep | None = None,
) -> RunResult[AttackStep, AttackResults]:
    """Walk ``prompt`` on ``model``; all generations go through the context's cache."""
    check_target(out)  # before any model call
    client = ctx.client(model)
    cached_embedder = ctx.embedder(embedder)
    paraphraser = ctx.client(settings.paraphraser) if settings.paraphraser else None
    result = walk_attack(prompt, client, cached_embedder, settings, paraphraser, on_step)
    results = AttackResults(client.spec, cached_embedder.spec, settings,
                            aggregate(result, settings.descend))
    config = AttackRunConfig(client.spec, client.backend.identity(), cached_embedder.spec,
                             prompt, settings, ctx.options_record())
    return save_summary(out, "attack", config, result.steps, results, ctx.started, ctx.stats())
