"""Random samples of a dataset: ``--sample K --sample-seed S``, the same for every command.

A sample is drawn from the items that ``--limit L`` leaves (the first L), so ``--limit 200
--sample 20`` is a random 20 of the first 200. The draw is a seeded permutation of the item
positions, of which the first K are kept, in the dataset's order: the same seed on the same
items gives the same sample (on any machine with the same numpy; run.json keeps the chosen ids
as well), and a smaller K is a subset of a larger one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject

T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    """K items drawn at random with ``seed``."""

    k: int
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ConfigError(f"a sample needs at least 1 item, got {self.k!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) \
                or not 0 <= self.seed < 2**32:
            raise ConfigError(f"sample seed must be an integer in [0, 2**32), got {self.seed!r}")

    def positions(self, n: int) -> list[int]:
        """The sorted positions (0-based) of the sampled items among ``n``.

        >>> Sample(3, seed=0).positions(10) == Sample(3, seed=0).positions(10)
        True
        >>> set(Sample(2, 7).positions(10)) <= set(Sample(5, 7).positions(10))
        True
        """
        order = np.random.default_rng(self.seed).permutation(n)
        return sorted(int(i) for i in order[: min(self.k, n)])


@dataclass(frozen=True)
class Selection:
    """Which items of a dataset a run used: the first ``limit``, then a ``sample`` of them."""

    limit: int | None = None
    sample: Sample | None = None

    def __post_init__(self) -> None:
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise ConfigError(f"limit must be at least 1, got {self.limit!r}")

    @property
    def active(self) -> bool:
        return self.limit is not None or self.sample is not None

    def apply(self, items: Sequence[T]) -> list[T]:
        """The selected items, in the dataset's order."""
        pool = list(items[: self.limit] if self.limit is not None else items)
        if self.sample is None:
            return pool
        return [pool[i] for i in self.sample.positions(len(pool))]

    def record(self, n_available: int, ids: Sequence[str]) -> JsonObject:
        """What run.json keeps: the settings, the dataset size, and the chosen ids (a sample)."""
        out: JsonObject = {"limit": self.limit, "n_available": n_available,
                               "n_selected": len(ids)}
        if self.sample is not None:
            pool = n_available if self.limit is None else min(self.limit, n_available)
            out |= {"sample": self.sample.k, "sample_seed": self.sample.seed,
                    "sample_from": pool, "ids": list(ids)}
        return out


def select(items: Sequence[T], limit: int | None = None, sample: int | None = None,
           seed: int = 0) -> list[T]:
    """The first ``limit`` items, then a random ``sample`` of them drawn with ``seed``.

    >>> select(list("abcdefgh"), limit=3)
    ['a', 'b', 'c']
    >>> len(select(list("abcdefgh"), sample=3, seed=1))
    3
    """
    return Selection(limit, Sample(sample, seed) if sample is not None else None).apply(items)
