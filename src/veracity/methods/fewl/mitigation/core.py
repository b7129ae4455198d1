"""What FEWL-guided ICL and label-free fine-tuning share: the split, the candidates and their
selection per rule, answering, judging against a base, accuracy on labels, the run directory."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from veracity.client import LLMClient
from veracity.correctness import Labelled, label_answers
from veracity.errors import BackendError, ConfigError, DataError
from veracity.jsontypes import JsonObject
from veracity.methods.fewl.mitigation.judge import JUDGE_PROMPT, Judged, judge_pairs, win_rates
from veracity.methods.fewl.mitigation.paper import dataset_candidates
from veracity.methods.fewl.mitigation.records import (
    Accuracy,
    FinetunePair,
    MitigationRecord,
    MitigationResults,
    RuleAnswer,
    RuleRow,
)
from veracity.methods.fewl.mitigation.selection import RULES, best_candidates, gold_answers, split_indices
from veracity.methods.fewl.run import (
    AnswerSource,
    FewlSettings,
    answers_from,
    prepare_inputs,
    score_sets,
)
from veracity.methods.fewl.similarity import is_cross_encoder
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, drive
from veracity.runs.result import RunResult
from veracity.stats import bootstrap_ci, mean_stderr
from veracity.types import GenRequest, Item, Message, Sampling


@dataclass(frozen=True)
class MitigationSettings:
    """Candidates, selection rules, split and judge of an ``icl`` or ``finetune`` run."""

    fewl: FewlSettings
    candidates: AnswerSource
    judge: str
    rules: tuple[str, ...] = RULES
    samples: int = 4
    """Candidate answers per training question (sampled at ``temperature``)."""
    temperature: float = 0.7
    split: float = 0.8
    extra: dict[str, str | bool] = field(default_factory=dict)
    """What the mode adds to run.json's settings (the model; the base, merge and method)."""
    judge_prompt: str = JUDGE_PROMPT
    """The judge's prompt ({question}, {a}, {b}): the paper's question in our words, or a file's."""
    judge_prompt_source: str = "builtin"
    candidate_lists: dict[str, tuple[str, ...]] | None = None
    """Candidates per question id taken from the dataset itself (CHALE's three answers)
    instead of ``candidates``."""

    def check(self, items: Sequence[Item]) -> None:
        unknown = [r for r in self.rules if r not in RULES]
        if unknown or not self.rules:
            raise ConfigError(f"unknown selection rule(s) {unknown}; known: {', '.join(RULES)}")
        if "gold" in self.rules and not any(item.references for item in items):
            raise ConfigError("the gold rule needs a dataset with reference answers")
        if self.candidates.model is not None and self.samples > 1 and self.temperature <= 0:
            raise ConfigError("several candidates from one model need --temperature > 0")

    def describe(self) -> JsonObject:
        source = ("dataset" if self.candidate_lists is not None
                  else self.candidates.model or str(self.candidates.path))
        return {"fewl": self.fewl.describe(), "candidates": source, "judge": self.judge,
                "rules": list(self.rules),
                "samples": self.samples, "temperature": self.temperature, "split": self.split,
                "judge_prompt": {"source": self.judge_prompt_source, "sha256": hashlib.sha256(
                    self.judge_prompt.encode("utf-8")).hexdigest(), "template": self.judge_prompt},
                **self.extra}


def split_items(items: Sequence[Item], settings: MitigationSettings) -> tuple[list[Item], list[Item]]:
    train, test = split_indices(len(items), settings.split, settings.fewl.seed)
    return [items[i] for i in train], [items[i] for i in test]


@dataclass(frozen=True)
class Candidate:
    """A candidate answer to a training question, with its FEWL and the baseline's score."""

    answer: str
    fewl: float | None
    baseline: float | None


@dataclass(frozen=True)
class SelectionRow:
    """A line of selection.jsonl: a training question, its candidates (when scored), the
    answer each rule chose, and for ICL whether it is in the example pool."""

    id: str
    question: str
    candidates: tuple[Candidate, ...] | None
    selected: Mapping[str, str | None]
    in_pool: bool | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"id": self.id, "question": self.question}
        if self.candidates is not None:
            out["candidates"] = [asdict(c) for c in self.candidates]
        out["selected"] = dict(self.selected)
        return out if self.in_pool is None else out | {"in_pool": self.in_pool}


