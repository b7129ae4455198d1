"""SQLite cache and the caching client: keys, reuse, errors never cached."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
from pathlib import Path

import numpy as np
import pytest

from veracity.backends.fake import FakeBackend
from veracity.cache import Cache, cache_key
from veracity.client import CachedEmbedder, LLMClient, request_key
from veracity.embed.hashing import HashEmbedder
from veracity.errors import AccessError, BackendError, PermanentError
from veracity.paths import default_cache_path
from veracity.types import GenRequest, Message, Sampling


def test_default_path_follows_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERACITY_HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / "cache.sqlite"
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "x.db"))
    assert default_cache_path() == tmp_path / "x.db"


def _open_and_write(path: str, start: multiprocessing.synchronize.Barrier, name: str) -> None:
    start.wait(10)
    cache = Cache(path)
    cache.put_json("generation", "m/x", {name: name})
    cache.close()


def test_processes_opening_a_new_cache_at_once_all_get_it(tmp_path: Path) -> None:
    # switching a new file to WAL needs it to itself: SQLite answers "database is locked" at
    # once, without its busy wait, to all but one of the processes racing to open it
    context = multiprocessing.get_context("fork")
    for trial in range(8):
        path = str(tmp_path / f"c{trial}.sqlite")
        start = context.Barrier(6)
        workers = [context.Process(target=_open_and_write, args=(path, start, f"k{i}"))
                   for i in range(6)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert [w.exitcode for w in workers] == [0] * 6
        cache = Cache(path)
        assert len(cache.get_json([f"k{i}" for i in range(6)])) == 6
        cache.close()


def test_key_is_order_independent_and_content_sensitive() -> None:
    assert cache_key({"a": 1, "b": 2}) == cache_key({"b": 2, "a": 1})
    assert cache_key({"a": 1}) != cache_key({"a": 2})


def test_request_key_covers_everything_that_changes_output() -> None:
    base = GenRequest.user("hi", Sampling(temperature=0.7, seed=1))
    key = request_key("m/x", {"f": 1}, base)
    variants = [
        request_key("m/y", {"f": 1}, base),
        request_key("m/x", {"f": 2}, base),
        request_key("m/x", {"f": 1}, GenRequest.user("hi!", base.sampling)),
        request_key("m/x", {"f": 1}, GenRequest.user("hi", Sampling(temperature=0.7, seed=2))),
        request_key("m/x", {"f": 1}, GenRequest.user("hi", base.sampling, prefill="{")),
        request_key("m/x", {"f": 1}, GenRequest.user("hi", base.sampling, sample_index=1)),
        request_key("m/x", {"f": 1}, GenRequest((Message("system", "s"), *base.messages), base.sampling)),
    ]
    assert len({key, *variants}) == len(variants) + 1
    # greedy decoding ignores the seed: it must not split the cache
    greedy = [GenRequest.user("hi", Sampling(seed=s)) for s in (1, 2)]
    assert request_key("m", {}, greedy[0]) == request_key("m", {}, greedy[1])


def test_json_and_vectors_roundtrip(cache: Cache) -> None:
    cache.put_json("generation", "fake/x", {"k1": {"text": "a\x00b"}})
    assert cache.get_json(["k1", "missing"]) == {"k1": {"text": "a\x00b"}}
    vec = np.arange(4, dtype=np.float32)
    cache.put_vectors("hash/4", {"v": vec})
    assert np.array_equal(cache.get_vectors(["v"])["v"], vec)
    stats = cache.stats()
    assert ("generation", "fake/x", 1) in stats.rows and stats.size_bytes > 0
    assert cache.clear("fake/x") == 1
    assert cache.clear() == 1


def test_client_reuses_cache_and_dedupes(cache: Cache) -> None:
    backend = FakeBackend("echo")
    client = LLMClient(backend, cache)
    requests = [GenRequest.user("a"), GenRequest.user("b"), GenRequest.user("a")]
    first = client.generate(requests)
    assert [g.text for g in first] == ["You asked: a", "You asked: b", "You asked: a"]
    assert len(backend.history) == 2  # the duplicate was sent once
    again = LLMClient(FakeBackend("echo"), cache)
    assert [g.text for g in again.generate(requests)] == [g.text for g in first]
    assert again.stats.model_calls == 0 and again.stats.cache_hits == 3


def test_errors_are_not_cached_and_successes_are_kept(cache: Cache) -> None:
    backend = FakeBackend("echo")
    backend.enqueue(["ok one", "!error server exploded", "ok three"])
    client = LLMClient(backend, cache)
    requests = [GenRequest.user(q) for q in ("1", "2", "3")]
    with pytest.raises(BackendError, match="1 of 3 requests failed.*server exploded"):
        client.generate(requests)
    retry = LLMClient(FakeBackend("echo"), cache)
    texts = [g.text for g in retry.generate(requests)]
    assert texts == ["ok one", "You asked: 2", "ok three"]
    assert retry.stats.model_calls == 1


def test_generate_each_keeps_going_past_a_rejected_request_but_not_a_rejected_model(
    cache: Cache,
) -> None:
    backend = FakeBackend("echo")
    backend.enqueue(["ok one", "!error prompt too long", "ok three"])
    client = LLMClient(backend, cache, chunk_size=2)
    requests = [GenRequest.user(q) for q in ("1", "2", "3")]
    out = client.generate_each(requests)
    assert isinstance(out[1], PermanentError) and "too long" in str(out[1])
    assert [getattr(g, "text", None) for g in out] == ["ok one", None, "ok three"]
    assert client.stats.failed == 1 and client.stats.model_calls == 3

    broken = FakeBackend("echo")
    broken.enqueue(["!error unsupported parameter top_k"] * 2)
    with pytest.raises(BackendError, match="2 of 2 requests failed.*top_k"):
        LLMClient(broken).generate_each([GenRequest.user("5"), GenRequest.user("6")])

    # a key revoked mid-run: the model has answered before, and one other request is fine
    revoked = FakeBackend("echo")
    revoked_client = LLMClient(revoked, cache)
    revoked_client.generate_each([GenRequest.user("7")])
    real = revoked.generate
    revoked.generate = lambda reqs: [  # type: ignore[method-assign]
        AccessError("HTTP 401: key rejected") if r.messages[-1].content == "8" else real([r])[0]
        for r in reqs]
    with pytest.raises(BackendError, match="key rejected"):
        revoked_client.generate_each([GenRequest.user("8"), GenRequest.user("9")])


def test_cached_embedder_embeds_each_text_once(cache: Cache) -> None:
    embedder = CachedEmbedder(HashEmbedder(), cache)
    matrix = embedder.embed(["a", "b", "a", "c"])
    assert matrix.shape == (4, 256) and np.array_equal(matrix[0], matrix[2])
    assert embedder.stats.texts_embedded == 3
    embedder.embed(["a", "c"])
    assert embedder.stats.texts_embedded == 3
    fresh = CachedEmbedder(HashEmbedder(), cache)
    assert np.array_equal(fresh.embed(["b"])[0], matrix[1])
    assert fresh.stats.texts_embedded == 0
    assert (fresh.stats.requests, fresh.stats.cache_hits) == (1, 1)  # from the SQLite cache
    assert embedder.stats.requests == 6
