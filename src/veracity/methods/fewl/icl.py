"""FEWL-guided in-context learning: held-out questions answered zero-shot and with the K
nearest training questions as worked examples, their answers chosen by each rule; the judge
compares every ICL answer with the zero-shot one in both orders."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.errors import ConfigError
from veracity.methods.fewl.mitigation import (
    MitigationSettings,
    accuracy,
    generate,
    judged_rows,
    pair_samples,
    results_rows,
    select,
    split_items,
    user_turn,
    write_run,
)
from veracity.methods.fewl.selection import nearest
from veracity.methods.fewl.similarity import is_cross_encoder
from veracity.records import Row
from veracity.runs.common import Context
from veracity.runs.result import RunResult
from veracity.store import check_run_target
from veracity.types import Item, Message


def fewl_icl(items: Sequence[Item], settings: MitigationSettings, model: str, examples: int,
             ctx: Context, out: Path | None = None, dataset: str = "") -> RunResult[Row]:
    """Win rate against zero-shot (and accuracy on labels) of K-shot prompts per rule."""
    if out is not None:
        check_run_target(out)  # before any model call
    if examples < 1:
        raise ConfigError("ICL needs at least one example (--examples)")
    settings.check(items)
    train, test = split_items(items, settings)
    chosen, selection = select(train, settings, ctx)
    f = settings.fewl
    spec = f.question_embedder or ("st/default" if is_cross_encoder(f.similarity) else f.similarity)
    embedder = ctx.embedder(spec)
    train_vectors = embedder.embed([i.question for i in train])
    test_vectors = embedder.embed([i.question for i in test])
    client = ctx.client(model)
    zero = generate(client, [[user_turn(settings, i.question)] for i in test], f.max_tokens,
                    f.seed, "icl: zero-shot")
    answers: dict[str, list[str]] = {}
    shots: dict[str, list[list[str]]] = {}
    for rule, picked in chosen.items():
        neighbours = nearest(train_vectors, test_vectors, examples, [a is not None for a in picked])
        conversations = []
        for item, near in zip(test, neighbours, strict=True):
            turns: list[Message] = []
            for k in near:
                turns += [user_turn(settings, train[k].question),
                          Message("assistant", picked[k] or "")]
            conversations.append([*turns, user_turn(settings, item.question)])
        shots[rule] = [[train[k].id for k in near] for near in neighbours]
        answers[rule] = generate(client, conversations, f.max_tokens, f.seed, f"icl: {rule}")
    judged = judged_rows([i.question for i in test], answers, zero, settings, ctx, "icl")
    acc: dict[str, Any] = {}
    correct: dict[str, list[bool | None]] = {}
    for name, texts in {"zero-shot": zero, **answers}.items():
        acc[name], correct[name] = accuracy(test, texts, settings, ctx)
    results = {"model": model, "examples": examples, "n_train": len(train), "n_test": len(test),
               "base_name": "zero-shot", "base_accuracy": acc["zero-shot"],
               "rows": results_rows(judged, acc, f.seed)}
    samples = pair_samples(test, "zero-shot", zero, answers, judged, correct)
    for k, record in enumerate(samples):
        for rule, entry in record["rules"].items():
            entry["examples"] = shots[rule][k]
    return write_run(out, "icl", dataset, settings, results, samples, selection, ctx)
