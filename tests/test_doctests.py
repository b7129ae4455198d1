"""The examples in the library's docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import veracity

SOURCE = Path(veracity.__file__).resolve().parent
WITH_EXAMPLES = sorted(
    ".".join(("veracity", *path.relative_to(SOURCE).with_suffix("").parts)).removesuffix(".__init__")
    for path in SOURCE.rglob("*.py")
    if ">>>" in path.read_text(encoding="utf-8")
)


def test_the_library_has_examples() -> None:
    assert {"veracity.registry", "veracity.runs.common"} <= set(WITH_EXAMPLES)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    # examples are written as a user types them, after ``import veracity``
    result = doctest.testmod(module, extraglobs={"veracity": veracity}, report=True,
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
