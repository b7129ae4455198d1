"""Shared pieces of the reliability suite: a fault-injecting mock server and fast retries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from faults import FaultPlan
from mock_openai import MockOpenAI


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def plan() -> FaultPlan:
    return FaultPlan(rate=0.0, seed=7, hang=0.6)


@pytest.fixture
def server(plan: FaultPlan) -> Iterator[MockOpenAI]:
    with MockOpenAI(chooser=plan) as mock:
        yield mock