def select(train: Sequence[Item], settings: MitigationSettings,
           ctx: Context) -> tuple[dict[str, list[str | None]], list[SelectionRow]]:
    """The chosen answer per training question under each rule, and one record per question
    (candidates with their FEWL and baseline scores)."""
    chosen: dict[str, list[str | None]] = {}
    scored: list[tuple[Candidate, ...]] | None = None
    if {"fewl", "baseline"} & set(settings.rules):
        candidates = (dataset_candidates(settings.candidate_lists, train)
                      if settings.candidate_lists is not None else
                      answers_from(settings.candidates, train, settings.fewl, ctx,
                                   settings.samples, settings.temperature))
        width = max(len(c) for c in candidates)
        sets: dict[str, list[str | None]] = {
            f"candidate-{k}": [c[k] if k < len(c) and c[k].strip() else None for c in candidates]
            for k in range(width)}
        prep = prepare_inputs(train, settings.fewl, ctx)
        scores = score_sets(train, sets, prep, settings.fewl)
        div = settings.fewl.divergence
        table = {v: np.stack([scores.sets[n][div][v].fewl for n in sets], axis=1)
                 for v in ("fewl", "single")}
        chosen["fewl"] = best_candidates(candidates, table["fewl"])
        chosen["baseline"] = best_candidates(candidates, table["single"])
        scored = [tuple(Candidate(text, _num(table["fewl"][k, j]), _num(table["single"][k, j]))
                        for j, text in enumerate(candidates[k])) for k in range(len(train))]
    if "gold" in settings.rules:
        chosen["gold"] = gold_answers([i.references for i in train])
    chosen = {rule: chosen[rule] for rule in settings.rules}
    for rule, answers in chosen.items():
        if not any(answers):
            raise DataError(f"the {rule} rule chose no answer for any training question")
    rows = [SelectionRow(item.id, item.question, None if scored is None else scored[k],
                         {rule: answers[k] for rule, answers in chosen.items()})
            for k, item in enumerate(train)]
    return chosen, rows


def _num(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def generate(client: LLMClient, conversations: Sequence[Sequence[Message]], max_tokens: int,
             seed: int, stage: str) -> list[str]:
    """Greedy answers to chat conversations; "" for a rejected request, an error for faults."""
    sampling = Sampling(temperature=0.0, max_tokens=max_tokens, seed=seed)
    results = client.generate_each([GenRequest(tuple(c), sampling) for c in conversations], stage)
    faults = [r for r in results if isinstance(r, BackendError) and not r.kind.blames_model]
    if faults:  # "" would be judged as the model's answer: only a rejection may stand for one
        raise BackendError(f"{client.spec}: {len(faults)} of {len(results)} requests got no answer "
                           f"in stage '{stage}' (the others are cached; rerun to retry). First "
                           f"error: {faults[0].kind.label}: {faults[0]}")
    return ["" if isinstance(r, BackendError) else r.text.strip() for r in results]


def user_turn(settings: MitigationSettings, question: str) -> Message:
    return Message("user", settings.fewl.answer_template.format(question=question))


def accuracy(items: Sequence[Item], answers: Sequence[str], settings: MitigationSettings,
             ctx: Context) -> tuple[Accuracy | None, list[bool | None]]:
    """Share of correct answers (TruthfulQA: nearer a correct than an incorrect reference;
    else gold string contained) with a bootstrap CI; None without labels."""
    labelled = [Labelled(i.question, a, tuple(i.references),
                         tuple(i.metadata.get("incorrect_answers", ())))
                for i, a in zip(items, answers, strict=True)]
    if not any(x.correct for x in labelled):
        return None, [None] * len(items)
    spec = "st/default" if is_cross_encoder(settings.fewl.similarity) else settings.fewl.similarity
    verdicts = label_answers(labelled, ctx.embedder(spec))
    flags = [v.correct for v in verdicts]
    return aggregate_values([None if f is None else float(f) for f in flags]), flags


def aggregate_values(values: Sequence[float | None]) -> Accuracy:
    mean, stderr = mean_stderr(values)
    low, high = bootstrap_ci([v for v in values if v is not None])
    return Accuracy(mean, stderr, (low, high), sum(1 for v in values if v is not None))


def judged_rows(questions: Sequence[str], rule_answers: dict[str, list[str]], base: list[str],
                settings: MitigationSettings, ctx: Context,
                stage: str) -> dict[str, list[Judged]]:
    judge = ctx.client(settings.judge)
    return {rule: judge_pairs(judge, questions, answers, base, f"{stage}: judge {rule}",
                              template=settings.judge_prompt)
            for rule, answers in rule_answers.items()}


def results_rows(judged: dict[str, list[Judged]], accuracies: Mapping[str, Accuracy | None],
                 seed: int) -> tuple[RuleRow, ...]:
    return tuple(RuleRow(rule, win_rates(rows, seed), accuracies.get(rule))
                 for rule, rows in judged.items())


def pair_samples(test: Sequence[Item], base_name: str, base: Sequence[str],
                 rule_answers: dict[str, list[str]], judged: dict[str, list[Judged]],
                 correct: dict[str, list[bool | None]]) -> list[FinetunePair]:
    """One record per test question: the base answer and, per rule, the answer and judgement."""
    return [FinetunePair(item.id, item.question, base_name, base[k], correct[base_name][k],
                         {rule: RuleAnswer(answers[k], correct[rule][k], judged[rule][k])
                          for rule, answers in rule_answers.items()})
            for k, item in enumerate(test)]


def write_run(out: Path | None, settings: MitigationSettings, results: MitigationResults,
              samples: Sequence[MitigationRecord], selection: Sequence[SelectionRow],
              ctx: Context) -> RunResult[MitigationRecord, MitigationResults]:
    """The run's result, written into ``out`` unless it is None."""
    config = {"mode": results.mode, "dataset": results.dataset, **settings.describe(),
              "model_options": ctx.options_record()}
    plan: RunPlan[MitigationRecord] = RunPlan("mitigation", MitigationRecord, config,
                                              ctx.started)
    outcome = drive(out, plan, [samples], [],
                    lambda: Finish(results, stats=ctx.stats(),
                                   files={"selection.jsonl": [r.to_json() for r in selection]}))
    return RunResult(tuple(samples), outcome.summary, outcome.run)
