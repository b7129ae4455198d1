"""Issue 42: out of space is an error like any other.

Each place veracity writes (the cache, the run directory, the item store, the gateway's traffic
log) is filled up for real: a tmpfs of a fixed size when the tests may mount one (root, as in
CI), and everywhere a child process whose files may not grow past a size (RLIMIT_FSIZE). The
command ends with one ``Error:`` line naming the file and what it was writing, exit code 1 and
no traceback; answers already stored stay stored, and the rerun asks only for the rest.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway_server import RunningApp
from mock_openai import MockOpenAI, Received, Reply
from mock_upstream import MockUpstream
from small_disk import one_clean_error, resize_tmpfs, small_tmpfs, veracity
from veracity.serve import GatewaySettings, create_app
from veracity.traffic import TrafficLog, read_traffic

pytestmark = pytest.mark.slow

N_ITEMS, N = 12, 4
TOTAL = N_ITEMS * (N + 1)
WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def long_answer(received: Received) -> Reply:
    """An answer of about 2 KB, different for every question, so the cache fills quickly."""
    last = received.body["messages"][-1]["content"]
    content = f"{last} " + WORDS * 25
    body = {"object": "chat.completion", "usage": {"prompt_tokens": 7, "completion_tokens": 300,
                                                   "total_tokens": 307},
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}]}
    return Reply(body=body, good=True)


def dataset(folder: Path) -> Path:
    path = folder / "q.jsonl"
    path.write_text("".join(json.dumps({"question": f"Name the number {i}, twice."}) + "\n"
                            for i in range(N_ITEMS)))
    return path


def gamma_args(url: str, data: Path, cache: Path, out: Path) -> list[str]:
    return ["gamma", "--dataset", f"jsonl:{data}", "--model", "openai/mock", "--base-url", url,
            "--embedder", "hash/default", "-n", str(N), "--cache", str(cache), "--out", str(out),
            "--max-concurrency", "4", "--quiet"]


def cached(cache: Path) -> int:
    with sqlite3.connect(f"file:{cache}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM entries WHERE kind = 'generation'")
                   .fetchone()[0])


def chat_requests(mock: MockOpenAI) -> int:
    return sum(r.path.endswith("/chat/completions") for r in mock.received)


# --- the cache ----------------------------------------------------------------------------------


def _cache_full(tmp_path: Path, place: AbstractContextManager[Path], limit: int | None) -> None:
    data = dataset(tmp_path)
    # one server (its URL is part of the keys), answering slowly enough that the client's
    # writes keep up: what stopping costs is then bounded by the concurrency alone
    with MockOpenAI(chooser=long_answer, delay=0.2) as mock:
        with place as small:
            cache = small / "cache.sqlite"
            done = veracity(gamma_args(mock.url, data, cache, tmp_path / "run"), limit)
            line = one_clean_error(done, str(cache), "cache")
            assert "rerun" in line
            stored = cached(cache)
            sent = chat_requests(mock)
            assert 0 < stored < TOTAL
            # the run stopped at once: every request sent is stored, or was in the group whose
            # write failed (the error counts them), or was in flight or waiting to be handed over
            # (the concurrency, twice)
            lost = re.search(r"(\d+) new \w+ entries", line)
            assert lost is not None, line
            assert sent - stored <= int(lost.group(1)) + 2 * 4, (sent, stored, line)
            roomy = tmp_path / "roomy"  # space freed: the cache moved to a larger disk
            roomy.mkdir()
            for part in small.glob("cache.sqlite*"):
                shutil.copy(part, roomy / part.name)
        done = veracity(gamma_args(mock.url, data, roomy / "cache.sqlite", tmp_path / "run"))
        assert done.returncode == 0, done.stderr[-3000:]
        assert chat_requests(mock) - sent == TOTAL - stored  # only the calls that were missing
    assert cached(roomy / "cache.sqlite") == TOTAL


def test_a_full_cache_disk_is_one_error_and_the_rerun_sends_only_the_rest(tmp_path: Path) -> None:
    _cache_full(tmp_path, small_tmpfs(tmp_path / "small", "160k"), None)


def test_a_cache_past_the_file_size_limit_is_one_error_too(tmp_path: Path) -> None:
    (tmp_path / "small").mkdir()
    _cache_full(tmp_path, nullcontext(tmp_path / "small"), 192 * 1024)


# --- the run directory -------------------------------------------------------------------------


def _run_dir_full(tmp_path: Path, place: AbstractContextManager[Path], limit: int | None) -> None:
    data = dataset(tmp_path)
    cache = tmp_path / "cache.sqlite"
    with MockOpenAI(chooser=long_answer) as mock:
        warm = veracity(gamma_args(mock.url, data, cache, tmp_path / "first"))
        assert warm.returncode == 0, warm.stderr[-3000:]
        with place as small:
            done = veracity(gamma_args(mock.url, data, cache, small / "run"), limit)
            one_clean_error(done, str(small / "run"))
        assert chat_requests(mock) == TOTAL  # the failed run asked for nothing again
        done = veracity(gamma_args(mock.url, data, cache, tmp_path / "again"))
        assert done.returncode == 0, done.stderr[-3000:]
        assert chat_requests(mock) == TOTAL
    assert cached(cache) == TOTAL


def test_a_full_run_directory_is_one_error_naming_the_file(tmp_path: Path) -> None:
    _run_dir_full(tmp_path, small_tmpfs(tmp_path / "small", "48k"), None)


def test_a_run_directory_past_the_file_size_limit_is_one_error_too(tmp_path: Path) -> None:
    (tmp_path / "small").mkdir()
    _run_dir_full(tmp_path, nullcontext(tmp_path / "small"), 40 * 1024)  # above the 32 KiB -shm


# --- the item store (TMPDIR) --------------------------------------------------------------------


@pytest.fixture(scope="module")
def large_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL file just above the size read into an item store (32 MiB)."""
    path = tmp_path_factory.mktemp("large") / "large.jsonl"
    line = json.dumps({"question": "What is the boiling point of water at sea level? " * 8,
                       "answer": "100 degrees Celsius"}) + "\n"
    path.write_text(line * (33 * 2**20 // len(line) + 1))
    return path


def _tmpdir_full(tmp_path: Path, large: Path, place: AbstractContextManager[Path],
                 limit: int | None) -> None:
    with place as small:
        done = veracity(["gamma", "--dataset", f"jsonl:{large}", "--limit", "2", "--model",
                         "fake/echo", "--embedder", "hash/default", "-n", "2", "--cache",
                         str(tmp_path / "cache.sqlite"), "--out", str(tmp_path / "run"),
                         "--quiet"], limit, TMPDIR=str(small))
        one_clean_error(done, str(small), "item store", "TMPDIR")
        assert list(small.iterdir()) == []  # the half-built store is gone


def test_a_full_tmpdir_names_the_folder_and_tmpdir(tmp_path: Path, large_dataset: Path) -> None:
    _tmpdir_full(tmp_path, large_dataset, small_tmpfs(tmp_path / "small", "1m"), None)


def test_an_item_store_past_the_file_size_limit_is_one_error_too(tmp_path: Path,
                                                                 large_dataset: Path) -> None:
    (tmp_path / "small").mkdir()
    _tmpdir_full(tmp_path, large_dataset, nullcontext(tmp_path / "small"), 2**20)


# --- the gateway's traffic log ------------------------------------------------------------------


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Callable[[Path], tuple[str, MockUpstream]]]:
    running: list[Any] = []

    def start(log: Path) -> tuple[str, MockUpstream]:
        upstream = MockUpstream().__enter__()
        settings = GatewaySettings(upstream=upstream.url, upstream_api_key_env="",
                                   embedder="hash/default", n=2, no_auth=True, log=log,
                                   cache=tmp_path / "gw-cache.sqlite", timeout=5.0,
                                   shutdown_grace=5.0, retry_after=1)
        app = RunningApp(create_app(settings)).__enter__()
        running.extend([app, upstream])
        return app.url, upstream

    yield start
    for thing in running:
        thing.__exit__(None, None, None)


def chat(url: str, prompt: str) -> httpx.Response:
    body = {"model": "mock-model", "messages": [{"role": "user", "content": prompt}]}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=20)


