"""A streamed live run shows one progress bar over all its chunks."""

from __future__ import annotations

from pathlib import Path

from veracity.cache import Cache
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.run import run_gamma
from veracity.runs.common import Context
from veracity.types import Item


class Recorded:
    """A progress display that writes down what it is told."""

    def __init__(self) -> None:
        self.starts: list[tuple[str, int | None]] = []
        self.updates: list[tuple[int, int, int]] = []
        self.finished = 0

    def start(self, stage: str, total: int | None) -> None:
        self.starts.append((stage, total))

    def update(self, done: int, calls: int, hits: int) -> None:
        self.updates.append((done, calls, hits))

    def finish(self) -> None:
        self.finished += 1


def _items(count: int) -> list[Item]:
    return [Item(f"q{i}", f"What is {i} plus {i}?") for i in range(count)]


def test_streamed_live_run_advances_one_bar_across_chunks(tmp_path: Path) -> None:
    shown = Recorded()
    cache = Cache(tmp_path / "cache.sqlite")
    with Context(cache=cache, progress=shown) as ctx:
        run_gamma(_items(10), "fake/unstable", "hash/default", GammaSettings(n=3), ctx,
                  tmp_path / "run", "prompts", chunk_size=4)  # chunks of 4, 4 and 2
        assert ctx.clients["fake/unstable"].progress is shown  # given back after the run
    assert shown.starts == [("gamma: answers", 40)]  # 10 questions x (3 + 1) answers
    assert shown.finished == 1
    done = [u[0] for u in shown.updates]
    assert done == sorted(done) and done[-1] == 40 and shown.updates[-1][1] == 40
    assert 16 in done and 32 in done  # the bar carried on from one chunk into the next

    again = Recorded()  # a rerun: every answer from the cache, still one bar
    with Context(cache=Cache(tmp_path / "cache.sqlite"), progress=again) as ctx:
        run_gamma(_items(10), "fake/unstable", "hash/default", GammaSettings(n=3), ctx,
                  tmp_path / "rerun", "prompts", chunk_size=4)
    assert again.starts == [("gamma: answers", 40)] and again.finished == 1
    assert again.updates[-1] == (40, 0, 40)
