"""Backpressure: a bounded number of requests at work and a bounded queue; beyond, refuse."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Saturated(Exception):
    """Every slot is busy and the queue is full: answer 429."""


class Admission:
    """``limit`` requests at work, ``queue`` more waiting for a slot."""

    def __init__(self, limit: int, queue: int, on_waiting: Callable[[int], None]) -> None:
        self.limit = limit
        self.queue = queue
        self._slots = asyncio.Semaphore(limit)
        self._waiting = 0
        self._on_waiting = on_waiting

    async def acquire(self) -> None:
        """Take a slot, waiting in the queue if needed; raises Saturated when it is full."""
        if not self._slots.locked():
            await self._slots.acquire()
            return
        if self._waiting >= self.queue:
            raise Saturated
        self._waiting += 1
        self._on_waiting(self._waiting)
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
            self._on_waiting(self._waiting)

    def release(self) -> None:
        self._slots.release()
