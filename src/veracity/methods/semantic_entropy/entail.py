"""Whether two answers to a question mean the same: by bidirectional entailment with an NLI
cross-encoder, by a judge model, or (the default, where no NLI model is installed) by the
embedder's cosine. Each check takes a whole round of pairs at once; every verdict is cached
(pair scores, judge replies and embeddings all go through the run's cache)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from veracity.errors import BackendError, ConfigError
from veracity.methods.semantic_entropy.core import Same, SemanticEntropySettings
from veracity.paths import user_path
from veracity.registry import is_scorer, resolve
from veracity.runs.common import Context
from veracity.types import GenRequest, Sampling

JUDGE_PROMPT = (
    "Below is a question and two answers to it. Decide whether the two answers say the same "
    "thing: would someone who accepts the first answer also accept the second as the same "
    "answer, and the other way round? Wording, length and extra detail do not matter; a "
    "different fact, name, number or verdict does.\n\n"
    "Question: {question}\n\nFirst answer: {a}\n\nSecond answer: {b}\n\n"
    "Reply with one word: YES or NO."
)
"""The judge's prompt (our wording): {question}, {a} and {b} are filled in."""
_VERDICT = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def nli_spec(spec: str) -> str | None:
    """The pair-scorer spec of an entailment model: a registered scorer spec as it is, an
    ``hf/PATH`` directory holding a sequence-classification model as ``nli/PATH``; None for
    anything else (a judge model)."""
    if is_scorer(spec):
        return spec
    ref = resolve(spec)
    provider, name = ref.provider, ref.name
    if provider != "hf" or not name:
        return None
    config = user_path(name) / "config.json"
    try:
        found = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kinds = found.get("architectures") or []
    return f"nli/{name}" if any(str(k).endswith("ForSequenceClassification")
                                for k in kinds) else None


def _nli(spec: str, settings: SemanticEntropySettings, ctx: Context) -> Same:
    scorer = ctx.scorer(spec)

    def same(batch: Sequence[tuple[str, str, str]]) -> list[bool]:
        # as Kuhn et al., each answer is read after its question
        pairs = [(f"{q} {a}", f"{q} {b}") for q, a, b in batch]
        scores = scorer.scores([p for a, b in pairs for p in ((a, b), (b, a))],
                               stage="semantic entropy: entailment")
        return [scores[(a, b)] >= settings.threshold and scores[(b, a)] >= settings.threshold
                for a, b in pairs]

    return same


def _judge(spec: str, ctx: Context) -> Same:
    client = ctx.client(spec)
    plain = Sampling(temperature=0.0, max_tokens=8)

    def same(batch: Sequence[tuple[str, str, str]]) -> list[bool]:
        # one question per unordered pair: the same two answers in either order ask the same
        requests = [GenRequest.user(JUDGE_PROMPT.format(question=q, a=a, b=b), plain)
                    for q, a, b in (sorted_pair(x) for x in batch)]
        out = []
        for reply in client.generate_each(requests, stage="semantic entropy: judge"):
            if isinstance(reply, BackendError):
                raise reply
            found = _VERDICT.search(reply.text)
            out.append(found is not None and found.group(1).lower() == "yes")
        return out

    return same


def sorted_pair(asked: tuple[str, str, str]) -> tuple[str, str, str]:
    q, a, b = asked
    return (q, a, b) if a <= b else (q, b, a)


def _cosine(embedder_spec: str, settings: SemanticEntropySettings, ctx: Context) -> Same:
    embedder = ctx.embedder(embedder_spec)

    def same(batch: Sequence[tuple[str, str, str]]) -> list[bool]:
        if not batch:
            return []
        texts = [t for _, a, b in batch for t in (a, b)]
        vectors = np.asarray(embedder.embed(texts), dtype=np.float64)
        a, b = vectors[0::2], vectors[1::2]
        norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.where(norms > 0, (a * b).sum(axis=1) / norms, 0.0)
        return [bool(c >= settings.cosine) for c in cos]

    return same


def entailment(settings: SemanticEntropySettings, embedder: str, ctx: Context) -> tuple[Same, str]:
    """The check ``settings.entailment`` names and how it is described in the results."""
    spec = settings.entailment
    if not spec:
        return _cosine(embedder, settings, ctx), f"cosine >= {settings.cosine} ({embedder})"
    nli = nli_spec(spec)
    if nli is not None:
        return _nli(nli, settings, ctx), f"bidirectional entailment ({nli}, P >= " \
                                         f"{settings.threshold})"
    ref = resolve(spec)
    provider, name = ref.provider, ref.name
    if provider == "hf" and not Path(user_path(name)).exists():
        raise ConfigError(f"--entailment {spec}: no such model directory")
    return _judge(spec, ctx), f"judge ({spec})"
