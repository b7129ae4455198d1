"""The gateway end to end: real uvicorn on 127.0.0.1 in front of a mock upstream, driven by the
official openai client."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner

import veracity
from gateway_server import RunningApp
from mock_upstream import STABLE, MockUpstream, Reply, only, perturbed_from
from veracity.cli import main
from veracity.errors import ConfigError
from veracity.serve import GatewaySettings, create_app
from veracity.serve.scoring import apply_edit
from veracity.traffic import read_traffic

UPSTREAM_KEY = "sk-upstream-CANARY-7f3a9c"
GATEWAY_KEY = "gw-key-CANARY-51b2"
PROMPT = "What is the capital of France?"


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; its last value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


class Gateway:
    """A started mock upstream + gateway, and clients for both."""

    def __init__(self, mock: MockUpstream, running: RunningApp, settings: GatewaySettings) -> None:
        self.mock = mock
        self.running = running
        self.settings = settings
        self.url = running.url
        self.app = running.app

    def client(self, key: str = GATEWAY_KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=20)

    def get(self, path: str, key: str | None = GATEWAY_KEY) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.get(self.url + path, headers=headers, timeout=20)


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Gateway]]:
    monkeypatch.setenv("MOCK_UPSTREAM_KEY", UPSTREAM_KEY)
    with ExitStack() as stack:

        def start(mock: MockUpstream | None = None, **overrides: Any) -> Gateway:
            upstream = stack.enter_context(mock or MockUpstream())
            options: dict[str, Any] = {
                "upstream": upstream.url, "upstream_api_key_env": "MOCK_UPSTREAM_KEY",
                "embedder": "hash/default", "n": 3, "api_keys": (GATEWAY_KEY, "other-key"),
                "log": tmp_path / "traffic.sqlite", "cache": tmp_path / "cache.sqlite",
                "timeout": 5.0, "shutdown_grace": 5.0,
            } | overrides
            settings = GatewaySettings(**options)
            running = stack.enter_context(RunningApp(create_app(settings)))
            return Gateway(upstream, running, settings)

        yield start


def test_non_streaming_answer_carries_its_score(gateway: Callable[..., Gateway]) -> None:
    gw = gateway()
    raw = gw.client().chat.completions.with_raw_response.create(
        model="mock-model", temperature=0.7, max_tokens=40,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}])
    completion = raw.parse()
    assert completion.choices[0].message.content == STABLE
    score = (completion.model_extra or {})["veracity"]
    # every perturbed prompt got the same answer: gamma is exactly 0
    assert score["gamma"] == 0.0 and score["verdict"] == "trustworthy" and score["error"] is None
    assert raw.headers["x-veracity-gamma"] == "0.000000"
    assert raw.headers["x-veracity-verdict"] == "trustworthy"
    assert score["n"] == 3 and len(score["perturbed_answers"]) == 3
    assert score["sampling"]["answer"] == {"temperature": 0.7, "max_tokens": 40}
    assert score["sampling"]["perturbed"] == {"temperature": 0.0, "seed": 0, "max_tokens": 40}
    assert score["thresholds"]["source"] == "authors' 0.1 / 0.2 buckets"
    assert set(score["timings"]) == {"upstream_ms", "generation_ms", "embedding_ms", "scoring_ms", "total_ms"}
    assert score["p_correct"] is None and raw.headers["x-veracity-p-correct"] == "none"
    # the upstream saw the original request and 3 perturbed ones at temperature 0 with the
    # context, all sent at once: in any order
    bodies = gw.mock.chat_bodies()
    [original] = [b for b in bodies if b["messages"][-1]["content"] == PROMPT]
    perturbed = [b for b in bodies if b is not original]
    assert original["temperature"] == 0.7
    assert len(perturbed) == 3
    sent = [apply_edit(PROMPT, change) for change in score["perturbed_edits"]]
    assert sorted(b["messages"][-1]["content"] for b in perturbed) == sorted(sent)
    assert all(change["at"] == len(PROMPT) and change["cut"] == 0 for change in score["perturbed_edits"])
    for body in perturbed:
        assert body["temperature"] == 0.0 and body["max_tokens"] == 40
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}
        prompt = body["messages"][1]["content"]
        assert len(body["messages"]) == 2 and prompt.startswith(PROMPT + " ") and prompt != PROMPT


def test_perturbed_calls_go_out_with_the_request_for_the_answer(
        gateway: Callable[..., Gateway]) -> None:
    # they depend on the request only: the added latency is one embedding, not a second
    # round trip (the mock holds every answer 1 s, so all four are in flight together)
    gw = gateway(mock=MockUpstream(delay=1.0))
    completion = gw.client().chat.completions.create(
        model="mock-model", messages=[{"role": "user", "content": PROMPT}])
    assert (completion.model_extra or {})["veracity"]["gamma"] == 0.0
    assert gw.mock.max_in_flight == 4


@pytest.mark.parametrize("answer", [
    Reply(status=500, match=only("Another question?")),  # the upstream refuses the answer
    Reply(body={"id": "x", "object": "chat.completion", "model": "mock-model", "choices": [
        {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c", "type": "function",
                         "function": {"name": "f", "arguments": "{}"}}]}}]},
          match=only("Another question?")),  # an answer with no text to score
], ids=["upstream-500", "tool-call"])
def test_perturbed_calls_of_an_answer_never_scored_are_cancelled(
        gateway: Callable[..., Gateway], answer: Reply) -> None:
    gw = gateway()
    messages: Any = [{"role": "user", "content": "Another question?"}]
    asked = perturbed_from("Another question?")
    slow = Reply(hang=30.0, match=asked)

    def all_perturbed_arrived(mock: MockUpstream) -> bool:
        return sum(asked(b["messages"][-1]["content"]) for b in mock.chat_bodies()) == 3

    # the answer fails only once the three perturbed calls are in flight, held 30 s
    gw.mock.script(replace(answer, until=all_perturbed_arrived), slow, slow, slow)
    try:
        gw.client().chat.completions.create(model="mock-model", messages=messages)
    except openai.InternalServerError:
        pass
    # the gateway hung up on all three: a gateway that let them run on would have them
    # answered and cached instead
    assert wait_until(lambda: len(gw.mock.abandoned) == 3, seconds=10), gw.mock.abandoned
    assert all(asked(prompt) for prompt in gw.mock.abandoned)
    # cancelled, not answered: nothing of them was cached, so asking again sends all three
    again = gw.client().chat.completions.create(model="mock-model", messages=messages)
    assert (again.model_extra or {})["veracity"]["model_calls"] == 3


def test_gamma_of_an_unstable_answer_is_the_projects_gamma(gateway: Callable[..., Gateway]) -> None:
    gw = gateway(thresholds=(0.01, 0.02))
    completion = gw.client().chat.completions.create(
        model="mock-model", messages=[{"role": "user", "content": "An unstable question?"}])
    score = (completion.model_extra or {})["veracity"]
    expected = veracity.score_gamma(completion.choices[0].message.content or "",
                                    score["perturbed_answers"], embedder="hash/default")
    assert expected is not None and expected > 0.02
    assert score["gamma"] == pytest.approx(expected)
    assert score["verdict"] == "untrustworthy"
    assert score["thresholds"] == {"low": 0.01, "high": 0.02, "source": "--thresholds"}
    # a repeat is served from the cache: no new perturbed call reaches the upstream
    before = len(gw.mock.chat_bodies())
    again = gw.client().chat.completions.create(
        model="mock-model", messages=[{"role": "user", "content": "An unstable question?"}])
    assert len(gw.mock.chat_bodies()) == before + 1
    assert (again.model_extra or {})["veracity"]["model_calls"] == 0


def test_streamed_chunks_arrive_before_the_score(gateway: Callable[..., Gateway]) -> None:
    release = threading.Event()
    gw = gateway()
    gw.mock.script(Reply(release=release, match=only(PROMPT)))
    stream = gw.client().chat.completions.create(
        model="mock-model", stream=True, messages=[{"role": "user", "content": PROMPT}])
    chunks = iter(stream)
    text = []
    # the upstream holds back its last word until we have read the first ones: a gateway that
    # buffered the stream would never let us get here
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        if len(text) == 2:
            break
    release.set()
    scores: list[Any] = []
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            assert not scores, "content after the score"
            text.append(chunk.choices[0].delta.content)
        if (chunk.model_extra or {}).get("veracity"):
            scores.append(chunk.model_extra["veracity"])  # type: ignore[index]
    assert "".join(text) == STABLE
    assert len(scores) == 1 and scores[0]["gamma"] == 0.0 and scores[0]["verdict"] == "trustworthy"


def test_stream_is_framed_as_the_upstream_frames_it(gateway: Callable[..., Gateway]) -> None:
    gw = gateway()
    body = {"model": "mock-model", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}"}
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=headers,
                      timeout=20) as response:
        raw = b"".join(response.iter_bytes())
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    final = json.loads(events[-3].removeprefix(b"data: "))
    assert final["choices"] == [] and final["veracity"]["gamma"] == 0.0
    assert response.headers["x-veracity-id"] == final["veracity"]["id"]


def test_async_mode_returns_at_once_and_the_score_can_be_fetched(gateway: Callable[..., Gateway]) -> None:
    gw = gateway(mode="async")
    raw = gw.client().chat.completions.with_raw_response.create(
        model="mock-model", messages=[{"role": "user", "content": PROMPT}])
    pending = (raw.parse().model_extra or {})["veracity"]
    assert pending["status"] in ("pending", "skipped") and raw.headers["x-veracity-id"] == pending["id"]
    for _ in range(200):
        fetched = gw.get(pending["url"]).json()
        if fetched["status"] == "done":
            break
        time.sleep(0.05)
    assert fetched["status"] == "done" and fetched["veracity"]["gamma"] == 0.0
    assert gw.get(pending["url"], key="other-key").status_code == 404  # another client's score
    assert gw.get(pending["url"], key=None).status_code == 401
    assert gw.get("/v1/veracity/scores/vrc-unknown").status_code == 404


def test_auth_missing_wrong_and_right_key(gateway: Callable[..., Gateway]) -> None:
    gw = gateway()
    messages: Any = [{"role": "user", "content": PROMPT}]
    with pytest.raises(openai.AuthenticationError):
        gw.client(key="wrong").chat.completions.create(model="mock-model", messages=messages)
    missing = httpx.post(gw.url + "/v1/chat/completions", timeout=20,
                         json={"model": "mock-model", "messages": messages})
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    assert gw.get("/v1/models", key=None).status_code == 401
    assert gw.mock.chat_bodies() == []  # refused requests never reach the upstream
    assert gw.client().chat.completions.create(model="mock-model", messages=messages).choices
    assert [m.id for m in gw.client(key="other-key").models.list()] == ["mock-model"]
    assert gw.get("/healthz", key=None).status_code == 200
    assert gw.get("/readyz", key=None).json() == {"status": "ready"}


def test_429_with_retry_after_when_saturated(gateway: Callable[..., Gateway]) -> None:
    gw = gateway(max_concurrency=1, queue=0)
    gw.mock.script(Reply(hang=1.5, match=only(PROMPT)))
    messages: Any = [{"role": "user", "content": PROMPT}]
    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(
        gw.client().chat.completions.create(model="mock-model", messages=messages)))
    worker.start()
    for _ in range(200):
        if gw.mock.chat_bodies():
            break
        time.sleep(0.01)
    with pytest.raises(openai.RateLimitError) as refused:
        gw.client().chat.completions.create(model="mock-model", messages=messages)
    assert refused.value.response.headers["retry-after"] == "1"
    worker.join(20)
    assert first and first[0].choices[0].message.content == STABLE  # the first one was not harmed


def test_upstream_500_timeout_and_dropped_connection(gateway: Callable[..., Gateway]) -> None:
    gw = gateway(timeout=2.0)  # room for a loaded machine to answer the 500 in time
    gw.mock.script(Reply(status=500, body={"error": {"message": "model crashed", "type": "server_error"}},
                         match=only(PROMPT)),
                   Reply(hang=6.0, match=only(PROMPT)), Reply(drop=True, match=only(PROMPT)))
    client = gw.client()
    messages: Any = [{"role": "user", "content": PROMPT}]
    with pytest.raises(openai.InternalServerError) as crashed:
        client.chat.completions.create(model="mock-model", messages=messages)
    assert crashed.value.status_code == 500 and "model crashed" in crashed.value.message
    with pytest.raises(openai.APIStatusError) as slow:
        client.chat.completions.create(model="mock-model", messages=messages)
    assert slow.value.status_code == 504 and "no answer within 2 s" in slow.value.message
    with pytest.raises(openai.APIStatusError) as dropped:
        client.chat.completions.create(model="mock-model", messages=messages)
    assert dropped.value.status_code == 502
    metrics = gw.get("/metrics").text
    for kind in ("http_500", "timeout", "connection"):
        assert f'veracity_gateway_upstream_errors_total{{kind="{kind}"}} 1.0' in metrics


def test_a_stream_dropped_midway_is_an_error_and_is_not_scored(gateway: Callable[..., Gateway]) -> None:
    gw = gateway()
    gw.mock.script(Reply(drop_after=3, match=only(PROMPT)))
    stream = gw.client().chat.completions.create(
        model="mock-model", stream=True, messages=[{"role": "user", "content": PROMPT}])
    with pytest.raises(openai.APIError, match="mid-stream"):
        for _ in stream:
            pass
    assert "veracity_gateway_verdicts_total{" not in gw.get("/metrics").text  # a partial answer


def test_a_scoring_failure_never_loses_the_answer(gateway: Callable[..., Gateway]) -> None:
    gw = gateway()
    rejected = Reply(status=400, body={"error": {"message": "bad perturbed request"}},
                     match=perturbed_from(PROMPT))
    gw.mock.script(rejected, rejected, rejected)
    raw = gw.client().chat.completions.with_raw_response.create(
        model="mock-model", messages=[{"role": "user", "content": PROMPT}])
    completion = raw.parse()
    assert completion.choices[0].message.content == STABLE
    score = (completion.model_extra or {})["veracity"]
    assert score["gamma"] is None and score["verdict"] == "unscored"
    assert "bad perturbed request" in score["error"]
    assert raw.headers["x-veracity-gamma"] == "none"


def test_traffic_log_metrics_and_report(gateway: Callable[..., Gateway], tmp_path: Path) -> None:
    gw = gateway()
    client = gw.client()
    for prompt in (PROMPT, "An unstable <b>question</b>?"):
        client.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": prompt}])
    metrics = gw.get("/metrics", key=None).text
    assert 'veracity_gateway_requests_total{route="/v1/chat/completions",status="200"} 2.0' in metrics
    assert 'veracity_gateway_gamma_count{model="mock-model"} 2.0' in metrics
    assert 'veracity_gateway_verdicts_total{model="mock-model",verdict="trustworthy"} 1.0' in metrics
    assert 'veracity_gateway_upstream_seconds_count{model="mock-model"} 2.0' in metrics
    assert 'veracity_gateway_queue_depth{queue="requests"}' in metrics
    gw.running.__exit__()  # shutdown flushes the log
    entries = read_traffic(tmp_path / "traffic.sqlite")
    assert [e.prompt for e in entries] == [PROMPT, "An unstable <b>question</b>?"]
    assert entries[0].answer == STABLE and entries[0].gamma == 0.0 and entries[0].verdict == "trustworthy"
    assert entries[1].gamma is not None and entries[1].gamma > 0
    assert entries[0].upstream_ms is not None and entries[0].scoring_ms is not None
    assert entries[0].score["perturbed_answers"] == [STABLE] * 3
    out = tmp_path / "traffic.html"
    result = CliRunner().invoke(main, ["report", "--traffic", str(tmp_path / "traffic.sqlite"),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "&lt;b&gt;question&lt;/b&gt;" in html and "<b>question" not in html
    assert "Least trustworthy answers" in html and "data:image/png;base64," in html


def test_the_keys_appear_nowhere(gateway: Callable[..., Gateway], tmp_path: Path,
                                 caplog: pytest.LogCaptureFixture) -> None:
    gw = gateway()
    # an upstream that echoes the key it was sent in its error message
    gw.mock.script(Reply(status=503, body={"error": {"message": f"bad key {UPSTREAM_KEY}"}},
                         match=only(PROMPT)))
    client = gw.client()
    seen = []
    with pytest.raises(openai.APIStatusError) as echoed:
        client.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": PROMPT}])
    seen.append(echoed.value.response.text + str(echoed.value.response.headers))
    raw = client.chat.completions.with_raw_response.create(
        model="mock-model", messages=[{"role": "user", "content": PROMPT}])
    seen.append(raw.http_response.text + str(raw.headers))
    seen.append(gw.get("/metrics").text)
    seen.append(gw.get("/v1/models").text)
    gw.running.__exit__()
    # the upstream got its own key, never the client's
    auth = {r.headers.get("authorization") for r in gw.mock.received}
    assert auth == {f"Bearer {UPSTREAM_KEY}"}
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()]
    for text in [*seen, caplog.text]:
        assert UPSTREAM_KEY not in text and GATEWAY_KEY not in text
    for data in files:
        assert UPSTREAM_KEY.encode() not in data and GATEWAY_KEY.encode() not in data
    assert "[redacted]" in seen[0]


def test_settings_refuse_open_access_off_loopback_and_missing_keys() -> None:
    with pytest.raises(ConfigError, match="loopback"):
        GatewaySettings(no_auth=True, host="0.0.0.0")
    with pytest.raises(ConfigError, match="VERACITY_API_KEYS"):
        GatewaySettings()
    assert GatewaySettings(no_auth=True, host="::1").no_auth
    assert "gw" not in repr(GatewaySettings(api_keys=("gw",)))


def test_event_reader_keeps_the_upstreams_framing_and_reads_the_answer() -> None:
    from veracity.serve.sse import EventReader, event

    reader = EventReader()
    first = b'data: {"choices": [{"index": 0, "delta": {"content": "Pa"}}]}\r\n\r\ndata: {"cho'
    events = reader.feed(first)
    assert events == [b'data: {"choices": [{"index": 0, "delta": {"content": "Pa"}}]}\r\n\r\n']
    events = reader.feed(b'ices": [{"index": 0, "delta": {"content": "ris"}, "finish_reason": "stop"}]}'
                         b"\r\n\r\ndata: [DONE]\r\n\r\n")
    assert len(events) == 2 and reader.is_done(events[1]) and not reader.is_done(events[0])
    assert reader.answer == "Paris" and reader.finished and reader.done
    assert event({"a": 1}, reader.separator) == b'data: {"a": 1}\r\n\r\n'


def test_key_check_names_the_key_by_position_only() -> None:
    from veracity.serve.auth import KeyCheck

    check = KeyCheck(["alpha", "beta"])
    assert check.owner("Bearer beta") == 1 and check.owner("bearer alpha") == 0
    assert check.owner("Bearer gamma") is None and check.owner(None) is None
    assert check.owner("Basic alpha") is None and check.owner("Bearer ") is None
    assert KeyCheck([], open_access=True).owner(None) == -1


def test_an_in_process_model_answers_streams_and_scores_in_one_backend_call(tmp_path: Path) -> None:
    settings = GatewaySettings(model="fake/stable", embedder="hash/default", no_auth=True, n=3,
                               log=tmp_path / "t.sqlite", no_cache=True)
    app = create_app(settings)
    with RunningApp(app) as running:
        fake = app.state.gateway.upstream.backend.backend
        batches: list[int] = []
        generate = fake.generate

        def counted(requests: Any) -> Any:
            batches.append(len(requests))
            return generate(requests)

        fake.generate = counted
        client = openai.OpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0, timeout=20)
        assert [m.id for m in client.models.list()] == ["fake/stable"]
        messages: Any = [{"role": "user", "content": PROMPT}]
        reply = client.chat.completions.create(model="fake/stable", messages=messages)
        assert batches == [1, 3]  # the answer, then the three perturbed prompts in one call
        score = (reply.model_extra or {})["veracity"]
        assert score["gamma"] == 0.0 and score["perturbed_answers"] == [reply.choices[0].message.content] * 3
        chunks = list(client.chat.completions.create(model="fake/stable", messages=messages, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == reply.choices[0].message.content
        assert (chunks[-1].model_extra or {})["veracity"]["gamma"] == 0.0
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="gpt-4o", messages=messages)


def test_an_empty_perturbed_reply_fails_the_score_and_is_never_cached(
        gateway: Callable[..., Gateway]) -> None:
    gw = gateway()
    empty = Reply(body={"id": "x", "object": "chat.completion", "model": "mock-model",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "  "}}]},
                  match=perturbed_from(PROMPT))
    gw.mock.script(empty)  # one of the three perturbed calls
    messages: Any = [{"role": "user", "content": PROMPT}]
    first = (gw.client().chat.completions.create(model="mock-model", messages=messages)
             .model_extra or {})["veracity"]
    assert first["gamma"] is None and "1 of 3 perturbed calls failed" in first["error"]
    assert "no text" in first["error"]
    # the two real answers were cached, the empty one was not: it alone is asked again
    before = len(gw.mock.chat_bodies())
    again = (gw.client().chat.completions.create(model="mock-model", messages=messages)
             .model_extra or {})["veracity"]
    assert len(gw.mock.chat_bodies()) == before + 2  # the answer and the one missing call
    assert again["model_calls"] == 1 and again["gamma"] == 0.0 and again["error"] is None


class SlowEmbedder:
    """hash/default that takes 0.3 s per call and records its batch sizes."""

    def __init__(self) -> None:
        from veracity.registry import load_embedder

        self.inner = load_embedder("hash/default")
        self.spec = self.inner.spec
        self.batches: list[int] = []

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    def embed(self, texts: Any) -> Any:
        self.batches.append(len(texts))
        time.sleep(0.3)
        return self.inner.embed(texts)


def test_concurrent_scores_share_embedding_batches(tmp_path: Path) -> None:
    embedder = SlowEmbedder()
    with MockUpstream() as mock:
        settings = GatewaySettings(upstream=mock.url, upstream_api_key_env="", n=3, no_auth=True,
                                   log=None, no_cache=True, embedder="hash/default")
        with RunningApp(create_app(settings, embedder=embedder)) as running:

            def ask(k: int) -> None:
                body = {"model": "mock-model",
                        "messages": [{"role": "user", "content": f"An unstable question {k}?"}]}
                response = httpx.post(running.url + "/v1/chat/completions", json=body, timeout=30)
                assert response.json()["veracity"]["error"] is None

            threads = [threading.Thread(target=ask, args=(k,)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    # 8 scores, each with its answer and 3 perturbed answers to embed: fewer calls than
    # scores, because the scores that arrived while one batch ran went in the next one together
    assert sum(embedder.batches) <= 8 * 4 and len(embedder.batches) < 8
    assert max(embedder.batches) > 4


def test_bodies_that_are_not_json_are_refused_before_the_upstream(
        gateway: Callable[..., Gateway]) -> None:
    gw = gateway()
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}
    for raw in (b'{"model": "mock-model", "temperature": NaN, "messages": [1]}', b"{", b"\xff\xfe",
                b'{"model": "mock-model", "temperature": 1e999, "messages": [1]}'):
        reply = httpx.post(gw.url + "/v1/chat/completions", content=raw, headers=headers, timeout=20)
        assert reply.status_code == 400, raw
        assert "the request body: invalid JSON" in reply.json()["error"]["message"]
    assert gw.mock.chat_bodies() == []


def test_a_blank_prompt_is_answered_but_not_scored(gateway: Callable[..., Gateway]) -> None:
    gw = gateway()
    reply = gw.client().chat.completions.create(model="mock-model",
                                                messages=[{"role": "user", "content": "   "}])
    score = (reply.model_extra or {})["veracity"]
    assert reply.choices[0].message.content == STABLE
    assert score["gamma"] is None and "empty prompt" in score["error"]
    assert len(gw.mock.chat_bodies()) == 1  # no perturbed call for it


def test_a_stream_left_before_its_first_chunk_still_closes_once() -> None:
    import anyio

    from veracity.serve.app import ClosingStream

    closed: list[bool] = []

    async def chunks() -> Any:
        yield b"data: 1\n\n"

    async def close() -> None:
        closed.append(True)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}  # the client is already gone

    async def send(message: dict[str, Any]) -> None:
        raise OSError("client gone")

    async def main() -> None:
        response = ClosingStream(chunks(), close, media_type="text/event-stream")
        try:
            await response({"type": "http", "asgi": {"spec_version": "2.3"}}, receive, send)
        except OSError:
            pass

    anyio.run(main)
    assert closed == [True]  # the generator's own finally may never have run
