"""Terminal progress for long stages (tqdm on stderr; silent when quiet or not a terminal)."""

from __future__ import annotations

import sys
from typing import Any


class TerminalProgress:
    """Shows requests done, model calls, cache hits and time left for each stage."""

    def __init__(self, quiet: bool = False) -> None:
        self.enabled = not quiet and sys.stderr.isatty()
        self._bar: Any = None

    def start(self, stage: str, total: int | None) -> None:
        if not self.enabled or total == 0:
            return
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=stage, unit="req", file=sys.stderr, leave=True)

    def update(self, done: int, calls: int, hits: int) -> None:
        if self._bar is None:
            return
        self._bar.n = done
        self._bar.set_postfix(model_calls=calls, cache_hits=hits, refresh=False)
        self._bar.refresh()

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
