"""Property-based fuzzing of every reader and parser: a result or a VeracityError, nothing else."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz_targets import TARGETS, outcome

EXAMPLES = int(os.environ.get("VERACITY_FUZZ_EXAMPLES", "200"))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_any_input_ends_in_a_result_or_a_veracity_error(name: str) -> None:
    target = TARGETS[name]

    @settings(max_examples=max(10, int(EXAMPLES * target.weight)), deadline=None,
              database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much])
    @given(target.strategy)
    def check(payload: Any) -> None:
        failure = outcome(target, payload)
        if failure is not None:
            raise AssertionError(f"{name}: {type(failure).__name__}: {failure}") from failure

    check()
