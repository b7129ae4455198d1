"""Background work of the gateway: the traffic-log writer and async-mode scores."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from veracity.jsontypes import JsonObject
from veracity.methods.gamma.calibration.trust import TrustScore
from veracity.serve.batching import BatchWriter
from veracity.space import storage_error
from veracity.traffic import Entry, StoredScore, TrafficLog

log = logging.getLogger(__name__)

KEPT_SCORES = 10_000
"""Scores kept in memory for ``GET /v1/veracity/scores/{id}`` (older ones come from the log)."""


def entry(score: TrustScore, wire: JsonObject, answer: str) -> Entry:
    """The traffic-log row of a finished score (``wire``: its JSON, stored with the row)."""
    timings = score.timings
    return Entry(
        id=str(score.id), time=time.time(), model=score.model, prompt=score.prompt,
        answer=answer, gamma=score.gamma, verdict=score.verdict, p_correct=score.p_correct,
        upstream_ms=timings.get("upstream_ms"), scoring_ms=timings.get("scoring_ms"),
        total_ms=timings.get("total_ms"), error=score.error, score=wire, decision=score.decision,
    )


class LogWriter(BatchWriter[Entry | StoredScore]):
    """Traffic-log rows and stored scores written in batches by a worker thread, so requests
    never wait on disk."""

    def __init__(self, log_file: TrafficLog | None) -> None:
        super().__init__(None if log_file is None else log_file.write, "traffic-log rows")
        self.log = log_file

    def describe(self, exc: Exception, count: int) -> str:
        where = "the traffic log" if self.log is None else self.log.path
        return str(storage_error(exc, where, f"{count} traffic-log rows",
                                 then="they are written (tried every second; requests get a 503 "
                                 "meanwhile)"))

    async def close(self) -> None:
        """Write what is queued, then close the file."""
        await super().close()
        if self.log is not None:
            self.log.close()


@dataclass
class Pending:
    """An async-mode score: who may read it, and the result once done."""

    owner: int
    result: JsonObject | None = None
    created: float = field(default_factory=time.time)


class ScoreBook:
    """Async-mode scores by id, newest kept, bounded."""

    def __init__(self, size: int = KEPT_SCORES) -> None:
        self._scores: OrderedDict[str, Pending] = OrderedDict()
        self._size = size

    def add(self, score_id: str, owner: int) -> None:
        self._scores[score_id] = Pending(owner)
        while len(self._scores) > self._size:
            self._scores.popitem(last=False)

    def finish(self, score_id: str, result: JsonObject) -> None:
        if score_id in self._scores:
            self._scores[score_id].result = result

    def get(self, score_id: str) -> Pending | None:
        return self._scores.get(score_id)


Job = Callable[[], Awaitable[None]]


class ScoreQueue:
    """Bounded queue of async-mode scores, run by a fixed number of workers."""

    def __init__(self, workers: int, size: int, on_depth: Callable[[int], None]) -> None:
        self._queue: asyncio.Queue[Job] = asyncio.Queue(maxsize=max(1, size))
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self._on_depth = on_depth

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run()) for _ in range(self._workers)]

    def offer(self, job: Job) -> bool:
        """Queue a job; False when the queue is full."""
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            return False
        self._on_depth(self._queue.qsize())
        return True

    async def _run(self) -> None:
        while True:
            job = await self._queue.get()
            self._on_depth(self._queue.qsize())
            try:
                await job()
            except Exception:
                log.exception("async score failed")
            finally:
                self._queue.task_done()

    async def drain(self, grace: float) -> int:
        """Wait up to ``grace`` seconds for queued scores; returns how many were abandoned."""
        with anyio.move_on_after(grace):
            await self._queue.join()
        left = self._queue.qsize()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return left
