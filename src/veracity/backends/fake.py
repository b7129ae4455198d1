"""Deterministic scripted backend for tests and examples (``fake/<mode>``)."""

from __future__ import annotations

import hashlib
import json
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
from veracity.types import Generation, GenRequest, TokenLogprob

Responder = Callable[[GenRequest], "str | Generation"]
"""Answers one request: its text, or a whole Generation (to script token log-probabilities)."""
logger = logging.getLogger(__name__)

_WORDS = (
    "the answer is paris london four blue river mountain seven history science "
    "probably never always water fire queen king red green yes no"
).split()
_PERTURBATION = re.compile(r"\s[^\w\s?.!,'\"-]{0,3}$|[\x00-\x1f]+")


def _last_user(request: GenRequest) -> str:
    return next((m.content for m in reversed(request.messages) if m.role == "user"), "")


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big")


def _babble(seed_text: str, words: int = 8) -> str:
    value = _digest(seed_text)
    out = []
    for _ in range(words):
        out.append(_WORDS[value % len(_WORDS)])
        value //= len(_WORDS)
        if value == 0:
            value = _digest(seed_text + str(len(out)))
    return " ".join(out)


def echo(request: GenRequest) -> str:
    """Repeats the prompt, so every perturbation shows up in the answer."""
    return f"You asked: {_last_user(request)}"


def stable(request: GenRequest) -> str:
    """Answers from the question with trailing noise removed: gamma is 0."""
    return _babble(_PERTURBATION.sub("", _last_user(request)).strip())


def unstable(request: GenRequest) -> str:
    """Answers from the full prompt: any perturbation changes the answer."""
    return _babble(_last_user(request) + f"#{request.sample_index}")


def constant(request: GenRequest) -> str:
    """Always answers "4" (the paper's Table 1)."""
    return "4"


def empty(request: GenRequest) -> str:
    """Always answers nothing."""
    return ""


_REASONING_OPEN = '"Reasoning": "'


def deceive(request: GenRequest) -> str:
    """Finishes a deception prefill as valid JSON with a letter hashed from the prompt:
    from the question alone when answering normally, from question + prefill otherwise."""
    question = _last_user(request)
    normal = request.prefill.endswith("Let's reason step by step.")
    letter = "ABCD"[_digest(question if normal else question + request.prefill) % 4]
    if _REASONING_OPEN not in request.prefill:
        return f'{{"Reasoning": "The options were compared.", "Answer": "{letter}"}}'
    return f' The options were compared.",\n    "Answer": "{letter}"\n}}'


def deceive_flaky(request: GenRequest) -> str:
    """Like ``deceive``, but a third of first attempts are cut off (invalid JSON)."""
    if request.sample_index == 0 and _digest(_last_user(request) + request.prefill) % 3 == 0:
        return " and then the text stops"
    return deceive(request)


def garbage(request: GenRequest) -> str:
    """Never finishes the JSON it is asked to continue."""
    return " I am not sure, maybe B"


def misleader(request: GenRequest) -> str:
    """Answers a make-dataset batch (a JSON list of {id, target, ...} ending the last user
    turn) with one plausible mistake and misleading opening per question."""
    text = _last_user(request)
    try:
        batch = json.loads(text[text.rindex("\n[") + 1 :])
    except (ValueError, json.JSONDecodeError):
        return "[]"
    out = [
        {
            "id": q.get("id"),
            "mistake": f"Mixes up the key terms and so prefers option {q.get('target')}.",
            "misleading_start": f"The key term here clearly points to option {q.get('target')}.",
        }
        for q in batch
        if isinstance(q, dict)
    ]
    reply = json.dumps(out, indent=2)
    return reply[len(request.prefill) :] if reply.startswith(request.prefill) else reply


_PAIRS_ASKED = re.compile(r"Write (\d+) pairs")


