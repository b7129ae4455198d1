"""Micro-batching off the event loop: many concurrent requests, one worker-thread call.

:class:`MicroBatcher` answers ``await batcher(item)`` by running ``work(all pending items)``
in its own worker thread: under load, one thread hop and one SQLite query or one embedding
batch serves every request that arrived meanwhile. :class:`BatchWriter` does the same for
writes nobody waits for (cache entries, traffic-log rows), gathering them for ``linger``
seconds first: a thread hop costs the event loop more than the write it carries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
In = TypeVar("In")
Out = TypeVar("Out")


class MicroBatcher(Generic[In, Out]):
    """``await batcher(item)``: ``work(items)`` (one result per item) runs for all pending items."""

    def __init__(self, work: Callable[[list[In]], Sequence[Out]], max_batch: int = 1024) -> None:
        self._work = work
        self._max = max_batch
        self._pending: list[tuple[In, asyncio.Future[Out]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._thread = ThreadPoolExecutor(1, "veracity-batch")

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def __call__(self, item: In) -> Out:
        if self._task is None or self._task.done():
            raise RuntimeError("batcher not running")
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._wake.set()
        return await future

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending[: self._max], self._pending[self._max:]
                live = [(item, f) for item, f in batch if not f.done()]  # cancelled callers
                if not live:
                    continue
                items = [item for item, _ in live]
                try:
                    results = await asyncio.get_running_loop().run_in_executor(
                        self._thread, self._work, items)
                except Exception as exc:  # every caller of the batch gets the error
                    for _, future in live:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), result in zip(live, results, strict=True):
                    if not future.done():
                        future.set_result(result)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        self._thread.shutdown(wait=True)


class BatchWriter(Generic[In]):
    """Items queued from the event loop, written by ``write(items)`` in a worker thread.

    A write that fails (a full disk) does not stop the writer: its items are held (the newest
    ``hold`` of them) and tried again every ``retry`` seconds with what came since, and
    ``failure`` says why until a write succeeds again."""

    def __init__(self, write: Callable[[list[In]], None] | None, what: str = "items",
                 linger: float = 0.1, hold: int = 100_000, retry: float = 1.0) -> None:
        self._write = write
        self._what = what
        self._linger = linger
        self._hold = hold
        self._retry = retry
        self._held: list[In] = []
        self.failure: str | None = None
        """Why the last write failed, while writes fail (None when they succeed)."""
        self._queue: asyncio.Queue[In | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._thread = ThreadPoolExecutor(1, "veracity-writer")

    def start(self) -> None:
        if self._write is not None:
            self._task = asyncio.create_task(self._run())

    def put(self, item: In) -> None:
        if self._task is not None:
            self._queue.put_nowait(item)

    async def _run(self) -> None:
        assert self._write is not None
        stop = False
        while not stop:
            batch: list[In | None] = []
            try:
                batch.append(await asyncio.wait_for(self._queue.get(),
                                                    self._retry if self._held else None))
            except TimeoutError:  # held items wait for no one: try them again
                pass
            if batch and batch[0] is not None:
                await asyncio.sleep(self._linger)
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            stop = None in batch
            items = self._held + [b for b in batch if b is not None]
            if not items:
                continue
            try:
                await asyncio.get_running_loop().run_in_executor(self._thread, self._write, items)
            except Exception as exc:  # a full disk must not stop the gateway
                self.failure = self.describe(exc, len(items))
                if len(items) > self._hold:
                    self.failure += f"; {len(items) - self._hold} of them dropped"
                log.error("%s", self.failure)  # one line, no traceback
                self._held = items[-self._hold:]
                if stop:
                    log.error("stopping: %d %s could not be written", len(self._held), self._what)
            else:
                if self.failure is not None:
                    log.warning("%d %s written again after a failure", len(items), self._what)
                self.failure = None
                self._held = []

    def describe(self, exc: Exception, count: int) -> str:
        """The message for a failed write of ``count`` items."""
        return f"could not write {count} {self._what}: {type(exc).__name__}: {exc}"

    async def close(self) -> None:
        """Write what is queued, then stop."""
        if self._task is not None:
            self._queue.put_nowait(None)
            await self._task
            self._task = None
        self._thread.shutdown(wait=True)
