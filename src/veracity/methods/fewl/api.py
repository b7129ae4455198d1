"""FEWL from Python: score answers a model gives, or answers you already have."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.data.labelled import load_questions
from veracity.errors import ConfigError
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.records import FewlRecord, FewlResults
from veracity.methods.fewl.run import AnswerSource, FewlSettings
from veracity.runs.common import api_context
from veracity.runs.result import RunResult
from veracity.types import Item


def _items(questions: str | Sequence[str]) -> list[Item]:
    """A dataset spec (``builtin``, ``haltt4llm:FILE``, ...) or the questions themselves."""
    if isinstance(questions, str):
        return load_questions(questions)
    return [Item(f"q{i}", text) for i, text in enumerate(questions, 1)]


def _score(items: list[Item], models: Sequence[str | Backend], given: Mapping[str, Sequence[str]],
           references: Sequence[str | Backend], similarity: str, settings: FewlSettings | None,
           cache: bool | str | Path | Cache, out: str | Path | None) -> RunResult[FewlRecord, FewlResults]:
    if not references:
        raise ConfigError("FEWL needs at least one reference model")
    with api_context(cache, *references, *models) as (ctx, specs):
        refs, answering = specs[:len(references)], specs[len(references):]
        sources = [AnswerSource(spec, model=spec) for spec in answering]
        sources += [AnswerSource(name, texts=tuple(texts)) for name, texts in given.items()]
        chosen = replace(settings or FewlSettings(), references=tuple(refs), similarity=similarity)
        return run_fewl(items, sources, chosen, ctx, None if out is None else Path(out))


def fewl(
    questions: str | Sequence[str],
    models: Sequence[str | Backend],
    references: Sequence[str | Backend],
    similarity: str = "st/default",
    settings: FewlSettings | None = None,
    cache: bool | str | Path | Cache = True,
    out: str | Path | None = None,
) -> RunResult[FewlRecord, FewlResults]:
    """FEWL of each model's answers to ``questions`` (a list, or a dataset spec), weighted by
    the expertise of the ``references`` (no gold answers needed). ``settings`` sets the
    rest (pairs R, neighbours K, tau, divergence); the mean per model is in
    ``summary.models``."""
    return _score(_items(questions), models, {}, references, similarity, settings, cache, out)


def score_fewl(
    questions: str | Sequence[str],
    answers: Mapping[str, Sequence[str]],
    references: Sequence[str | Backend],
    similarity: str = "st/default",
    settings: FewlSettings | None = None,
    cache: bool | str | Path | Cache = True,
    out: str | Path | None = None,
) -> RunResult[FewlRecord, FewlResults]:
    """FEWL of answers you already have: ``answers`` maps a name to one answer per question;
    only the reference models are called."""
    return _score(_items(questions), (), answers, references, similarity, settings, cache, out)
