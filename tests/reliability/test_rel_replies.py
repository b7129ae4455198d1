"""Each malformed reply, one at a time: retried when the server is at fault, an error on its
item when it holds no text, read correctly when it is merely unusual; never a crash."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faults import FaultPlan, healthy_answer
from mock_openai import MockOpenAI, Received, Reply
from veracity.backends.openai import OpenAIBackend
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.errors import EmptyReplyError, ErrorKind, RetryableError
from veracity.types import Generation, GenRequest

REQUEST = GenRequest.user("Who wrote Hamlet?")
GOOD = "echo: Who wrote Hamlet?"


@pytest.fixture
def client(server: MockOpenAI, cache: Cache) -> Iterator[LLMClient]:
    backend = OpenAIBackend("m", base_url=server.url, timeout=0.3, max_retries=2,
                            sleep=lambda _: None)
    made = LLMClient(backend, cache)
    yield made
    made.close()


def _fault(plan: FaultPlan, kind: str) -> Reply:
    good = healthy_answer(Received("/v1/chat/completions", {}, {"messages": [
        {"role": "user", "content": REQUEST.messages[0].content}]}))
    return plan.fault(kind, good, "")


@pytest.mark.parametrize("kind", ["429", "500", "503", "hang", "drop", "truncated", "non-json",
                                  "no-choices", "no-message", "error-200"])
def test_a_server_fault_is_retried_then_answered(
    server: MockOpenAI, plan: FaultPlan, client: LLMClient, kind: str
) -> None:
    server.script(_fault(plan, kind))
    [out] = client.generate_each([REQUEST])
    assert out == Generation(GOOD, "stop", 7, 3)
    assert len(server.received) == 2


@pytest.mark.parametrize("kind", ["500", "truncated", "non-json", "no-choices", "no-message",
                                  "error-200"])
def test_a_lasting_server_fault_is_a_server_error_on_the_item(
    server: MockOpenAI, plan: FaultPlan, client: LLMClient, cache: Cache, kind: str
) -> None:
    server.script(*[_fault(plan, kind)] * 3)
    [out] = client.generate_each([REQUEST])
    assert isinstance(out, RetryableError) and out.kind is ErrorKind.SERVER
    assert len(server.received) == 3  # the first try and max_retries=2 more
    assert cache.stats().rows == []  # nothing cached: a rerun asks again
    assert client.generate_each([REQUEST]) == [Generation(GOOD, "stop", 7, 3)]


@pytest.mark.parametrize("content", [None, [], [{"type": "image_url", "image_url": {"url": "x"}}]])
def test_a_reply_without_text_is_an_empty_error_never_cached(
    server: MockOpenAI, client: LLMClient, cache: Cache, content: Any
) -> None:
    message = {"role": "assistant", "content": content}
    server.script(Reply(body={"choices": [{"message": message, "finish_reason": "stop"}]}))
    [out] = client.generate_each([REQUEST])
    assert isinstance(out, EmptyReplyError) and out.kind is ErrorKind.EMPTY
    assert len(server.received) == 1  # not a server fault: not sent again in this run
    assert cache.stats().rows == []


def test_a_refusal_names_itself(server: MockOpenAI, client: LLMClient) -> None:
    message = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    server.script(Reply(body={"choices": [{"message": message}]}))
    [out] = client.generate_each([REQUEST])
    assert isinstance(out, EmptyReplyError) and "refused: I can't help with that." in str(out)


def test_content_parts_are_joined_as_text(server: MockOpenAI, client: LLMClient) -> None:
    parts = [{"type": "text", "text": "Shake"}, {"type": "image_url", "image_url": {}},
             {"type": "text", "text": "speare"}]
    server.script(Reply(body={"choices": [{"message": {"content": parts}}]}))
    assert client.generate_each([REQUEST]) == [Generation("Shakespeare")]


def test_lone_surrogates_are_replaced_counted_and_cached(
    server: MockOpenAI, client: LLMClient, cache: Cache
) -> None:
    body = '{"choices": [{"message": {"content": "fire \\ud83d and \\udc00 \\ud83d\\ude00"}}]}'
    server.script(Reply(body=body))
    [out] = client.generate_each([REQUEST])
    assert out == Generation("fire \ufffd and \ufffd \U0001f600", replaced_chars=2)
    assert [n for _, _, n in cache.stats().rows] == [1]
    assert client.generate_each([REQUEST]) == [out]  # from the cache, identical
    assert len(server.received) == 1


def test_the_cache_stores_text_no_utf8_file_accepts(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    cache.put_json("generation", "x", {"k": {"text": "half \ud83d"}})
    assert cache.get_json(["k"]) == {"k": {"text": "half \ud83d"}}
    cache.close()


def test_a_dead_server_stops_the_run_without_retrying_everything(
    tmp_path: Path, cache: Cache
) -> None:
    with MockOpenAI(chooser=lambda _: Reply(503)) as dead:
        backend = OpenAIBackend("m", base_url=dead.url, max_retries=1, max_concurrency=2,
                                sleep=lambda _: None)
        client = LLMClient(backend, cache)
        with pytest.raises(Exception, match="requests failed") as raised:
            client.generate_each([GenRequest.user(f"q{i}") for i in range(200)])
        client.close()
    assert "HTTP 503" in str(raised.value)
    # the outage is seen after 8 failures in a row; the 2 workers may start a few more before
    # the caller's thread gets to set the stop (more on a busy machine), never the 200 asked
    assert len(dead.received) <= 2 * 20
