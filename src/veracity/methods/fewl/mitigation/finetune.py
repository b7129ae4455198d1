"""Label-free supervised fine-tuning (LF-SFT, §5.2): per selection rule a LoRA adapter or a
fully fine-tuned model trained on the training split's chosen answers, then the test split
answered by the base and by each fine-tuned model and judged in both orders (Table 7)."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from veracity.client import LLMClient
from veracity.methods.fewl.mitigation.core import (
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
from veracity.methods.fewl.mitigation.lora import LoraSettings, TrainResult, base_location, train_lora
from veracity.methods.fewl.mitigation.records import (
    Accuracy,
    FinetuneSummary,
    MitigationRecord,
    MitigationResults,
    Training,
)
from veracity.registry import load_model
from veracity.runs.common import Context
from veracity.runs.result import RunResult
from veracity.store import check_run_target
from veracity.types import Item


def fewl_finetune(items: Sequence[Item], settings: MitigationSettings, base: str,
                  lora: LoraSettings, ctx: Context, out: Path, dataset: str = "",
                  merge: bool = False, progress: bool = True,
                  ) -> RunResult[MitigationRecord, MitigationResults]:
    """Train one adapter per rule (resuming from checkpoints under ``out/training``), answer
    the test split with base and fine-tuned models, judge each pair in both orders."""
    check_run_target(out)  # before any model call
    base_location(base)
    own_template = lora.chat_template is not None
    if not own_template:  # train on the prompts the hf backend will answer
        lora = replace(lora, chat_template=ctx.model_options.get("hf", {}).get("chat_template"))
    lora.check()
    settings.check(items)
    if own_template:  # the base's own prompt format, for its candidates and answers alike
        ctx.client(base, chat_template=lora.chat_template)
    train, test = split_items(items, settings)
    chosen, selection = select(train, settings, ctx)
    f = settings.fewl
    training: dict[str, Training] = {}
    tuned_models: dict[str, TrainResult] = {}
    for rule, picked in chosen.items():
        pairs = [(f.answer_template.format(question=i.question), a)
                 for i, a in zip(train, picked, strict=True) if a]
        result = train_lora(base, pairs, out / "training" / rule, lora, merge, progress)
        gc.collect()  # the trainer's copy of the model
        tuned_models[rule] = result
        training[rule] = Training(
            result.steps, round(result.seconds, 2), result.examples, result.train_loss,
            result.resumed_from, lora.method,
            str(result.adapter.relative_to(out)) if result.adapter else None,
            str(result.merged.relative_to(out)) if result.merged else None)
    conversations = [[user_turn(settings, i.question)] for i in test]
    base_answers = generate(ctx.client(base), conversations, f.max_tokens, f.seed,
                            "finetune: base")
    answers: dict[str, list[str]] = {}
    for rule, result in tuned_models.items():
        options = dict(ctx.model_options.get("hf", {}))
        if lora.chat_template is not None:
            options["chat_template"] = lora.chat_template
        if result.adapter is not None:
            tuned = LLMClient(load_model(base, **options, adapter=str(result.adapter)), ctx.cache,
                              ctx.progress)
        else:
            assert result.merged is not None
            tuned = LLMClient(load_model(f"hf/{result.merged}", **options), ctx.cache,
                              ctx.progress)
        try:
            answers[rule] = generate(tuned, conversations, f.max_tokens, f.seed,
                                     f"finetune: {rule}")
        finally:
            tuned.close()
            gc.collect()
    judged = judged_rows([i.question for i in test], answers, base_answers, settings, ctx,
                         "finetune")
    acc: dict[str, Accuracy | None] = {}
    correct: dict[str, list[bool | None]] = {}
    for name, texts in {"base": base_answers, **answers}.items():
        acc[name], correct[name] = accuracy(test, texts, settings, ctx)
    results = MitigationResults(
        "finetune", dataset, settings.judge, base, len(train), len(test), "base", acc["base"],
        results_rows(judged, acc, f.seed),
        finetune=FinetuneSummary(training, lora.method, lora.__dict__))
    samples = pair_samples(test, "base", base_answers, answers, judged, correct)
    return write_run(out, settings, results, samples, selection, ctx)
