"""FakeBackend(responder=...) is cached under the responder's own identity: different responders
never share an entry, the same responder finds its answers again in another process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import fake_responders as fr
from veracity.backends.fake import FakeBackend
from veracity.backends.fingerprint import Unstable, fingerprint
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.errors import ConfigError
from veracity.types import GenRequest

QUESTIONS = [GenRequest.user(q) for q in ("Is it blue?", "Why now?")]
Responder = Callable[[GenRequest], str]


def ask(responder: Responder, cache: Cache, name: str | None = None) -> tuple[list[str], int]:
    """The answers and how many of them the responder was asked for (not from the cache)."""
    client = LLMClient(FakeBackend(responder=responder, name=name), cache)
    texts = [g.text for g in client.generate(QUESTIONS)]
    return texts, client.stats.model_calls


PAIRS = {
    "two functions": (fr.shout, fr.whisper),
    "two closures of one factory": (fr.saying("yes"), fr.saying("no")),
    "two lambdas": (lambda r: "C", lambda r: "D"),
    "two partials of one function": (fr.twice, fr.thrice),
    "one method of two objects": (fr.Prefixer("a: ").answer, fr.Prefixer("b: ").answer),
}


@pytest.mark.parametrize("first, second", PAIRS.values(), ids=list(PAIRS))
def test_different_responders_never_share_an_entry(first: Responder, second: Responder,
                                                   tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    one, asked_one = ask(first, cache)
    two, asked_two = ask(second, cache)
    assert asked_one == asked_two == 2  # the second responder was asked, not served the first's
    assert one != two and two == [second(q) for q in QUESTIONS]


def test_the_same_responder_made_twice_reuses_its_entries(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    for make in (lambda: fr.shout, lambda: fr.saying("yes"), lambda: fr.Prefixer("a: ").answer,
                 lambda: fr.twice):
        first, asked = ask(make(), cache)
        again, asked_again = ask(make(), cache)
        assert asked == 2 and asked_again == 0 and again == first


def test_the_same_responder_reuses_its_entries_across_processes(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    tests = Path(__file__).parent
    script = ("import sys; from pathlib import Path; import fake_responders as fr; "
              "from test_fake_identity import ask; from veracity.cache import Cache; "
              "cache = Cache(Path(sys.argv[1])); "
              "print(ask(fr.shout, cache)[1], ask(fr.saying('yes'), cache)[1]); cache.close()")
    paths = [str(tests), *sys.path]
    # another hash seed: frozenset constants iterate in another order there
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONHASHSEED": "12345"}
    done = subprocess.run([sys.executable, "-c", script, str(db)], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.split() == ["2", "2"]
    cache = Cache(db)
    assert ask(fr.shout, cache) == ([fr.shout(q) for q in QUESTIONS], 0)
    assert ask(fr.saying("yes"), cache)[1] == 0
    assert ask(fr.saying("no"), cache)[1] == 2


def test_identity_names_the_responder_and_the_label() -> None:
    backend = FakeBackend(responder=fr.shout)
    assert backend.spec == "fake/shout"
    identity = backend.identity()
    assert identity["responder"] == "fake_responders:shout"
    assert identity["fingerprint"] == fingerprint(fr.shout) and len(identity["fingerprint"]) == 16
    named = FakeBackend(responder=fr.shout, name="loud")
    assert named.spec == "fake/loud" and named.identity()["fingerprint"] == identity["fingerprint"]
    assert FakeBackend("stable").identity() == {"mode": "fake/stable"}


def test_a_capture_without_a_stable_description_is_never_shared_unless_named(
        tmp_path: Path) -> None:
    lock = threading.Lock()

    def locked(request: GenRequest) -> str:
        with lock:
            return "locked " + request.messages[-1].content

    with pytest.raises(Unstable):
        fingerprint(locked)
    cache = Cache(tmp_path / "c.sqlite")
    assert ask(locked, cache)[1] == 2 and ask(locked, cache)[1] == 2  # two backends, two entries
    assert ask(locked, cache, name="locked")[1] == 2
    assert ask(locked, cache, name="locked")[1] == 0  # the name stands in for the lock


def test_responders_are_labelled_with_name_not_mode() -> None:
    with pytest.raises(ConfigError, match="name="):
        FakeBackend("longer", responder=fr.shout)
    with pytest.raises(ConfigError, match="without '/'"):
        FakeBackend(responder=fr.shout, name="a/b")
    with pytest.raises(ConfigError, match="name= labels a responder"):
        FakeBackend("echo", name="x")
    with pytest.raises(ConfigError, match="unknown fake mode"):
        FakeBackend("nope")
