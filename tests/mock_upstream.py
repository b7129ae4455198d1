"""An asyncio OpenAI-compatible server on 127.0.0.1 for the gateway tests and load bench.

Written on raw asyncio streams so it can do what a framework hides: hold an answer, drop the
connection before or during an answer, and stream chunks one by one (chunked encoding). It
answers ``POST /v1/chat/completions`` (plain and ``stream: true``) and ``GET /v1/models``
after ``delay`` seconds, at most ``concurrency`` at a time, and records every request.

The answer to a prompt that contains "unstable" depends on the characters appended to it
(so gamma > 0); any other prompt gets the same answer whatever is appended (gamma = 0).

Run as a script it serves until stdin closes and prints ``PORT <n>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STABLE = "The capital of France is Paris."


@dataclass
class Reply:
    """One scripted answer, used in arrival order; ``body=None``: the normal answer."""

    status: int = 200
    body: dict[str, Any] | None = None
    hang: float = 0.0
    drop: bool = False
    """Close the connection without answering."""
    drop_after: int | None = None
    """Streams only: close the connection after this many chunks."""
    end_after: int | None = None
    """Streams only: end the response cleanly after this many chunks (no finish_reason, no [DONE])."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers (e.g. Retry-After)."""
    text: str | None = None
    """The answer's text, in place of the usual one (plain and streamed)."""
    release: threading.Event | None = None
    """Streams only: wait for this event before the last content chunk."""
    match: Callable[[str], bool] | None = None
    """Only for a request whose last user message this accepts (None: any request). The
    gateway sends the answer's request and the perturbed ones at once, in no set order."""
    until: Callable[[MockUpstream], bool] | None = None
    """Answer only once this holds (polled for up to 10 s), e.g. once other requests arrived."""


def only(prompt: str) -> Callable[[str], bool]:
    """A ``match`` for the request that asks exactly ``prompt`` (not a perturbed one)."""
    return lambda asked: asked == prompt


def perturbed_from(prompt: str) -> Callable[[str], bool]:
    """A ``match`` for the perturbed requests made from ``prompt``."""
    return lambda asked: asked != prompt and asked.startswith(prompt)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


def answer_to(prompt: str) -> str:
    if "unstable" not in prompt:
        return STABLE
    suffix = prompt[prompt.find("unstable"):]
    codes = " ".join(str(ord(c)) for c in suffix if ord(c) < 32)
    return f"It depends on {codes or 'nothing'}: perhaps Lyon, perhaps Marseille."


