"""FEWL-guided in-context learning (§5.1, Table 6): held-out questions answered with the K
nearest pool questions as worked examples, their answers chosen by each rule; the judge
compares the FEWL-guided answers with the baseline-guided ones head to head, in both orders.
Zero-shot answers are an optional third arm, each rule judged against them."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.methods.fewl.mitigation.core import (
    MitigationSettings,
    accuracy,
    generate,
    judged_rows,
    results_rows,
    select,
    split_items,
    user_turn,
    write_run,
)
from veracity.methods.fewl.mitigation.examples import (
    FORMATS,
    ICL_TEMPLATE,
    chat_turns,
    check_template,
    pool_flags,
    single_message,
)
from veracity.methods.fewl.mitigation.judge import Judged, judge_pairs
from veracity.methods.fewl.mitigation.paper import comparison_rows, comparisons
from veracity.methods.fewl.mitigation.records import (
    Accuracy,
    Comparison,
    IclPair,
    IclSummary,
    MitigationRecord,
    MitigationResults,
)
from veracity.methods.fewl.mitigation.selection import nearest
from veracity.methods.fewl.similarity import is_cross_encoder
from veracity.runs.common import Context
from veracity.runs.driver import check_target
from veracity.runs.result import RunResult
from veracity.types import Item, Message


@dataclass(frozen=True)
class IclSettings:
    """How the examples are chosen and shown, and whether zero-shot is a third arm."""

    examples: int = 5
    pool: str = "differs"
    format: str = "message"
    zero_shot: bool = False
    template: str = ICL_TEMPLATE
    template_source: str = "builtin"

    def check(self) -> None:
        if self.examples < 1:
            raise ConfigError("ICL needs at least one example (--examples)")
        if self.format not in FORMATS:
            raise ConfigError(f"unknown example format '{self.format}'; known: {', '.join(FORMATS)}")
        check_template(self.template, self.template_source)

    def describe(self) -> JsonObject:
        return {"examples": self.examples, "pool": self.pool, "format": self.format,
                "zero_shot": self.zero_shot, "icl_template": {
                    "source": self.template_source, "template": self.template,
                    "sha256": hashlib.sha256(self.template.encode("utf-8")).hexdigest()}}


def prompts(train: Sequence[Item], test: Sequence[Item], picked: Sequence[str | None],
            neighbours: Sequence[Sequence[int]], settings: MitigationSettings,
            icl: IclSettings) -> list[list[Message]]:
    """The conversation of each test question with its examples, in the chosen format."""
    out = []
    for item, near in zip(test, neighbours, strict=True):
        question = user_turn(settings, item.question).content
        if icl.format == "message":  # C.11's layout: the bare question after the examples
            shots = [(train[k].question, picked[k] or "") for k in near]
            out.append([single_message(shots, item.question, icl.template)])
        else:
            shots = [(user_turn(settings, train[k].question).content, picked[k] or "")
                     for k in near]
            out.append(chat_turns(shots, question))
    return out


def fewl_icl(items: Sequence[Item], settings: MitigationSettings, model: str, icl: IclSettings,
             ctx: Context, out: Path | None = None,
             dataset: str = "") -> RunResult[MitigationRecord, MitigationResults]:
    """Head-to-head win rates (and accuracy on labels) of K-shot answers per rule."""
    check_target(out)  # before any model call
    icl.check()
    settings.check(items)
    pairs = comparisons(settings.rules)
    if not pairs and not icl.zero_shot:
        raise ConfigError("ICL compares each rule with the baseline: select the baseline rule "
                          "and at least one other, or add --zero-shot")
    if icl.pool == "differs" and not {"fewl", "baseline"} <= set(settings.rules):
        raise ConfigError("the 'differs' example pool needs the fewl and baseline rules "
                          "(or --pool all)")
    train, test = split_items(items, settings)
    chosen, selection = select(train, settings, ctx)
    pool = pool_flags(icl.pool, chosen)
    selection = [replace(rec, in_pool=flag) for rec, flag in zip(selection, pool, strict=True)]
    f = settings.fewl
    spec = f.question_embedder or ("st/default" if is_cross_encoder(f.similarity) else f.similarity)
    embedder = ctx.embedder(spec)
    train_vectors = embedder.embed([i.question for i in train])
    test_vectors = embedder.embed([i.question for i in test])
    client = ctx.client(model)
    answers: dict[str, list[str]] = {}
    shots: dict[str, list[list[str]]] = {}
    for rule, picked in chosen.items():
        usable = [p and a is not None for p, a in zip(pool, picked, strict=True)]
        neighbours = nearest(train_vectors, test_vectors, icl.examples, usable)
        shots[rule] = [[train[k].id for k in near] for near in neighbours]
        answers[rule] = generate(client, prompts(train, test, picked, neighbours, settings, icl),
                                 f.max_tokens, f.seed, f"icl: {rule}")
    questions = [i.question for i in test]
    judge = ctx.client(settings.judge)
    head: dict[tuple[str, str], list[Judged]] = {
        (c, b): judge_pairs(judge, questions, answers[c], answers[b], f"icl: judge {c} vs {b}",
                            template=settings.judge_prompt) for c, b in pairs}
    arms = dict(answers)
    zero_judged: dict[str, list[Judged]] = {}
    if icl.zero_shot:
        arms["zero-shot"] = generate(client, [[user_turn(settings, i.question)] for i in test],
                                     f.max_tokens, f.seed, "icl: zero-shot")
        zero_judged = judged_rows(questions, answers, arms["zero-shot"], settings, ctx, "icl")
    acc: dict[str, Accuracy | None] = {}
    correct: dict[str, list[bool | None]] = {}
    for name, texts in arms.items():
        acc[name], correct[name] = accuracy(test, texts, settings, ctx)
    results = MitigationResults(
        "icl", dataset, settings.judge, model, len(train), len(test), "zero-shot",
        acc.get("zero-shot"), results_rows(zero_judged, acc, f.seed) if icl.zero_shot else (),
        icl=IclSummary(icl.describe(), sum(pool), comparison_rows(head, acc, f.seed), acc))
    samples = []
    for k, item in enumerate(test):
        judged = [Comparison(c, b, rows[k]) for (c, b), rows in head.items()]
        judged += [Comparison(rule, "zero-shot", rows[k]) for rule, rows in zero_judged.items()]
        samples.append(IclPair(item.id, item.question,
                               {name: texts[k] for name, texts in arms.items()},
                               {name: flags[k] for name, flags in correct.items()},
                               {rule: tuple(ids[k]) for rule, ids in shots.items()},
                               tuple(judged)))
    return write_run(out, settings, results, samples, selection, ctx)
