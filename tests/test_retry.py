"""The retry helper: Retry-After parsing, backoff delays, the bounded retry loop."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from veracity.errors import PermanentError, RetryableError
from veracity.retry import backoff_delay, call_with_retry, parse_retry_after

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def test_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("Wed, 01 May 2024 12:00:30 GMT", now=NOW) == 30.0
    assert parse_retry_after("Wed, 01 May 2024 11:59:00 GMT", now=NOW) == 0.0  # already past
    assert parse_retry_after("soon") is None
    assert parse_retry_after("") is None
    assert parse_retry_after(None) is None


def test_backoff_grows_exponentially_with_jitter_and_cap() -> None:
    low, high = (lambda: 0.0), (lambda: 1.0)
    assert [backoff_delay(a, base=0.5, rand=low) for a in range(4)] == [0.25, 0.5, 1.0, 2.0]
    assert [backoff_delay(a, base=0.5, rand=high) for a in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_delay(20, base=0.5, cap=10.0, rand=high) == 10.0


def test_backoff_uses_retry_after_within_the_cap() -> None:
    assert backoff_delay(0, retry_after=7.0) == 7.0
    assert backoff_delay(3, retry_after=0.0) == 0.0
    assert backoff_delay(0, retry_after=3600.0, cap=60.0) == 60.0


def test_call_with_retry_retries_then_succeeds() -> None:
    sleeps: list[float] = []
    outcomes: list[Exception | str] = [RetryableError("busy", retry_after=2.0), RetryableError("oops"), "ok"]

    def fn() -> str:
        item = outcomes.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    assert call_with_retry(fn, max_retries=5, base=1.0, sleep=sleeps.append) == "ok"
    assert sleeps[0] == 2.0  # the server's Retry-After, not the backoff
    assert 1.0 <= sleeps[1] < 2.0  # second retry: base * 2 with jitter in [0.5, 1)
    assert outcomes == []


def test_permanent_errors_are_not_retried() -> None:
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)
        raise PermanentError("bad request")

    with pytest.raises(PermanentError, match="bad request"):
        call_with_retry(fn, max_retries=5, sleep=lambda s: None)
    assert len(calls) == 1


def test_gives_up_after_max_retries_with_a_clear_message() -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def fn() -> None:
        calls.append(1)
        raise RetryableError("connection refused", retry_after=1.0)

    with pytest.raises(RetryableError) as info:
        call_with_retry(fn, max_retries=3, what="server at http://x unreachable", sleep=sleeps.append)
    assert len(calls) == 4 and sleeps == [1.0, 1.0, 1.0]
    assert str(info.value) == "server at http://x unreachable after 4 attempts: connection refused"
    assert isinstance(info.value.__cause__, RetryableError)


def test_zero_retries_means_one_attempt() -> None:
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)
        raise RetryableError("503")

    with pytest.raises(RetryableError, match="after 1 attempt: 503"):
        call_with_retry(fn, max_retries=0, sleep=lambda s: pytest.fail("must not sleep"))
    assert len(calls) == 1
