"""A finite retry loop: exponential backoff with jitter that honours Retry-After."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TypeVar

from veracity.errors import RetryableError

T = TypeVar("T")


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date), else None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


def backoff_delay(
    attempt: int,
    retry_after: float | None = None,
    base: float = 0.5,
    cap: float = 60.0,
    rand: Callable[[], float] = random.random,
) -> float:
    """Wait before retry ``attempt`` (0-based): the server's Retry-After if it gave one,
    else ``base * 2**attempt`` scaled by a random factor in [0.5, 1) so clients spread out."""
    if retry_after is not None:
        return min(cap, max(0.0, retry_after))
    return min(cap, base * 2.0**attempt) * (0.5 + 0.5 * rand())


def call_with_retry(
    fn: Callable[[], T],
    *,
    max_retries: int = 5,
    what: str = "request failed",
    base: float = 0.5,
    cap: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``; on RetryableError wait and try again, at most ``max_retries`` more times.

    Any other exception (PermanentError included) propagates at once. When every attempt
    failed, raises RetryableError("<what> after N attempts: <last error>").
    """
    attempts = max(0, max_retries) + 1
    for attempt in range(attempts):
        try:
            return fn()
        except RetryableError as exc:
            if attempt + 1 == attempts:
                tries = f"{attempts} attempt" + ("s" if attempts > 1 else "")
                raise RetryableError(f"{what} after {tries}: {exc}", exc.retry_after) from exc
            sleep(backoff_delay(attempt, exc.retry_after, base, cap))
    raise AssertionError("unreachable")  # pragma: no cover
