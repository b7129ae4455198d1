"""Server-sent events as the upstream frames them: split, read, and one event of our own."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from veracity.text import replace_surrogates

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass
class EventReader:
    """Cuts a byte stream into whole events (kept byte for byte) and reads the answer from them."""

    separator: bytes = b"\n\n"
    """The upstream's event separator, reused for the gateway's own events."""
    text: list[str] = field(default_factory=list)
    done: bool = False
    """The upstream sent ``data: [DONE]``."""
    finished: bool = False
    """A choice reported a finish_reason: the answer is complete."""
    _buffer: bytes = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Whole events completed by ``chunk``, each with its separator."""
        self._buffer += chunk
        events = []
        while match := _BOUNDARY.search(self._buffer):
            event, self._buffer = self._buffer[: match.end()], self._buffer[match.end():]
            self.separator = match.group()
            self._read(event[: match.start()])
            events.append(event)
        return events

    def rest(self) -> bytes:
        """Bytes after the last whole event (a stream that ended without a separator)."""
        rest, self._buffer = self._buffer, b""
        if rest.strip():
            self._read(rest)
        return rest

    def is_done(self, event: bytes) -> bool:
        return data_of(event).strip() == "[DONE]"

    def _read(self, event: bytes) -> None:
        data = data_of(event)
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data) if data else None
        except ValueError:
            return
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        for choice in choices or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                self.text.append(replace_surrogates(delta["content"]))  # a JSON escape can hold one
            if choice.get("finish_reason"):
                self.finished = True

    @property
    def answer(self) -> str:
        return "".join(self.text)


def data_of(event: bytes) -> str:
    """The joined ``data:`` lines of one event."""
    lines = event.decode("utf-8", "replace").splitlines()
    parts = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
    return "\n".join(parts)


def event(payload: dict[str, Any] | str, separator: bytes = b"\n\n") -> bytes:
    """One ``data:`` event framed with ``separator``."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return b"data: " + data.encode("utf-8") + separator
