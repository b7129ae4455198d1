"""Background threads give way to the run's main thread: a lower priority of their own."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from veracity.cache import Cache
from veracity.threads import BACKGROUND_NICE, give_way

linux = pytest.mark.skipif(not sys.platform.startswith("linux"),
                           reason="per-thread nice is Linux's")


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


@linux
def test_a_thread_that_gives_way_lowers_its_own_priority_only() -> None:
    mine = _nice(threading.get_native_id())
    seen: list[int] = []

    def background() -> None:
        seen.append(_nice(threading.get_native_id()))
        give_way()
        seen.append(_nice(threading.get_native_id()))

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen == [mine, min(19, mine + BACKGROUND_NICE)]
    assert _nice(threading.get_native_id()) == mine  # the caller keeps its own


@linux
def test_the_cache_writer_gives_way(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache.sqlite")
    try:
        cache.put_vectors("hash/8", {"k": np.ones(8, np.float32)})
        cache.flush()
        writer = cache._writer
        assert writer is not None and writer._thread.native_id is not None
        assert _nice(writer._thread.native_id) == \
            min(19, _nice(threading.get_native_id()) + BACKGROUND_NICE)
    finally:
        cache.close()
