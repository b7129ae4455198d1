"""A scriptable OpenAI-compatible HTTP server on 127.0.0.1, for the tests and the HTTP bench.

``MockOpenAI`` answers /chat/completions, /completions and /embeddings after ``delay``
seconds, records every request, and counts the largest number of requests in flight.
Replies queued with ``script()`` are used first, in arrival order (429s, 500s, hangs, ...),
then those ``chooser(received)`` returns (None: the normal answer). ``answered`` counts the
normal 200 answers fully sent.

Run as a script it serves until stdin closes and prints ``PORT <n>`` once listening;
``GET /stats`` returns the request count and the peak number in flight; ``GET /models`` lists
the served models.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer; ``body=None`` means the normal answer for the endpoint."""

    status: int = 200
    body: dict[str, Any] | str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: float = 0.0
    """Seconds to wait before answering (released early when the server stops)."""
    drop: bool = False
    """Close the connection without answering."""
    truncate: bool = False
    """Announce the whole body but send only its first half, then close the connection."""
    good: bool = False
    """``body`` is a usable answer: counted in ``answered`` like the normal one."""


@dataclass
class Received:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    body: Any


def vector(text: str, dim: int = 8) -> list[float]:
    """The mock's deterministic embedding of a text."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return [b / 255.0 for b in digest[:dim]]


def normal_answer(path: str, body: Any) -> dict[str, Any]:
    """What the mock says when nothing is scripted."""
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    if path.endswith("/embeddings"):
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        # listed in reverse order on purpose: clients must sort by "index"
        rows = [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(inputs)]
        return {"object": "list", "data": rows[::-1], "model": body.get("model"), "usage": usage}
    if path.endswith("/chat/completions"):
        last = body["messages"][-1]["content"] if body.get("messages") else ""
        choice = {"index": 0, "message": {"role": "assistant", "content": f"echo: {last}"},
                  "finish_reason": "stop"}
        return {"object": "chat.completion", "choices": [choice], "usage": usage}
    if path.endswith("/completions"):
        choice = {"index": 0, "text": f" continued {len(body.get('prompt', ''))}", "finish_reason": "length"}
        return {"object": "text_completion", "choices": [choice], "usage": usage}
    return {"error": {"message": f"no route {path}"}}


class MockOpenAI:
    """The server; use as a context manager or call start()/stop()."""

    def __init__(
        self, delay: float = 0.0, port: int = 0,
        chooser: Callable[[Received], Reply | None] | None = None,
        models: tuple[str, ...] = ("test-model",), slots: int = 0,
    ) -> None:
        self.delay = delay
        self.chooser = chooser
        self.models = models
        """What ``GET /models`` lists."""
        self.slots = threading.Semaphore(slots) if slots else None
        """Requests answered at once (others wait their turn, as on a real server); 0: no limit."""
        self.received: list[Received] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.answered = 0
        self._queue: list[Reply] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.mock = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> MockOpenAI:
        with self._lock:
            self._queue.extend(replies)
        return self

    def start(self) -> MockOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> MockOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.received.append(received)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self._queue:
                return self._queue.pop(0)
            chosen = self.chooser(received) if self.chooser else None
            return chosen or Reply()

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    mock: MockOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out close their socket mid-answer; that is expected here


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30
    # one buffered write per answer and no Nagle: otherwise delayed ACKs add ~40 ms a request
    wbufsize = 1 << 16
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: dict[str, Any] | str, headers: dict[str, str],
              truncate: bool = False) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if truncate:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data)

    def do_GET(self) -> None:
        mock = self.server.mock
        if self.path.endswith("/models"):
            rows = [{"id": m, "object": "model", "owned_by": "mock"} for m in mock.models]
            self._send(200, {"object": "list", "data": rows}, {})
            return
        with mock._lock:
            stats = {"requests": len(mock.received), "max_in_flight": mock.max_in_flight,
                     "answered": mock.answered}
        self._send(200, stats, {})

    def do_POST(self) -> None:
        mock = self.server.mock
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        reply = mock._next(Received(self.path, dict(self.headers.items()), body))
        try:
            if mock.slots is not None:
                with mock.slots:
                    mock._stop.wait(mock.delay + reply.hang)
            else:
                mock._stop.wait(mock.delay + reply.hang)
            if reply.drop:
                self.close_connection = True
                return
            payload = reply.body if reply.body is not None else normal_answer(self.path, body)
            self._send(reply.status, payload, reply.headers, reply.truncate)
            if reply.status == 200 and not reply.truncate and (reply.body is None or reply.good):
                self.wfile.flush()
                with mock._lock:
                    mock.answered += 1
        finally:
            mock._done()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds before each answer")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", action="append", help="a model GET /models lists (repeatable)")
    parser.add_argument("--slots", type=int, default=0, help="requests answered at once (0: any)")
    args = parser.parse_args()
    models = tuple(args.model or ["test-model"])
    with MockOpenAI(delay=args.delay, port=args.port, models=models, slots=args.slots) as mock:
        print(f"PORT {mock.port}", flush=True)
        sys.stdin.read()  # serve until the parent closes our stdin (or exits)


if __name__ == "__main__":
    main()
