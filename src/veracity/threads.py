"""Threads that catch up on work in the background give way to the one a run waits for.

The cache's writer and checkpointer, and the thread that grows FEWL's neighbour graph, run
beside a run's main thread, which is the one everything waits for; on a machine with few
cores they would otherwise take turns with it. Each lowers its own scheduling priority when
it starts (Linux keeps a nice value per thread), so the main thread runs whenever it can and
they use the time it leaves. Where the platform has no per-thread priority this does nothing.
"""

from __future__ import annotations

import os
import sys
import threading

BACKGROUND_NICE = 10
"""How much lower than its creator a background thread runs (nice steps)."""


def give_way(by: int = BACKGROUND_NICE) -> None:
    """Lower the calling thread's priority by ``by`` nice steps (best effort)."""
    if not sys.platform.startswith("linux"):
        return  # elsewhere the value is the whole process's
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
    except OSError:
        return