def _log_rows(path: Path) -> int:
    return len(read_traffic(path))


def _until(condition: Callable[[], bool], seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _check_503(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "traffic_log_unwritable" and error["type"] == "server_error"
    assert set(error) == {"message", "type", "param", "code"}


def test_a_full_traffic_log_disk_is_a_503_and_the_gateway_stays_up(
        tmp_path: Path, gateway: Callable[[Path], tuple[str, MockUpstream]],
        caplog: pytest.LogCaptureFixture) -> None:
    with small_tmpfs(tmp_path / "small", "160k") as small:
        url, _ = gateway(small / "traffic.sqlite")
        answered, refused = 0, None
        for i in range(2000):
            response = chat(url, f"question {i} " + "words " * 200)
            if response.status_code == 503:
                refused = response
                break
            assert response.status_code == 200
            answered += 1
        assert refused is not None, "the log never filled"
        _check_503(refused)
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200  # still up
        assert httpx.get(url + "/readyz", timeout=5).status_code == 503  # not ready meanwhile
        assert any(str(small / "traffic.sqlite") in r.getMessage() and r.exc_info is None
                   for r in caplog.records)
        resize_tmpfs(small, "8m")  # space freed: the held rows are written, service resumes
        assert _until(lambda: chat(url, "after").status_code == 200)
        assert _until(lambda: _log_rows(small / "traffic.sqlite") == answered + 1)


def test_a_traffic_log_that_cannot_write_is_a_503_until_it_can(
        tmp_path: Path, gateway: Callable[[Path], tuple[str, MockUpstream]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    full = [False]
    write = TrafficLog.write

    def failing(self: TrafficLog, rows: list[Any]) -> None:
        if full[0]:
            raise sqlite3.OperationalError("database or disk is full")
        write(self, rows)

    monkeypatch.setattr(TrafficLog, "write", failing)
    log = tmp_path / "traffic.sqlite"
    url, _ = gateway(log)
    answered = []

    def ask(prompt: str) -> int:
        response = chat(url, prompt)
        if response.status_code == 200:
            answered.append(prompt)
        return response.status_code

    assert ask("one") == 200
    assert _until(lambda: _log_rows(log) == 1)
    full[0] = True
    assert ask("two") == 200  # answered before its row failed
    assert _until(lambda: ask("three") == 503)
    _check_503(chat(url, "four"))
    assert httpx.get(url + "/healthz", timeout=5).status_code == 200
    full[0] = False
    assert _until(lambda: ask("five") == 200)
    # every answered request has its row, those held while the log failed included
    assert _until(lambda: _log_rows(log) == len(answered))
