"""Issue 26: the gateway under hostile traffic, each defect driven through a real uvicorn on
127.0.0.1 with real sockets: cross-site content types, lone surrogates, oversized and half-sent
bodies, a stream cut short, clients that hang up or dawdle, credentials in the upstream's URL,
async scores across a restart, and SIGTERM."""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway_server import RunningApp
from mock_upstream import STABLE, MockUpstream, Reply, only
from veracity.serve import GatewaySettings, create_app
from veracity.traffic import read_traffic

KEY = "gw-key-hostile-1"
OTHER = "gw-key-hostile-2"
PROMPT = "What is the capital of France?"
JSON = {"Content-Type": "application/json"}


class Gw:
    """A running gateway (in front of a mock upstream) and ways to talk to it."""

    def __init__(self, mock: MockUpstream, running: RunningApp, settings: GatewaySettings) -> None:
        self.mock, self.running, self.settings = mock, running, settings
        self.url = running.url
        self.port = running.port

    def headers(self, key: str | None = KEY, **extra: str) -> dict[str, str]:
        auth = {"Authorization": f"Bearer {key}"} if key and not self.settings.no_auth else {}
        return {**JSON, **auth, **extra}

    def chat(self, body: dict[str, Any] | None = None, key: str | None = KEY,
             **headers: str) -> httpx.Response:
        body = body or {"model": "mock-model", "messages": [{"role": "user", "content": PROMPT}]}
        return httpx.post(self.url + "/v1/chat/completions", json=body, timeout=20,
                          headers=self.headers(key, **headers))

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=20).text


def wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; its last value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def open_connections(gw: Gw) -> int:
    """Client connections the gateway's server holds open right now."""
    return len(gw.running.server.server_state.connections)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Callable[..., Gw]]:
    with ExitStack() as stack:

        def start(mock: MockUpstream | None = None, credentials: str = "", **overrides: Any) -> Gw:
            upstream = stack.enter_context(mock or MockUpstream())
            options: dict[str, Any] = {
                "upstream": upstream.url.replace("http://", f"http://{credentials}"),
                "upstream_api_key_env": "", "embedder": "hash/default",
                "n": 3, "api_keys": (KEY, OTHER), "log": tmp_path / "traffic.sqlite",
                "cache": tmp_path / "cache.sqlite", "timeout": 5.0, "shutdown_grace": 5.0,
            } | overrides
            settings = GatewaySettings(**options)
            running = stack.enter_context(RunningApp(create_app(settings)))
            return Gw(upstream, running, settings)

        yield start


@pytest.fixture
def server_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Everything logged, uvicorn's own loggers included (they do not propagate to the root)."""
    caplog.set_level(logging.INFO)
    uvicorn_log = logging.getLogger("uvicorn")
    uvicorn_log.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        uvicorn_log.removeHandler(caplog.handler)


def connect(gw: Gw) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    return sock


