"""A long run's objects kept out of the cyclic garbage collector's full passes.

CPython runs a full pass of its cyclic collector whenever the objects that outlived two
younger passes reach a quarter of those already old. A run scored chunk by chunk gets there
about once a chunk (each chunk's lists live long enough to grow old), and each full pass
visits every object the process holds: the run's questions among them. So the collector's
cost per question grew with the number of questions: its full passes took 29 s of a
491-second streamed FEWL run of 300,000 recorded questions, and 1.1 s of 36 s at 30,000
(docs/performance.md, seventh round).

``gc.freeze`` moves the objects tracked so far to a generation the passes skip; they are still
freed by their reference counts as before, and only a reference cycle among them waits for
the end of the run to be collected.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
"""Runs inside :func:`frozen_heap` now (on any thread)."""
_owned = False
"""Whether the frozen objects are this module's to let go (nobody else froze any)."""


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Every object tracked when this is entered (the run's questions, loaded models, the
    caller's own) frozen until the outermost such block ends, then given back to the oldest
    generation. Nested blocks (a run's scoring inside the run) freeze what was made since.
    A process that froze objects itself (a server after its start-up), or whose collector is
    off, is left as it is.

    >>> import gc
    >>> with frozen_heap():
    ...     gc.get_freeze_count() > 0
    True
    >>> gc.get_freeze_count()
    0
    """
    global _depth, _owned
    with _lock:
        if _depth == 0:
            _owned = gc.isenabled() and gc.get_freeze_count() == 0
        if _owned:
            gc.freeze()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _owned:
                gc.unfreeze()
                _owned = False
