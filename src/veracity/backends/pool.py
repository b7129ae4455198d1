"""A fixed set of daemon worker threads for blocking requests.

``ThreadPoolExecutor`` joins its workers when the interpreter exits, so one request stalled on
a dead server would hold Ctrl-C for up to the request timeout. Daemon workers die with the
process, so an interrupted run exits at once (the OS closes their sockets, which tells the
server to stop generating).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
_Task = tuple[Future[Any], Callable[[], Any]]


class DaemonPool:
    """Runs callables on up to ``workers`` daemon threads, started on first use."""

    def __init__(self, workers: int, name: str = "veracity-worker") -> None:
        self._workers = workers
        self._name = name
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn``; its future can be cancelled until a worker starts it."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            if len(self._threads) < self._workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        self._tasks.put((future, fn))
        return future

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            future, fn = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Stop the workers once their current task is done; never waits for them."""
        with self._lock:
            self._closed = True
            for _ in self._threads:
                self._tasks.put(None)
