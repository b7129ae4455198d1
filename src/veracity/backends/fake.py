"""Deterministic scripted backend for tests and examples (``fake/<mode>``)."""

from __future__ import annotations

import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from veracity.backends.base import Capabilities, Outcome
from veracity.backends.fingerprint import Unstable, fingerprint, label
from veracity.errors import ConfigError, PermanentError
from veracity.jsontypes import JsonObject
from veracity.types import Generation, GenRequest, TokenLogprob

Responder = Callable[[GenRequest], "str | Generation"]
"""Answers one request: its text, or a whole Generation (to script token log-probabilities)."""
logger = logging.getLogger(__name__)

_WORDS = (
    "the answer is paris london four blue river mountain seven history science "
    "probably never always water fire queen king red green yes no"
).split()
_PERTURBATION = re.compile(r"\s[^\w\s?.!,'\"-]{0,3}$|[\x00-\x1f]+")


def last_user(request: GenRequest) -> str:
    return next((m.content for m in reversed(request.messages) if m.role == "user"), "")


def digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big")


def babble(seed_text: str, words: int = 8) -> str:
    value = digest(seed_text)
    out = []
    for _ in range(words):
        out.append(_WORDS[value % len(_WORDS)])
        value //= len(_WORDS)
        if value == 0:
            value = digest(seed_text + str(len(out)))
    return " ".join(out)


def echo(request: GenRequest) -> str:
    """Repeats the prompt, so every perturbation shows up in the answer."""
    return f"You asked: {last_user(request)}"


def stable(request: GenRequest) -> str:
    """Answers from the question with trailing noise removed: gamma is 0."""
    return babble(_PERTURBATION.sub("", last_user(request)).strip())


def unstable(request: GenRequest) -> str:
    """Answers from the full prompt: any perturbation changes the answer."""
    return babble(last_user(request) + f"#{request.sample_index}")


def constant(request: GenRequest) -> str:
    """Always answers "4" (the paper's Table 1)."""
    return "4"


def empty(request: GenRequest) -> str:
    """Always answers nothing."""
    return ""


def garbage(request: GenRequest) -> str:
    """Never finishes the JSON it is asked to continue."""
    return " I am not sure, maybe B"


MODES: dict[str, Responder] = {
    # generic modes; a method's own (``fake/deceive``, ``fake/judge``, ...) are in its folder
    "echo": echo,
    "stable": stable,
    "unstable": unstable,
    "constant": constant,
    "empty": empty,
    "garbage": garbage,
}


def mode_names() -> list[str]:
    """Every ``fake/<mode>``: the generic ones here, then those the method folders bring."""
    from veracity.method import fake_modes

    return [*MODES, *(name for name in fake_modes() if name not in MODES)]


def responder_of(mode: str) -> Responder:
    """The responder of ``fake/<mode>``; a method's own mode is imported on first use."""
    if mode in MODES:
        return MODES[mode]
    from veracity.method import fake_modes

    found = fake_modes().get(mode)
    if found is None:
        raise ConfigError(f"unknown fake mode '{mode}'; known: {', '.join(sorted(mode_names()))}")
    return found.load()


class FakeBackend:
    """Scripted outputs: a named mode, a responder callable, or an ``enqueue``d list.

    ``history`` records every request it received, so tests can assert on calls.

    A responder is cached under its own identity: its ``module:qualname`` and a fingerprint of
    its code and captured values (closure cells, ``functools.partial`` arguments, a bound
    method's ``self``), so two responders never share cache entries and the same responder finds
    its answers again in a later run. ``name=`` labels it (``fake/<name>``); when a captured
    value has no stable description (a lock, an open file), the name stands in for it, and
    without a name the answers are cached for this backend object only.
    """

    capabilities = Capabilities(prefill=True, seed=True, max_concurrency=8, logprobs=True)

    def __init__(self, mode: str | None = None, responder: Responder | None = None,
                 delay: float = 0.0, name: str | None = None) -> None:
        """``delay``: seconds each request takes, like a slow model (scheduling tests, benches)."""
        if delay < 0:
            raise ConfigError(f"delay must not be negative, got {delay}")
        self.delay = delay
        self._queue: list[str] = []
        self.history: list[GenRequest] = []
        if responder is None:
            if name is not None:
                raise ConfigError("name= labels a responder; a fake mode is named by mode=")
            mode = mode or "echo"
            self.spec = f"fake/{mode}"
            self._responder = responder_of(mode)
            self._identity: dict[str, Any] = {"mode": self.spec}
            return
        if mode is not None:
            raise ConfigError(f"a responder is labelled with name=, not mode= (got mode={mode!r})")
        if name is not None and (not name or "/" in name):
            raise ConfigError(f"a responder's name must be non-empty and without '/', got {name!r}")
        self._responder = responder
        self.spec = f"fake/{name or label(responder).rsplit('.', 1)[-1].rsplit(':', 1)[-1]}"
        self._identity = {"mode": self.spec, "responder": label(responder),
                          "fingerprint": _responder_fingerprint(responder, name)}

    def enqueue(self, texts: Sequence[str]) -> None:
        """Answer the next requests with these texts, in order, before the responder."""
        self._queue.extend(texts)

    def identity(self) -> JsonObject:
        return dict(self._identity)

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        out: list[Outcome] = []
        for request in requests:
            self.history.append(request)
            if self.delay:
                time.sleep(self.delay)
            reply = self._queue.pop(0) if self._queue else self._responder(request)
            text = reply if isinstance(reply, str) else reply.text
            if text.startswith("!error"):
                out.append(PermanentError(text[len("!error") :].strip() or "scripted error"))
                continue
            out.append(_with_logprobs(reply, request))
        return out

    def close(self) -> None:
        pass


_TOKEN = re.compile(r"\s*\S+")


def _with_logprobs(reply: str | Generation, request: GenRequest) -> Generation:
    """The reply as a generation, with token log-probabilities exactly when the request asks:
    a responder's scripted ones (their alternatives cut to the k asked for), else made up
    deterministically from the text (each whitespace-separated word one token)."""
    if isinstance(reply, Generation):
        found = reply if reply.completion_tokens else replace(
            reply, completion_tokens=len(reply.text.split()))
        if request.logprobs is None:
            return replace(found, logprobs=None)
        if found.logprobs is not None:
            return replace(found, logprobs=tuple(
                replace(t, top=t.top[: request.logprobs]) for t in found.logprobs))
        reply = found.text
    text = reply if isinstance(reply, str) else reply.text
    generation = Generation(text=text, completion_tokens=len(text.split()))
    if request.logprobs is None:
        return generation
    tokens = []
    for k, token in enumerate(_TOKEN.findall(text)):
        logprob = -(digest(f"{text}#{k}") % 2000) / 1000.0
        alternatives = [(token, logprob)] + [
            (f" {_WORDS[(digest(token) + j) % len(_WORDS)]}", logprob - j)
            for j in range(1, request.logprobs)]
        tokens.append(TokenLogprob(token, logprob, tuple(alternatives[: request.logprobs])))
    return replace(generation, logprobs=tuple(tokens))


def _responder_fingerprint(responder: Responder, name: str | None) -> str:
    try:
        return fingerprint(responder)
    except Unstable as why:
        if name is not None:
            return f"named:{name}"
        logger.info("fake responder %s: %s, so its answers are cached for this backend only "
                    "(pass name= to keep them across runs)", label(responder), why)
        return f"unshared:{uuid.uuid4().hex}"


def load(name: str, **options: Any) -> FakeBackend:
    """Registry factory for ``fake/<mode>``."""
    return FakeBackend(mode=name or "echo", **options)