def head(gw: Gw, length: int | None, chunked: bool = False) -> bytes:
    """A chat POST's request line and headers."""
    lines = ["POST /v1/chat/completions HTTP/1.1", f"Host: 127.0.0.1:{gw.port}",
             f"Authorization: Bearer {KEY}", "Content-Type: application/json"]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def response(sock: socket.socket, timeout: float = 10) -> tuple[int, bytes]:
    """(status, everything the server sent until it closed the connection)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data


def closed_within(sock: socket.socket, seconds: float) -> tuple[int, bytes, float]:
    began = time.monotonic()
    status, data = response(sock, seconds + 5)
    return status, data, time.monotonic() - began


# --- 1: content types and CORS ----------------------------------------------------------------


@pytest.mark.parametrize("no_auth", [True, False], ids=["no-auth", "keyed"])
def test_only_json_content_types_are_served_and_no_cors_by_default(
        gateway: Callable[..., Gw], no_auth: bool) -> None:
    gw = gateway(no_auth=no_auth, api_keys=() if no_auth else (KEY, OTHER))
    body = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": PROMPT}]})
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                 None, "application/json; charset=latin-1"):
        headers = gw.headers(Origin="http://evil.example")
        headers.pop("Content-Type")
        if kind is not None:
            headers["Content-Type"] = kind
        reply = httpx.post(gw.url + "/v1/chat/completions", content=body, headers=headers, timeout=20)
        assert reply.status_code == 415, (kind, reply.text)
        assert reply.json()["error"]["code"] == "unsupported_media_type"
        assert not any(h.startswith("access-control-") for h in reply.headers)
    assert gw.mock.chat_bodies() == []  # refused before any upstream call
    fine = gw.chat(**{"Content-Type": "application/json; charset=UTF-8", "Origin": "http://evil.example"})
    assert fine.status_code == 200 and fine.json()["veracity"]["gamma"] == 0.0
    assert "access-control-allow-origin" not in fine.headers
    preflight = httpx.options(gw.url + "/v1/chat/completions", timeout=20, headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers


def test_cors_origin_names_the_pages_that_may_call(gateway: Callable[..., Gw]) -> None:
    gw = gateway(cors_origins=("https://app.example",))
    asked = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}
    ok = httpx.options(gw.url + "/v1/chat/completions", timeout=20,
                       headers={"Origin": "https://app.example", **asked})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://app.example"
    evil = httpx.options(gw.url + "/v1/chat/completions", timeout=20,
                         headers={"Origin": "http://evil.example", **asked})
    assert evil.status_code == 400 and "access-control-allow-origin" not in evil.headers
    reply = gw.chat(Origin="https://app.example")
    assert reply.headers["access-control-allow-origin"] == "https://app.example"
    assert "x-veracity-gamma" in reply.headers["access-control-expose-headers"]


# --- 2: a lone surrogate ----------------------------------------------------------------------


def test_a_lone_surrogate_is_a_400_naming_the_field(gateway: Callable[..., Gw],
                                                    server_log: pytest.LogCaptureFixture) -> None:
    gw = gateway()
    caplog = server_log
    raw = b'{"model":"m","messages":[{"role":"user","content":"a \\ud800 b"}]}'
    reply = httpx.post(gw.url + "/v1/chat/completions", content=raw, headers=gw.headers(), timeout=20)
    assert reply.status_code == 400, reply.text
    message = reply.json()["error"]["message"]
    assert "messages[0].content" in message and "surrogate" in message
    assert gw.mock.chat_bodies() == []
    assert "Traceback" not in caplog.text and "UnicodeEncodeError" not in caplog.text


# --- 3: size limits -----------------------------------------------------------------------------


def test_an_oversized_body_is_a_413_while_it_is_still_arriving(gateway: Callable[..., Gw]) -> None:
    gw = gateway(max_body=64 * 1024)
    # a declared 64 MiB: refused on its headers, before any of it is read
    sock = connect(gw)
    sock.sendall(head(gw, 64 << 20) + b'{"model": "mock-model", "messages": [')
    status, data = response(sock)
    assert status == 413 and b"request_too_large" in data and b"connection: close" in data.lower()
    sock.close()
    # chunked, so no length is declared: refused at the first chunk past the limit, while the
    # client still has most of its body to send
    sock = connect(gw)
    sock.sendall(head(gw, None, chunked=True))
    piece = b"x" * 16384
    sent = 0
    status = 0
    for _ in range(64):  # 1 MiB, if the server let it all in
        try:
            sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            status = response(sock, 1)[0]
            break
        sent += len(piece)
        sock.settimeout(0.05)
        try:
            first = sock.recv(65536)
        except TimeoutError:
            continue
        status = int(first.split(b" ", 2)[1])
        break
    assert status == 413 and sent < 256 * 1024, (status, sent)
    sock.close()
    assert gw.mock.chat_bodies() == []
    assert 'veracity_gateway_client_errors_total{kind="too_large"} 2.0' in gw.metrics()
    assert gw.chat().status_code == 200  # and the gateway serves on


def test_a_long_prompt_is_not_copied_into_the_score_or_the_log(gateway: Callable[..., Gw],
                                                             tmp_path: Path) -> None:
    gw = gateway()
    prompt = "Why? " + "x" * 400_000
    reply = gw.chat({"model": "mock-model", "messages": [{"role": "user", "content": prompt}]})
    assert reply.status_code == 200
    score = reply.json()["veracity"]
    assert score["gamma"] == 0.0 and "perturbed_prompts" not in score
    assert [e["at"] for e in score["perturbed_edits"]] == [len(prompt)] * 3
    assert len(json.dumps(score)) < 4000 and len(reply.content) < 8000  # not 4 copies of the prompt
    gw.running.__exit__()
    from veracity.traffic import LOGGED_CHARS

    [row] = read_traffic(tmp_path / "traffic.sqlite")
    assert len(row.prompt) < LOGGED_CHARS + 100 and row.prompt.startswith("Why? xxx")
    assert (tmp_path / "traffic.sqlite").stat().st_size < 200_000


# --- 4: a stream that ends early ----------------------------------------------------------------


def test_a_stream_that_ends_early_is_returned_unscored(gateway: Callable[..., Gw]) -> None:
    gw = gateway()
    gw.mock.script(Reply(end_after=2, match=only(PROMPT)))  # the role chunk and one word, then the end
    body = {"model": "mock-model", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=gw.headers(),
                      timeout=20) as streamed:
        raw = b"".join(streamed.iter_bytes())
    events = [e for e in raw.split(b"\n\n") if e]
    assert b"data: [DONE]" not in events
    final = json.loads(events[-1].removeprefix(b"data: "))
    score = final["veracity"]
    assert score["gamma"] is None and score["verdict"] == "unscored"
    assert score["error_kind"] == "incomplete_stream"
    assert "ended before the answer was complete" in score["error"]
    metrics = gw.metrics()
    assert 'veracity_gateway_upstream_errors_total{kind="incomplete_stream"} 1.0' in metrics
    assert 'veracity_gateway_scoring_errors_total{kind="incomplete_stream",model="mock-model"} 1.0' in metrics
    # a complete stream is still scored
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=gw.headers(),
                      timeout=20) as streamed:
        whole = b"".join(streamed.iter_bytes())
    assert b'"gamma": 0.0' in whole and whole.endswith(b"data: [DONE]\n\n")


# --- 5: clients that hang up mid-body -------------------------------------------------------------


def test_a_client_gone_mid_body_is_counted_without_a_traceback(
        gateway: Callable[..., Gw], server_log: pytest.LogCaptureFixture) -> None:
    gw = gateway()
    caplog = server_log
    for _ in range(3):
        sock = connect(gw)
        sock.sendall(head(gw, 1000) + b'{"model": "mock-model", "messages"')
        time.sleep(0.1)
        sock.close()
    for _ in range(100):
        if 'kind="disconnect"} 3.0' in gw.metrics():
            break
        time.sleep(0.05)
    assert 'veracity_gateway_client_errors_total{kind="disconnect"} 3.0' in gw.metrics()
    records = [r for r in caplog.records if r.name.startswith(("veracity", "uvicorn"))]
    assert all(r.exc_info is None for r in records)
    assert "Traceback" not in caplog.text and "ClientDisconnect" not in caplog.text
    assert len([r for r in records if "left before" in r.getMessage()]) == 3  # one line each
    assert gw.mock.chat_bodies() == []


# --- 6: credentials in the upstream's URL ------------------------------------------------------


def test_credentials_in_the_upstream_url_are_its_auth_and_never_shown(
        gateway: Callable[..., Gw], monkeypatch: pytest.MonkeyPatch,
        server_log: pytest.LogCaptureFixture) -> None:
    caplog = server_log
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient-key-9")
    gw = gateway(credentials="user:pw-S3CRET@", upstream_api_key_env="OPENAI_API_KEY")
    mock = gw.mock
    plain = gw.chat()
    assert plain.status_code == 200 and plain.json()["veracity"]["gamma"] == 0.0
    body = {"model": "mock-model", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
    streamed = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=gw.headers(), timeout=20)
    assert streamed.status_code == 200 and b"[DONE]" in streamed.content
    basic = "Basic " + base64.b64encode(b"user:pw-S3CRET").decode()
    assert {r.headers.get("authorization") for r in mock.received} == {basic}  # the URL's won
    gw.mock.script(Reply(status=500, body={"error": {"message": "boom"}}, match=only(PROMPT)),
                   Reply(drop=True, match=only(PROMPT)))
    failed = gw.chat()
    dropped = gw.chat()
    models = httpx.get(gw.url + "/v1/models", headers=gw.headers(), timeout=20)
    assert failed.status_code == 500 and dropped.status_code == 502 and models.status_code == 200
    assert failed.json()["error"]["message"].startswith("the upstream answered HTTP 500")
    for text in (failed.text, dropped.text, plain.text, streamed.text, models.text, gw.metrics()):
        assert "S3CRET" not in text and f"127.0.0.1:{mock.port}" not in text  # what clients see
    assert "S3CRET" not in caplog.text and "sk-ambient-key-9" not in caplog.text  # the logs


# --- also expected: slow clients and a connection cap --------------------------------------------


def test_slow_headers_and_slow_bodies_are_closed_at_the_client_timeout(gateway: Callable[..., Gw]) -> None:
    gw = gateway(client_timeout=0.6)
    idle = connect(gw)  # sends nothing at all
    trickle = connect(gw)  # sends its headers byte by byte, never finishing
    for byte in head(gw, 10)[:20]:
        trickle.sendall(bytes([byte]))
        time.sleep(0.02)
    half = connect(gw)  # whole headers, then half of its body
    half.sendall(head(gw, 100) + b'{"model": ')
    assert gw.chat().status_code == 200  # meanwhile, the others are served
    for sock, expected in ((idle, 408), (trickle, 408), (half, 408)):
        status, data, took = closed_within(sock, 3)
        assert status == expected and took < 3, (status, data, took)
        sock.close()
    metrics = gw.metrics()
    assert 'veracity_gateway_client_errors_total{kind="header_timeout"} 2.0' in metrics
    assert 'veracity_gateway_client_errors_total{kind="body_timeout"} 1.0' in metrics


def test_connections_beyond_the_cap_are_refused(gateway: Callable[..., Gw]) -> None:
    gw = gateway(max_connections=3, client_timeout=10)
    held = [connect(gw) for _ in range(3)]
    assert wait_until(lambda: open_connections(gw) == 3)
    extra = connect(gw)
    status, data, _ = closed_within(extra, 3)
    assert status == 503 and b"too_many_connections" in data
    for sock in held:
        sock.close()
    assert wait_until(lambda: open_connections(gw) == 0)
    assert gw.chat().status_code == 200  # freed: served again
    assert 'veracity_gateway_client_errors_total{kind="connection_cap"} 1.0' in gw.metrics()


# --- also expected: what the upstream says ----------------------------------------------------


def test_an_upstream_429_keeps_its_retry_after(gateway: Callable[..., Gw]) -> None:
    gw = gateway()
    limited = Reply(status=429, body={"error": {"message": "slow down", "type": "rate_limit"}},
                    headers={"Retry-After": "17"}, match=only(PROMPT))
    gw.mock.script(limited, limited)
    reply = gw.chat()
    assert reply.status_code == 429 and reply.headers["retry-after"] == "17"
    body = {"model": "mock-model", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
    streamed = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=gw.headers(), timeout=20)
    assert streamed.status_code == 429 and streamed.headers["retry-after"] == "17"


@pytest.mark.parametrize(("reply", "status"), [
    ({"error": {"message": "model overloaded", "type": "server_error"}}, 502),
    ({"id": "x", "object": "chat.completion", "choices": []}, 200),
    ({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop"}]}, 200),
    ({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": None}}]}, 200),
], ids=["error-body", "no-choices", "no-message", "null-content"])
def test_a_200_without_an_answer(gateway: Callable[..., Gw], reply: dict[str, Any], status: int) -> None:
    gw = gateway()
    gw.mock.script(Reply(body=reply, match=only(PROMPT)))
    got = gw.chat()
    assert got.status_code == status, got.text
    if status == 502:
        error = got.json()["error"]
        assert error["message"] == "the upstream answered HTTP 200 with an error: model overloaded"
        assert error["type"] == "server_error"
        assert 'veracity_gateway_upstream_errors_total{kind="error_reply"} 1.0' in gw.metrics()
    else:
        score = got.json()["veracity"]
        assert score["gamma"] is None and score["error"] == "no text answer to score"


# --- also expected: async scores across a restart, and SIGTERM ---------------------------------


def fetch(url: str, score_id: str, key: str = KEY) -> httpx.Response:
    for _ in range(200):
        got = httpx.get(f"{url}/v1/veracity/scores/{score_id}", timeout=20,
                        headers={"Authorization": f"Bearer {key}"})
        if got.status_code != 200 or got.json()["status"] == "done":
            return got
        time.sleep(0.05)
    return got


def test_async_scores_survive_a_restart_for_their_owner_only(tmp_path: Path) -> None:
    with MockUpstream() as mock:
        settings = GatewaySettings(upstream=mock.url, upstream_api_key_env="", embedder="hash/default",
                                   n=3, api_keys=(KEY, OTHER), mode="async", no_cache=True,
                                   log=tmp_path / "traffic.sqlite", score_retention=60)
        with RunningApp(create_app(settings)) as running:
            reply = httpx.post(running.url + "/v1/chat/completions", headers={**JSON, "Authorization":
                               f"Bearer {KEY}"}, timeout=20, json={"model": "mock-model", "messages": [
                                   {"role": "user", "content": "An unstable question?"}]})
            score_id = reply.json()["veracity"]["id"]
            before = fetch(running.url, score_id).json()
        assert before["status"] == "done" and before["veracity"]["gamma"] > 0
        # the keys rotated: the same key now sits in another position
        rotated = replace(settings, api_keys=(OTHER, "new-key", KEY))
        with RunningApp(create_app(rotated)) as running:
            after = fetch(running.url, score_id)
            assert after.status_code == 200 and after.json() == before
            assert after.headers["x-veracity-id"] == score_id
            assert fetch(running.url, score_id, key=OTHER).status_code == 404
            assert fetch(running.url, score_id, key="new-key").status_code == 404
    data = (tmp_path / "traffic.sqlite").read_bytes()
    assert KEY.encode() not in data and OTHER.encode() not in data


def test_stored_scores_expire_after_the_retention(tmp_path: Path) -> None:
    with MockUpstream() as mock:
        settings = GatewaySettings(upstream=mock.url, upstream_api_key_env="", embedder="hash/default",
                                   n=3, api_keys=(KEY,), mode="async", log=tmp_path / "t.sqlite",
                                   no_cache=True, score_retention=1.0)
        with RunningApp(create_app(settings)) as running:
            reply = httpx.post(running.url + "/v1/chat/completions", headers={**JSON, "Authorization":
                               f"Bearer {KEY}"}, timeout=20, json={"model": "mock-model", "messages": [
                                   {"role": "user", "content": PROMPT}]})
            score_id = reply.json()["veracity"]["id"]
            assert fetch(running.url, score_id).json()["status"] == "done"
            time.sleep(1.2)
            assert fetch(running.url, score_id).status_code == 404  # in memory, but past retention
        with RunningApp(create_app(settings)) as running:
            assert fetch(running.url, score_id).status_code == 404  # nor from the log


def test_sigterm_drains_and_exits_0_and_the_url_is_redacted(tmp_path: Path) -> None:
    with MockUpstream() as mock:
        mock.script(Reply(hang=1.5, match=only(PROMPT)))
        url = mock.url.replace("http://", "http://user:pw-S3CRET@")
        env = {**os.environ, "VERACITY_HOME": str(tmp_path)}
        server = subprocess.Popen(
            [sys.executable, "-m", "veracity", "serve", "--upstream", url, "--upstream-api-key-env", "",
             "--no-auth", "--port", "0", "--embedder", "hash/default", "--no-cache",
             "--log", str(tmp_path / "t.sqlite"), "--shutdown-grace", "10"],
            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        assert server.stderr is not None
        first = server.stderr.readline()
        assert "S3CRET" not in first and "REDACTED@" in first, first
        port = int(first.split("http://127.0.0.1:")[1].split("/")[0])
        for _ in range(200):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        with httpx.Client(timeout=20) as client:
            pending = client.build_request("POST", f"http://127.0.0.1:{port}/v1/chat/completions",
                                           json={"model": "mock-model",
                                                 "messages": [{"role": "user", "content": PROMPT}]})
            got: list[httpx.Response] = []
            worker = threading.Thread(target=lambda: got.append(client.send(pending)))
            worker.start()
            # the request is in flight, its answer held 1.5 s upstream
            assert wait_until(lambda: any(only(PROMPT)(b["messages"][-1]["content"])
                                          for b in mock.chat_bodies()))
            server.send_signal(signal.SIGTERM)
            worker.join(20)
        rest = server.stderr.read()
        assert server.wait(20) == 0, rest
    assert got and got[0].status_code == 200 and got[0].json()["choices"][0]["message"]["content"] == STABLE
    assert "S3CRET" not in rest and "Traceback" not in rest


def test_an_answer_holding_a_lone_surrogate_is_served_scored_and_logged(
        gateway: Callable[..., Gw], tmp_path: Path, server_log: pytest.LogCaptureFixture) -> None:
    gw = gateway()
    broken = {"id": "x", "object": "chat.completion", "model": "mock-model", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Paris \ud800!"}}]}
    gw.mock.script(Reply(body=broken, match=only(PROMPT)), Reply(body=broken))  # the answer, a perturbed one
    reply = gw.chat()
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "Paris \ufffd!"
    score = reply.json()["veracity"]
    assert score["error"] is None and isinstance(score["gamma"], float)
    assert "Paris \ufffd!" in score["perturbed_answers"]
    body = {"model": "mock-model", "stream": True, "messages": [{"role": "user", "content": "Again?"}]}
    gw.mock.script(Reply(text="Lyon \udc00 perhaps", match=only("Again?")))
    streamed = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=gw.headers(), timeout=20)
    events = [e for e in streamed.content.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    final = json.loads(events[-2].removeprefix(b"data: "))["veracity"]
    assert final["error"] is None and isinstance(final["gamma"], float)
    gw.running.__exit__()
    rows = read_traffic(tmp_path / "traffic.sqlite")
    assert [r.answer for r in rows] == ["Paris \ufffd!", "Lyon \ufffd perhaps"]
    assert "Traceback" not in server_log.text and "could not write" not in server_log.text


def test_a_long_answer_is_cut_in_the_log_not_in_the_response(gateway: Callable[..., Gw],
                                                           tmp_path: Path) -> None:
    from veracity.traffic import LOGGED_CHARS

    gw = gateway()
    long = "Paris " * 20_000
    gw.mock.script(*[Reply(text=long) for _ in range(4)])  # the answer and the 3 perturbed ones
    reply = gw.chat()
    assert reply.json()["choices"][0]["message"]["content"] == long
    assert reply.json()["veracity"]["perturbed_answers"] == [long.strip()] * 3
    gw.running.__exit__()
    [row] = read_traffic(tmp_path / "traffic.sqlite")
    cut = f"… [{len(long) - LOGGED_CHARS} more characters not logged]"
    assert row.answer == long[:LOGGED_CHARS] + cut
    assert all(len(a) < LOGGED_CHARS + 60 for a in row.score["perturbed_answers"])
    assert (tmp_path / "traffic.sqlite").stat().st_size < 200_000


def test_sixty_byte_at_a_time_clients_are_closed_and_the_others_served(
        gateway: Callable[..., Gw]) -> None:
    """Issue 42: 60 connections trickling their headers stay open no longer than the timeout,
    and a well-behaved client is served meanwhile as fast as alone."""
    gw = gateway(client_timeout=1.0)
    began = time.monotonic()
    alone = gw.chat()
    alone_s = time.monotonic() - began
    request = head(gw, 10)
    slow = [connect(gw) for _ in range(60)]
    for step in range(5):  # a byte each every 0.1 s: never done before the deadline
        for sock in slow:
            try:
                sock.sendall(request[step:step + 1])
            except OSError:
                pass
        time.sleep(0.1)
    began = time.monotonic()
    served = gw.chat()
    assert served.status_code == 200 and alone.status_code == 200
    assert time.monotonic() - began < max(1.0, 5 * alone_s)
    for sock in slow:
        status, _, took = closed_within(sock, 5)
        assert status == 408 and took < 5
        sock.close()
    assert wait_until(lambda: open_connections(gw) == 0)
