"""Bounds on numeric settings: finite numbers in range, and counts that cost model calls."""

from __future__ import annotations

import math

from veracity.errors import ConfigError

MAX_N = 1000
"""Perturbed prompts per question without ``allow_large_n`` (each one is a model call)."""
HARD_MAX_N = 100_000
"""Never more: far beyond any use of γ, and the ball alone would take gigabytes."""


def check_number(name: str, value: float, low: float | None = None, high: float | None = None,
                 low_open: bool = False) -> float:
    """``value`` if it is a finite number within [low, high] (``(low, high]`` when
    ``low_open``); a ConfigError naming the setting otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    too_low = low is not None and (value <= low if low_open else value < low)
    if too_low or (high is not None and value > high):
        left = "(" if low_open else "["
        span = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}]"
        raise ConfigError(f"{name} must be in {span}, got {value}")
    return value


def check_count(name: str, value: int, limit: int, allow_large: bool = False,
                hard_limit: int = HARD_MAX_N, flag: str = "--allow-large-n") -> int:
    """A count of at least 1 and at most ``limit`` (``hard_limit`` when ``allow_large``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    if value > hard_limit:
        raise ConfigError(f"{name} = {value} is more than veracity allows ({hard_limit})")
    if value > limit and not allow_large:
        raise ConfigError(f"{name} = {value} means {value} model calls per question (limit "
                          f"{limit}); pass {flag} if you really mean it")
    return value
