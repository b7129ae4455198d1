"""A seeded fault plan for ``MockOpenAI``: which replies break, and how.

Every kind of fault a real OpenAI-compatible server (or the network in front of it) has been
seen to produce. ``FaultPlan(rate, seed)`` replaces that share of replies with a fault drawn
from ``kinds``; the others get ``answer(received)``, the healthy server's reply. A server
that echoes the caller's key into its errors (some proxies do) is part of the plan, so the
tests can check that no key reaches a file or an output.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from mock_openai import Received, Reply, normal_answer

KINDS = ("429", "500", "503", "hang", "drop", "truncated", "non-json", "no-choices",
         "no-message", "null-content", "list-content", "error-200")
SURROGATE = "\ud83d"
"""Half of an emoji: the healthy model sends it (as the JSON escape) for prompts marked so."""
MARK = "[emoji]"


def healthy_answer(received: Received) -> dict[str, Any]:
    """The mock's normal answer; a prompt holding MARK gets a lone surrogate in its text."""
    data = normal_answer(received.path, received.body)
    messages = received.body.get("messages") if isinstance(received.body, dict) else None
    if messages and MARK in str(messages[-1].get("content")):
        data["choices"][0]["message"]["content"] += SURROGATE
    return data


def letter_answer(received: Received) -> dict[str, Any]:
    """A deception model: continues the prefill with an answer letter chosen from the question
    (and "E", an invalid answer, for one question in seven)."""
    messages = received.body["messages"]
    seed = hashlib.sha256(json.dumps(messages, ensure_ascii=True).encode()).digest()[0]
    letter = "ABCDE"[seed % 5] if seed % 7 else "E"
    text = f' Checked it.",\n    "Answer": "{letter}"\n}}'
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    return {"object": "chat.completion", "choices": [choice],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5}}


class FaultPlan:
    """The mock's chooser: a seeded share ``rate`` of replies is a fault."""

    def __init__(self, rate: float, seed: int = 0, kinds: Sequence[str] = KINDS, hang: float = 1.0,
                 answer: Callable[[Received], dict[str, Any]] = healthy_answer) -> None:
        self.hang = hang
        self.answer = answer
        self._lock = threading.Lock()
        self.reset(rate, seed, kinds)

    def reset(self, rate: float, seed: int = 0, kinds: Sequence[str] = KINDS) -> None:
        """Start a new seeded sequence of faults (0: a healthy server)."""
        with self._lock:
            self.rate = rate
            self.kinds = tuple(kinds)
            self.counts: dict[str, int] = {}
            self._rng = random.Random(seed)

    def __call__(self, received: Received) -> Reply:
        with self._lock:
            kind = self._rng.choice(self.kinds) if self._rng.random() < self.rate else "ok"
            self.counts[kind] = self.counts.get(kind, 0) + 1
        good = self.answer(received)
        return self.fault(kind, good, received.headers.get("Authorization", ""))

    def fault(self, kind: str, good: dict[str, Any], auth: str) -> Reply:
        echo = {"error": {"message": f"upstream failed for {auth}", "type": "server_error"}}
        choice = good["choices"][0]
        if kind == "ok":
            return Reply(body=good, good=True)
        if kind == "429":
            return Reply(429, echo, {"Retry-After": "1"})
        if kind in ("400", "500", "503"):
            return Reply(int(kind), echo)
        if kind == "hang":
            return Reply(hang=self.hang)
        if kind == "drop":
            return Reply(drop=True)
        if kind == "truncated":
            return Reply(body=good, truncate=True)
        if kind == "non-json":
            return Reply(body=f"<html>502 Bad Gateway ({auth})</html>")
        if kind == "no-choices":
            return Reply(body={**good, "choices": []})
        if kind == "no-message":
            return Reply(body={**good, "choices": [{"index": 0, "finish_reason": "stop"}]})
        if kind == "error-200":
            return Reply(body=echo)
        message = dict(choice["message"])
        if kind == "null-content":
            message["content"] = None
            return Reply(body={**good, "choices": [{**choice, "message": message}]})
        if kind == "list-content":
            text = message["content"]
            half = len(text) // 2
            message["content"] = [{"type": "text", "text": text[:half]},
                                  {"type": "text", "text": text[half:]}]
            return Reply(body={**good, "choices": [{**choice, "message": message}]}, good=True)
        raise ValueError(f"unknown fault {kind}")


def fast_sleep(seconds: float) -> None:
    """Backoff as the client computes it, but capped: the schedule is tested elsewhere."""
    time.sleep(min(seconds, 0.02))
