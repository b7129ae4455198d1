"""Shared fixtures: an isolated cache per test, the shared data folder, a fake context."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from data_paths import FULL as DATA
from veracity.cache import Cache
from veracity.runs.common import Context


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that reads the full datasets ``data`` (``-m "not data"`` skips them)."""
    for item in items:
        if "data_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.data)


@pytest.fixture(scope="session")
def onnx_exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder of ONNX exports for the whole session: a model is exported once, not per test."""
    return tmp_path_factory.mktemp("onnx-exports")


@pytest.fixture(scope="session")
def attention_choice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One remembered attention=auto choice for the whole session: llama.cpp's kernels are
    timed on the first load of a model, not again for every test."""
    return tmp_path_factory.mktemp("attention") / "attention-choice.json"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, onnx_exports: Path,
                   attention_choice: Path) -> None:
    monkeypatch.setenv("VERACITY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("VERACITY_ONNX_DIR", str(onnx_exports))
    monkeypatch.setenv("VERACITY_ATTENTION_CHOICE", str(attention_choice))
    monkeypatch.delenv("VERACITY_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)  # default run directories land in the test's folder


@pytest.fixture
def data_dir() -> Path:
    """The full datasets beside the repository; the test skips, saying so, when they are absent
    (a bare clone runs the same readers on tests/fixtures/formats instead)."""
    if not DATA.is_dir():
        pytest.skip(f"needs the full datasets in {DATA} (absent in a bare clone)")
    return DATA


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Cache]:
    c = Cache(tmp_path / "cache.sqlite")
    yield c
    c.close()


@pytest.fixture
def ctx(cache: Cache) -> Iterator[Context]:
    context = Context(cache=cache)
    yield context
    context.close()
