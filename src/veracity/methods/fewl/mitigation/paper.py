"""Pieces of FEWL §5 as published: candidates read from a labelled dataset (CHALE's three
answers per question) and the head-to-head comparisons of Table 6."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from veracity.data.labelled import load_labelled
from veracity.errors import ConfigError, DataError
from veracity.methods.fewl.mitigation.judge import Judged, win_rates
from veracity.methods.fewl.mitigation.records import Accuracy, HeadToHead
from veracity.types import Item


def labelled_candidates(spec: str, seed: int) -> dict[str, tuple[str, ...]]:
    """Per question id the dataset's own answers (CHALE: non-, half- and fully hallucinated),
    in a seeded random order per question, so a tie between two candidates (the earlier one
    wins) does not favour the good answer."""
    try:
        items = load_labelled(spec)
    except DataError as exc:
        raise ConfigError(f"--candidates dataset needs a labelled dataset (chale:, truthfulqa:, "
                          f"halueval:): {exc}") from None
    rng = np.random.default_rng(seed)
    out: dict[str, tuple[str, ...]] = {}
    for item in items:
        texts = [item.better, *(text for _, text in item.worse)]
        out[item.id] = tuple(texts[int(k)] for k in rng.permutation(len(texts)))
    return out


def dataset_candidates(table: dict[str, tuple[str, ...]], items: Sequence[Item]) -> list[list[str]]:
    """The candidates of each item from ``table`` (question id -> answers)."""
    missing = [item.id for item in items if item.id not in table]
    if missing:
        raise DataError(f"the dataset has no candidate answers for {len(missing)} question(s), "
                        f"e.g. '{missing[0]}'")
    return [list(table[item.id]) for item in items]


def comparisons(rules: Sequence[str]) -> list[tuple[str, str]]:
    """Table 6's head-to-head pairs: every selected rule against the baseline."""
    if "baseline" not in rules:
        return []
    return [(rule, "baseline") for rule in rules if rule != "baseline"]


def comparison_rows(judged: dict[tuple[str, str], list[Judged]],
                    accuracies: Mapping[str, Accuracy | None],
                    seed: int) -> tuple[HeadToHead, ...]:
    """One row per (candidate, base): the full breakdown and the paper's win rate (C.10)."""
    return tuple(HeadToHead(candidate, base, win_rates(rows, seed), accuracies.get(candidate),
                            accuracies.get(base))
                 for (candidate, base), rows in judged.items())
