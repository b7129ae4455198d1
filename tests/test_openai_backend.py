"""The OpenAI-compatible backend and embedder against a real local mock server."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from mock_openai import MockOpenAI, Reply, vector
from veracity.backends.openai import OpenAIBackend
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.embed.openai import OpenAIEmbedder
from veracity.errors import (
    BackendError,
    CapabilityError,
    ConfigError,
    PermanentError,
    RetryableError,
)
from veracity.registry import load_embedder, load_model
from veracity.types import Generation, GenRequest, Message, Sampling

KEY = "sk-test-d0-not-leak-4242"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture
def server() -> Iterator[MockOpenAI]:
    with MockOpenAI() as mock:
        yield mock


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


_OPEN: list[OpenAIBackend | OpenAIEmbedder] = []


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def track(made: Any) -> Any:
    _OPEN.append(made)
    return made


def backend(server: MockOpenAI, sleeps: list[float], **options: Any) -> OpenAIBackend:
    made = OpenAIBackend("test-model", base_url=server.url, sleep=sleeps.append, **options)
    _OPEN.append(made)
    return made


def one(b: OpenAIBackend, request: GenRequest) -> Generation | BackendError:
    [outcome] = b.generate([request])
    return outcome


def test_generates_in_order_with_the_openai_payload(server: MockOpenAI, sleeps: list[float]) -> None:
    b = backend(server, sleeps)
    requests = [GenRequest.user(f"q{i}", sample_index=i) for i in range(5)]
    out = b.generate(requests)
    assert [g.text for g in out if isinstance(g, Generation)] == [f"echo: q{i}" for i in range(5)]
    assert out[0] == Generation("echo: q0", "stop", prompt_tokens=7, completion_tokens=3)
    bodies = sorted((r.body for r in server.received), key=lambda body: body["seed"])
    assert [r.path for r in server.received] == ["/v1/chat/completions"] * 5
    assert bodies[3] == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "q3"}],
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 128,
        "seed": 3,  # seed + sample_index
    }
    assert sleeps == []
    b.close()


def test_non_default_sampling_fields_are_sent(server: MockOpenAI, sleeps: list[float]) -> None:
    sampling = Sampling(temperature=0.3, top_p=0.3, top_k=40, repeat_penalty=1.1, max_tokens=9,
                        seed=5, stop=("\n\n",))
    request = GenRequest(messages=(Message("system", "be brief"), Message("user", "hi")), sampling=sampling)
    assert isinstance(one(backend(server, sleeps, extra_body={"min_p": 0.05}), request), Generation)
    body = server.received[0].body
    assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert (body["temperature"], body["top_p"], body["top_k"], body["max_tokens"]) == (0.3, 0.3, 40, 9)
    assert (body["repeat_penalty"], body["repetition_penalty"], body["seed"]) == (1.1, 1.1, 5)
    assert body["stop"] == ["\n\n"] and body["min_p"] == 0.05


def test_control_characters_and_odd_text_survive_the_wire(server: MockOpenAI, sleeps: list[float]) -> None:
    prompt = "What is 2+2? \x00\x1b\x07 \ud800 ünï"
    out = one(backend(server, sleeps), GenRequest.user(prompt))
    assert isinstance(out, Generation) and out.text == f"echo: {prompt}"


def test_key_is_sent_but_never_shown(server: MockOpenAI, sleeps: list[float],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", KEY)
    b = backend(server, sleeps, api_key_env="MY_KEY")
    assert isinstance(one(b, GenRequest.user("hi")), Generation)
    assert server.received[0].headers["Authorization"] == f"Bearer {KEY}"
    # a server that echoes the key back in its error message
    server.script(Reply(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}}))
    error = one(b, GenRequest.user("again"))
    assert isinstance(error, PermanentError)
    assert "HTTP 401" in str(error) and "$MY_KEY was rejected" in str(error)
    assert "[redacted]" in str(error)
    for shown in (str(error), repr(b), json.dumps(b.identity()), repr(b._http)):
        assert KEY not in shown
    assert b.identity() == {"base_url": server.url, "prefill_mode": "none"}


def test_no_key_is_fine_until_the_server_wants_one(server: MockOpenAI, sleeps: list[float]) -> None:
    b = backend(server, sleeps)
    assert isinstance(one(b, GenRequest.user("hi")), Generation)
    assert "Authorization" not in server.received[0].headers
    server.script(Reply(401, {"error": {"message": "missing bearer token"}}))
    error = one(b, GenRequest.user("x"))
    assert isinstance(error, PermanentError) and "set $OPENAI_API_KEY" in str(error)
    assert "missing bearer token" in str(error) and len(server.received) == 2 and sleeps == []


def test_429_honours_retry_after_then_succeeds(server: MockOpenAI, sleeps: list[float]) -> None:
    server.script(Reply(429, {"error": {"message": "rate limited"}}, {"Retry-After": "3"}))
    out = one(backend(server, sleeps), GenRequest.user("hi"))
    assert isinstance(out, Generation) and out.text == "echo: hi"
    assert sleeps == [3.0] and len(server.received) == 2


def test_server_errors_and_dropped_connections_are_retried(server: MockOpenAI, sleeps: list[float]) -> None:
    server.script(Reply(500, "internal error"), Reply(drop=True), Reply(502, {"error": "bad gateway"}))
    out = one(backend(server, sleeps), GenRequest.user("hi"))
    assert isinstance(out, Generation) and len(server.received) == 4
    assert len(sleeps) == 3 and all(0 < s < 5 for s in sleeps)


@pytest.mark.parametrize("status", [400, 403, 404, 422])
def test_client_errors_fail_at_once_with_the_server_message(
    server: MockOpenAI, sleeps: list[float], status: int
) -> None:
    server.script(Reply(status, {"error": {"message": "model 'x' " + "very long " * 100}}))
    error = one(backend(server, sleeps), GenRequest.user("hi"))
    assert isinstance(error, PermanentError)
    text = str(error)
    assert text.startswith(f"openai/test-model: HTTP {status} from {server.url}/chat/completions: model 'x'")
    assert len(text) < 500 and "..." in text  # the server message is truncated
    assert len(server.received) == 1 and sleeps == []
    if status == 404:
        assert "check the model name and the base URL" in text


def test_gives_up_after_max_retries(server: MockOpenAI, sleeps: list[float]) -> None:
    server.script(*[Reply(503, {"error": {"message": "overloaded"}})] * 3)
    error = one(backend(server, sleeps, max_retries=2), GenRequest.user("hi"))
    assert isinstance(error, RetryableError)
    assert f"server at {server.url}/chat/completions failed after 3 attempts" in str(error)
    assert "HTTP 503" in str(error) and "overloaded" in str(error)
    assert len(server.received) == 3 and len(sleeps) == 2


def test_a_hanging_server_times_out(server: MockOpenAI, sleeps: list[float]) -> None:
    server.script(Reply(hang=10.0), Reply(hang=10.0))
    error = one(backend(server, sleeps, timeout=0.2, max_retries=1), GenRequest.user("hi"))
    # both attempts are still held by the server: the client gave up on them, it was not answered
    assert server.in_flight == 2 and len(server.received) == 2
    assert isinstance(error, RetryableError) and "no answer within 0.2 s" in str(error)
    assert "after 2 attempts" in str(error)


def test_connection_refused_on_a_closed_port(sleeps: list[float]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    b = track(OpenAIBackend("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, sleep=sleeps.append))
    error = one(b, GenRequest.user("hi"))
    assert isinstance(error, RetryableError) and "ConnectError" in str(error)
    assert f"server at http://127.0.0.1:{port}/v1/chat/completions failed after 3 attempts" in str(error)
    assert len(sleeps) == 2


def test_one_failure_does_not_sink_the_batch(server: MockOpenAI, sleeps: list[float]) -> None:
    server.script(Reply(400, {"error": {"message": "prompt too long"}}))
    out = backend(server, sleeps, max_concurrency=1).generate([GenRequest.user(f"q{i}") for i in range(3)])
    assert isinstance(out[0], PermanentError) and "prompt too long" in str(out[0])
    assert [g.text for g in out[1:] if isinstance(g, Generation)] == ["echo: q1", "echo: q2"]


def test_malformed_answers_are_retried_like_server_errors(
    server: MockOpenAI, sleeps: list[float]
) -> None:
    server.script(Reply(200, {"choices": []}), Reply(200, "<html>gateway</html>"))
    b = backend(server, sleeps, max_concurrency=1)
    assert b.generate([GenRequest.user("a"), GenRequest.user("b")]) == [
        Generation("echo: a", "stop", 7, 3), Generation("echo: b", "stop", 7, 3)]
    assert len(sleeps) == 2 and len(server.received) == 4
    server.script(*[Reply(200, {"choices": []})] * 6)
    error = one(b, GenRequest.user("c"))
    assert isinstance(error, RetryableError) and "malformed reply" in str(error)
    assert "(no choices)" in str(error) and "failed after 6 attempts" in str(error)


def test_concurrency_is_bounded(sleeps: list[float]) -> None:
    with MockOpenAI(delay=0.05) as server:
        b = backend(server, sleeps, max_concurrency=4)
        out = b.generate([GenRequest.user(f"q{i}") for i in range(40)])
        assert all(isinstance(g, Generation) for g in out)
        # really concurrent, and never more than allowed: counted by the server, not timed
        assert server.max_in_flight == 4 and len(server.received) == 40


def test_works_inside_a_running_event_loop(server: MockOpenAI, sleeps: list[float]) -> None:
    b = backend(server, sleeps)

    async def main() -> list[Generation | BackendError]:
        return b.generate([GenRequest.user("inside")])

    [out] = asyncio.run(main())
    assert isinstance(out, Generation) and out.text == "echo: inside"


def test_prefill_needs_a_prefill_mode(server: MockOpenAI, sleeps: list[float]) -> None:
    b = backend(server, sleeps)
    assert not b.capabilities.prefill
    with pytest.raises(CapabilityError, match="prefill_mode='continue'"):
        b.generate([GenRequest.user("q", prefill='{"Reasoning": "')])
    assert server.received == []


def test_continue_mode_sends_a_final_assistant_message(server: MockOpenAI, sleeps: list[float]) -> None:
    b = backend(server, sleeps, prefill_mode="continue")
    assert b.capabilities.prefill and b.identity()["prefill_mode"] == "continue"
    prefill = '{\n    "Reasoning": "Let\'s reason step by step.'
    out = one(b, GenRequest.user("Which?", prefill=prefill))
    assert isinstance(out, Generation) and out.text == f"echo: {prefill}"
    body = server.received[0].body
    assert body["messages"] == [{"role": "user", "content": "Which?"},
                                {"role": "assistant", "content": prefill}]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    one(b, GenRequest.user("plain"))
    assert "continue_final_message" not in server.received[1].body


def test_completions_mode_renders_the_template_here(server: MockOpenAI, sleeps: list[float]) -> None:
    b = backend(server, sleeps, prefill_mode="completions", chat_template=CHATML)
    request = GenRequest(messages=(Message("system", "S"), Message("user", "Q")), prefill="{\"A\": \"")
    out = one(b, request)
    expected = (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
        '<|im_start|>assistant\n{"A": "'
    )
    assert server.received[0].path == "/v1/completions"
    body = server.received[0].body
    assert body["prompt"] == expected and "messages" not in body
    # the generation is only the continuation the server returned, never the prefill
    assert isinstance(out, Generation) and out.text == f" continued {len(expected)}"
    assert out.finish_reason == "length"
    identity = b.identity()
    assert identity["prefill_mode"] == "completions" and len(identity["chat_template"]) == 16


def test_completions_template_from_files(server: MockOpenAI, sleeps: list[float], tmp_path: Path) -> None:
    (tmp_path / "chat.jinja").write_text(CHATML)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    prompts = []
    for source in ("chat.jinja", "tokenizer_config.json"):
        b = backend(server, sleeps, prefill_mode="completions", chat_template=str(tmp_path / source))
        prompts.append(b.render([Message("user", "Q")], "P"))
    assert prompts == ["<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nP"] * 2
    with pytest.raises(ConfigError, match="chat template file not found"):
        backend(server, sleeps, prefill_mode="completions", chat_template=str(tmp_path / "nope.jinja"))
    with pytest.raises(ConfigError, match="needs chat_template"):
        backend(server, sleeps, prefill_mode="completions")
    with pytest.raises(ConfigError, match="does not compile"):
        backend(server, sleeps, prefill_mode="completions", chat_template="{% for %}")


def test_template_errors_land_in_their_slot(server: MockOpenAI, sleeps: list[float]) -> None:
    strict = (
        "{% if messages[0]['role'] != 'user' %}"
        "{{ raise_exception('roles must start with user') }}{% endif %}"
    )
    b = backend(server, sleeps, prefill_mode="completions", chat_template=strict + CHATML)
    bad, good = b.generate([
        GenRequest(messages=(Message("assistant", "x"),)), GenRequest.user("fine", prefill="P")
    ])
    assert isinstance(bad, PermanentError) and "roles must start with user" in str(bad)
    assert isinstance(good, Generation) and len(server.received) == 1


def test_llm_client_caches_over_http(server: MockOpenAI, sleeps: list[float], cache: Cache) -> None:
    requests = [GenRequest.user(f"q{i}") for i in range(6)] + [GenRequest.user("q0")]
    first = LLMClient(backend(server, sleeps), cache).generate(requests)
    assert len(server.received) == 6  # the duplicate is sent once
    second_client = LLMClient(backend(server, sleeps), cache)
    assert second_client.generate(requests) == first
    assert len(server.received) == 6 and second_client.stats.model_calls == 0


def test_registry_and_base_url_from_the_environment(server: MockOpenAI,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/")
    model = track(load_model("openai/llama-3", max_concurrency=2))
    assert isinstance(model, OpenAIBackend) and model.spec == "openai/llama-3"
    assert model.identity()["base_url"] == server.url and model.capabilities.max_concurrency == 2
    [out] = model.generate([GenRequest.user("hi")])
    assert isinstance(out, Generation) and server.received[0].body["model"] == "llama-3"
    assert track(OpenAIBackend("x")).base_url == server.url
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert track(OpenAIBackend("x")).base_url == "https://api.openai.com/v1"
    with pytest.raises(ConfigError, match="bad options"):
        load_model("openai/m", no_such_option=1)
    for bad in ({"prefill_mode": "magic"}, {"base_url": "localhost:8000"}, {"max_concurrency": 0}):
        with pytest.raises(ConfigError):
            OpenAIBackend("m", **bad)


def test_embeddings_are_batched_and_in_input_order(server: MockOpenAI, sleeps: list[float],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    embedder = track(OpenAIEmbedder("emb", base_url=server.url, batch_size=2, sleep=sleeps.append))
    texts = ["alpha", "beta", "", "delta", "epsilon"]
    out = embedder.embed(texts)
    assert out.dtype == np.float32 and out.shape == (5, 8)
    expected = [vector(t if t else " ") for t in texts]
    np.testing.assert_allclose(out, np.asarray(expected, dtype=np.float32))
    assert [r.body["input"] for r in server.received] == [["alpha", "beta"], [" ", "delta"], ["epsilon"]]
    assert server.received[0].path == "/v1/embeddings"
    assert embedder.identity() == {"base_url": server.url} and KEY not in repr(embedder)
    assert embedder.embed([]).shape == (0, 0)


def test_embedders_can_live_on_another_server_than_the_models() -> None:
    from veracity.cli.options import make_context

    ctx = make_context(no_cache=True, quiet=True, base_url="http://models:8000/v1",
                       api_key_env="MODEL_KEY", embedder_base_url="http://embed:9000/v1")
    assert ctx.model_options["openai"]["base_url"] == "http://models:8000/v1"
    # another server gets no key at all (not MODEL_KEY, not $OPENAI_API_KEY) unless named
    assert ctx.embedder_options == {"openai": {"base_url": "http://embed:9000/v1", "api_key_env": ""}}
    keyed = make_context(no_cache=True, quiet=True, api_key_env="MODEL_KEY",
                         embedder_base_url="http://embed:9000/v1", embedder_api_key_env="EMB")
    assert keyed.embedder_options["openai"]["api_key_env"] == "EMB"
    same = make_context(no_cache=True, quiet=True, base_url="http://one:8000/v1",
                        api_key_env="ONE_KEY")
    assert same.embedder_options == {"openai": {"base_url": "http://one:8000/v1",
                                                "api_key_env": "ONE_KEY"}}


def test_embeddings_retry_and_reject_bad_answers(server: MockOpenAI, sleeps: list[float]) -> None:
    embedder = track(load_embedder("openai/emb", base_url=server.url, sleep=sleeps.append))
    assert isinstance(embedder, OpenAIEmbedder)
    server.script(Reply(429, {"error": "slow down"}, {"Retry-After": "1"}))
    assert embedder.embed(["a", "b"]).shape == (2, 8) and sleeps == [1.0]
    server.script(Reply(200, {"data": [{"index": 0, "embedding": [1.0, 2.0]}]}))
    with pytest.raises(PermanentError, match="expected 2 embeddings"):
        embedder.embed(["a", "b"])
    server.script(Reply(400, {"error": {"message": "input too long"}}))
    with pytest.raises(PermanentError, match="openai/emb: HTTP 400 .*input too long"):
        embedder.embed(["a"])


def test_retry_after_ms_and_http_dates_through_a_mock_transport(sleeps: list[float]) -> None:
    answers = iter([
        httpx.Response(429, headers={"retry-after-ms": "250"}, json={"error": "x"}),
        httpx.Response(503, headers={"retry-after": "Thu, 01 Jan 1970 00:00:00 GMT"}, json={}),
        httpx.Response(200, json={"choices": [{"message": {"content": "ok"}, "finish_reason": None}]}),
    ])
    transport = httpx.MockTransport(lambda request: next(answers))
    b = track(OpenAIBackend("m", base_url="http://mock/v1", transport=transport, sleep=sleeps.append))
    out = one(b, GenRequest.user("hi"))
    assert out == Generation("ok", "stop")
    assert sleeps == [0.25, 0.0]
