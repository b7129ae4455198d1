"""A run's objects are frozen out of the collector's full passes while it runs, and given back
after; a process that froze its own (a server) or turned the collector off is left alone."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from test_fewl_stream import _files  # the streamed FEWL tests' inputs
from veracity.heap import frozen_heap
from veracity.jsontypes import JsonObject
from veracity.methods.fewl import chunked
from veracity.records import Record
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, drive
from veracity.runs.result import Results


@pytest.fixture(autouse=True)
def _nothing_frozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@dataclass(frozen=True)
class _Row(Record):
    id: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"id": self.id}


class _Kept:
    def __init__(self) -> None:
        self.frozen: list[int] = []

    def add(self, records: Sequence[_Row]) -> None:
        self.frozen.append(gc.get_freeze_count())


def test_nested_blocks_freeze_what_was_made_since_and_the_outermost_lets_go() -> None:
    before = [object() for _ in range(3)]  # noqa: F841 (tracked while the block is entered)
    with frozen_heap():
        outer = gc.get_freeze_count()
        assert outer > 0
        made = [[] for _ in range(500)]
        with frozen_heap():
            assert gc.get_freeze_count() >= outer + len(made)
        assert gc.get_freeze_count() >= outer + len(made)  # the inner block gives nothing back
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_itself_keeps_them_frozen() -> None:
    gc.freeze()
    own = gc.get_freeze_count()
    with frozen_heap():
        kept = [[] for _ in range(100)]
        with frozen_heap():
            assert gc.get_freeze_count() == own  # nothing more frozen
    assert gc.get_freeze_count() == own and kept


def test_a_collector_turned_off_is_left_alone() -> None:
    gc.disable()
    try:
        with frozen_heap():
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_blocks_on_two_threads_let_go_when_the_last_one_ends() -> None:
    entered, leave = threading.Event(), threading.Event()

    def other() -> None:
        with frozen_heap():
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert entered.wait(10)
    with frozen_heap():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() > 0  # the other thread's run still holds it
    leave.set()
    thread.join(10)
    assert gc.get_freeze_count() == 0


def test_the_driver_scores_every_chunk_with_the_heap_frozen() -> None:
    kept = _Kept()
    batches = [[_Row("a")], [_Row("b")]]
    drive(None, RunPlan("test", _Row, {}), batches, [kept],
          lambda: Finish(Results({})))
    assert len(kept.frozen) == 2 and all(count > 0 for count in kept.frozen)
    assert gc.get_freeze_count() == 0


def test_a_streamed_fewl_run_embeds_its_questions_with_the_heap_frozen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    index = chunked._Index

    class Watched(index):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            seen.append(gc.get_freeze_count())  # before the driver's own block
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(chunked, "_Index", Watched)
    items, sources, settings = _files(tmp_path, 12)
    with Context(cache=None) as ctx:
        chunked.stream_fewl(items, sources, settings, ctx, tmp_path / "run", "qs",
                            {"answers": []}, chunk_size=5)
    assert seen and seen[0] > 0
    assert gc.get_freeze_count() == 0