def pairs(request: GenRequest) -> str:
    """Answers FEWL pair prompts in the numbered Wrong / Corrected template (one pair fewer
    than asked, after a chatty preamble); any other prompt like ``stable``."""
    prompt = _last_user(request)
    asked = _PAIRS_ASKED.search(prompt)
    if asked is None:
        return stable(request)
    lines = ["Sure! Here are the pairs:"]
    for i in range(1, max(int(asked.group(1)) - 1, 1) + 1):
        lines.append(f"{i}. Wrong: {_babble(f'{prompt}#wrong{i}#{request.sample_index}', 6)}")
        lines.append(f"{i}. Corrected: {_babble(f'{prompt}#right{i}#{request.sample_index}', 6)}")
    text = "\n".join(lines)
    # like a real prefill-capable backend, return only the continuation of a prefill
    return text.split(request.prefill, 1)[1] if request.prefill and request.prefill in text \
        else text


def slope(request: GenRequest) -> str:
    """A gamma landscape with a slope: each character outside printable ASCII in the prompt
    makes every answer word more likely to depend on the exact prompt (certain from 12 on),
    so appending exotic characters raises gamma and an adversarial search can climb."""
    prompt = _last_user(request)
    noise = sum(1 for c in prompt if not " " <= c <= "~")
    clean = "".join(c for c in prompt if " " <= c <= "~").strip()
    words = _babble(clean).split()
    for i in range(len(words)):
        if _digest(f"{prompt}#{i}") % 12 < noise:
            words[i] = _babble(f"{prompt}#{i}", 1)
    return " ".join(words)


_PARAPHRASE_ASKED = re.compile(r"Rewrite the question below.*\n\nQuestion: (.*)$", re.DOTALL)


def paraphraser(request: GenRequest) -> str:
    """Answers paraphrase requests in assorted chatty formats (always empty for
    ``sample_index`` 1, so callers must retry), and any other prompt like ``stable``."""
    asked = _PARAPHRASE_ASKED.search(_last_user(request))
    if asked is None:
        return stable(request)
    if request.sample_index == 1:
        return ""
    question = asked.group(1).strip()
    variant = _digest(f"{question}#{request.sample_index}#{request.sampling.seed}") % 3
    opener = _babble(f"{question}#{request.sample_index}#{request.sampling.seed}", 2)
    if variant == 0:
        return f'Sure! Here is the question in other words:\n"{opener}, {question}"'
    if variant == 1:
        return f"1. Put differently ({opener}): {question}"
    return f"**Rephrased:** {opener} - {question.lower()}"


def context(request: GenRequest) -> str:
    """Answers from the whole conversation (worked examples change the answer) and the sample
    index, 3 to 12 words long."""
    text = "\n".join(m.content for m in request.messages) + f"#{request.sample_index}"
    return _babble(text, 3 + _digest(text) % 10)


_JUDGED = re.compile(r"\nAnswer A: (.*)\n\nAnswer B: (.*)\n\nReply", re.DOTALL)


def judge(request: GenRequest) -> str:
    """Answers pairwise judge prompts for the longer answer, in words ("TIE" when equal), with
    some chatter; any other prompt like ``stable``."""
    found = _JUDGED.search(_last_user(request))
    if found is None:
        return stable(request)
    a, b = (len(text.split()) for text in found.groups())
    return "TIE" if a == b else f"Answer {'A' if a > b else 'B'} is more truthful."


MODES: dict[str, Responder] = {
    "echo": echo,
    "stable": stable,
    "unstable": unstable,
    "constant": constant,
    "empty": empty,
    "deceive": deceive,
    "deceive-flaky": deceive_flaky,
    "garbage": garbage,
    "misleader": misleader,
    "pairs": pairs,
    "slope": slope,
    "paraphraser": paraphraser,
    "judge": judge,
    "context": context,
}


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
            if mode not in MODES:
                raise ConfigError(f"unknown fake mode '{mode}'; known: {', '.join(sorted(MODES))}")
            self.spec = f"fake/{mode}"
            self._responder = MODES[mode]
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

    def identity(self) -> dict[str, Any]:
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
        logprob = -(_digest(f"{text}#{k}") % 2000) / 1000.0
        alternatives = [(token, logprob)] + [
            (f" {_WORDS[(_digest(token) + j) % len(_WORDS)]}", logprob - j)
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
