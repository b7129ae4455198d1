"""Where the tests find data: the full datasets beside the checkout, or the rows we wrote."""

from __future__ import annotations

from pathlib import Path

FULL = Path(__file__).resolve().parents[2] / "shared" / "data"
"""The full datasets (absent in a bare clone: tests that need them skip)."""
FIXTURES = Path(__file__).resolve().parent / "fixtures"
"""Small files in every supported format, written for these tests."""


def full_or_fixture(relative: str, fixture: str) -> Path:
    """The full dataset file or directory when it is there, else our fixture."""
    full = FULL / relative
    return full if full.exists() else FIXTURES / fixture