def _last_user(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content", "")
    return content if isinstance(content, str) else ""


@dataclass
class MockUpstream:
    """The server; ``with MockUpstream() as up:`` runs it on a thread of its own."""

    delay: float = 0.0
    concurrency: int = 10_000
    chunk_delay: float = 0.0
    model: str = "mock-model"
    stable: bool = False
    """Answer every prompt with the stable answer ("unstable" ones too): a stronger model."""
    received: list[Received] = field(default_factory=list)
    port: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    """Most chat requests waiting for their answer at once."""
    abandoned: list[str] = field(default_factory=list)
    """The prompts of held answers (``hang``) whose client closed the connection first."""
    fault_rate: float = 0.0
    """Share of requests (not scripted) answered with a 500, drawn from a seeded generator."""
    record: bool = True
    """Keep every request in ``received`` (a long soak turns it off: it would only grow)."""
    _queue: list[Reply] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> MockUpstream:
        with self._lock:
            self._queue.extend(replies)
        return self

    def chat_bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.body for r in self.received if r.path.endswith("/chat/completions")]

    def _next(self, received: Received) -> Reply:
        asked = _last_user(received.body) if isinstance(received.body, dict) else ""
        with self._lock:
            if self.record:
                self.received.append(received)
            for i, reply in enumerate(self._queue):
                if reply.match is None or reply.match(asked):
                    return self._queue.pop(i)
            if self.fault_rate and self._faults.random() < self.fault_rate:
                return Reply(status=500)
            return Reply()

    async def serve(self, ready: threading.Event | None = None) -> None:
        self._slots = asyncio.Semaphore(self.concurrency)
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", self.port, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        self._loop = asyncio.get_running_loop()
        if ready is not None:
            ready.set()
        async with server:
            await self._stopping.wait()

    def __enter__(self) -> MockUpstream:
        self._faults = random.Random(0)
        ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self.serve(ready),), daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not reader.at_eof():
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)}
                raw = await reader.readexactly(int(headers.get("content-length", 0)))
                body = json.loads(raw) if raw else None
                if not await self._answer(method, path, headers, body, reader, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, method: str, path: str, headers: dict[str, str], body: Any,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is to be dropped."""
        if method == "GET" and path.endswith("/models"):
            self._send(writer, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 0, "owned_by": "mock"}]})
            return True
        reply = self._next(Received(path, headers, body))
        if reply.until is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while not reply.until(self) and loop.time() < deadline:
                await asyncio.sleep(0.01)
        async with self._slots:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                if reply.hang:
                    held = await self._hold(self.delay + reply.hang, reader)
                else:
                    await asyncio.sleep(self.delay)
                    held = True
            finally:
                self.in_flight -= 1
        if not held:
            with self._lock:
                self.abandoned.append(_last_user(body) if isinstance(body, dict) else "")
            return False
        if reply.drop:
            return False
        if reply.status != 200 or reply.body is not None:
            self._send(writer, reply.status, reply.body or {"error": {"message": "scripted"}},
                       reply.headers)
            return True
        text = (STABLE if self.stable else answer_to(_last_user(body))) if reply.text is None \
            else reply.text
        if body.get("stream"):
            return await self._stream(writer, text, reply)
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop"}
        if body.get("logprobs"):  # one token a word: the stable answer sure of itself
            sure = -0.05 if text == STABLE else -1.5
            choice["logprobs"] = {"content": [{"token": w, "logprob": sure, "top_logprobs": []}
                                              for w in text.split(" ")]}
        self._send(writer, 200, {
            "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": self.model,
            "choices": [choice],
            "usage": {"prompt_tokens": 7, "completion_tokens": 7, "total_tokens": 14}})
        return True

    @staticmethod
    async def _hold(seconds: float, reader: asyncio.StreamReader) -> bool:
        """Wait ``seconds``; False as soon as the client closes the connection (clients here
        send nothing while they wait for an answer, so the only thing to arrive is the end)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            if reader.at_eof():
                return False
            await asyncio.sleep(min(left, 0.01))
        return True

    def _send(self, writer: asyncio.StreamWriter, status: int, payload: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)

    async def _stream(self, writer: asyncio.StreamWriter, text: str, reply: Reply) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        words = text.split(" ")
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
        events = []
        for i, delta in enumerate(deltas):
            finish = "stop" if i == len(deltas) - 1 else None
            chunk = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
                     "model": self.model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            events.append(f"data: {json.dumps(chunk)}\n\n".encode())
        events.append(b"data: [DONE]\n\n")
        for i, data in enumerate(events):
            if reply.drop_after is not None and i >= reply.drop_after:
                await writer.drain()
                writer.transport.abort()
                return False
            if reply.end_after is not None and i >= reply.end_after:
                break
            if reply.release is not None and i == len(events) - 2:
                await asyncio.get_running_loop().run_in_executor(None, reply.release.wait, 10)
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
            await asyncio.sleep(self.chunk_delay)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds before each answer")
    parser.add_argument("--concurrency", type=int, default=10_000, help="answers at once")
    parser.add_argument("--fault-rate", type=float, default=0.0,
                        help="share of requests answered with a 500 (seeded)")
    parser.add_argument("--stable", action="store_true",
                        help='answer "unstable" prompts consistently too (a stronger model)')
    args = parser.parse_args()
    try:  # the load bench's upstream: as little CPU per answer as the machine allows
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    mock = MockUpstream(delay=args.delay, concurrency=args.concurrency,
                        fault_rate=args.fault_rate, record=False, stable=args.stable)
    with mock:
        print(f"PORT {mock.port}", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
