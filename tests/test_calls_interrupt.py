"""Ctrl-C in a stage: every answer that had arrived is cached, even those not handed over."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from veracity.backends.base import CutShort
from veracity.cache import Cache
from veracity.calls import CachedCalls, Codec
from veracity.errors import BackendError, Interrupted

CODEC: Codec[str] = Codec("generation", load=str, dump=str)
KEYS = ["k0", "k1", "k2"]


class CtrlCAfterFirst:
    """Progress whose second update is where Ctrl-C lands: inside the client's loop."""

    def __init__(self) -> None:
        self.updates = 0

    def start(self, stage: str, total: int | None) -> None:
        pass

    def update(self, done: int, calls: int, hits: int) -> None:
        self.updates += 1
        if self.updates == 2:
            raise KeyboardInterrupt

    def finish(self) -> None:
        pass


def _stage(tmp_path: Path, produce: object, progress: object) -> tuple[str, dict[str, object]]:
    cache = Cache(tmp_path / "c.sqlite")
    calls = CachedCalls("m/x", cache, progress, 4, None)  # type: ignore[arg-type]
    with pytest.raises(Interrupted) as cut:
        calls.call(KEYS, KEYS, produce, CODEC, "answers")  # type: ignore[arg-type]
    return str(cut.value), cache.get_json(KEYS)


def test_ctrl_c_at_a_yield_still_caches_what_had_arrived(tmp_path: Path) -> None:
    def produce(payloads: Sequence[str], stop: threading.Event) -> Iterator[list[tuple[int, str]]]:
        try:
            yield [(0, "zero")]
            yield [(1, "one")]
        except KeyboardInterrupt:  # what the HTTP backend does: "one" had arrived, "k2" not
            raise CutShort([(1, "one")]) from None  # type: ignore[list-item]

    message, cached = _stage(tmp_path, produce, CtrlCAfterFirst())
    assert sorted(cached) == ["k0", "k1"]
    assert "2 answers received from m/x in this run are in the cache" in message


def test_ctrl_c_inside_the_producer_caches_its_arrived_answers_not_its_errors(
        tmp_path: Path) -> None:
    def produce(payloads: Sequence[str],
                stop: threading.Event) -> Iterator[list[tuple[int, str | BackendError]]]:
        yield [(0, "zero")]
        raise CutShort([(1, BackendError("refused")), (2, "two")])  # type: ignore[list-item]

    message, cached = _stage(tmp_path, produce, _Quiet())
    assert cached == {"k0": "zero", "k2": "two"}
    assert "2 answers received" in message


def test_a_producer_without_late_answers_is_interrupted_as_before(tmp_path: Path) -> None:
    def produce(payloads: Sequence[str], stop: threading.Event) -> Iterator[list[tuple[int, str]]]:
        yield [(0, "zero")]
        yield [(1, "one")]

    message, cached = _stage(tmp_path, produce, CtrlCAfterFirst())
    assert sorted(cached) == ["k0"]
    assert "1 answers received" in message


class _Quiet(CtrlCAfterFirst):
    def update(self, done: int, calls: int, hits: int) -> None:
        pass
