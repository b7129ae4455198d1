"""kill -9 and Ctrl-C in the middle of a gamma run against a slow server, then a rerun."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from mock_openai import MockOpenAI, Received, Reply
from veracity.cli import main

N_ITEMS, N = 16, 4
TOTAL = N_ITEMS * (N + 1)


def _dataset(folder: Path) -> Path:
    path = folder / "q.jsonl"
    path.write_text("".join(json.dumps({"question": f"Name the number {i}, twice."}) + "\n"
                            for i in range(N_ITEMS)))
    return path


def _command(url: str, folder: Path, out: str) -> list[str]:
    return [sys.executable, "-m", "veracity", "gamma", "--dataset", f"jsonl:{folder / 'q.jsonl'}",
            "--model", "openai/mock", "--base-url", url, "--embedder", "hash/default",
            "-n", str(N), "--cache", str(folder / "cache.sqlite"), "--out", str(folder / out),
            "--max-concurrency", "4", "--quiet"]


def _cached(folder: Path) -> int:
    with sqlite3.connect(folder / "cache.sqlite") as conn:
        return int(conn.execute("SELECT COUNT(*) FROM entries WHERE kind = 'generation'").fetchone()[0])


def _cached_now(folder: Path) -> int:
    """``_cached`` while a run may still be creating the file (0 until its table exists)."""
    if not (folder / "cache.sqlite").exists():
        return 0
    try:
        return _cached(folder)
    except sqlite3.OperationalError:
        return 0


def _wait_cached(folder: Path, count: int, proc: subprocess.Popen[bytes]) -> int:
    """Poll until the run has cached ``count`` answers (or died, or 60 s passed)."""
    deadline = time.monotonic() + 60
    while _cached_now(folder) < count and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return _cached_now(folder)


def _wait_for(mock: MockOpenAI, answered: int, proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 60
    while mock.answered < answered and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    return mock.answered


def _samples(folder: Path, out: str) -> list[dict[str, object]]:
    lines = (folder / out / "samples.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_kill_9_then_rerun_loses_nothing_and_resends_only_what_is_missing(tmp_path: Path) -> None:
    _dataset(tmp_path)
    limit, given = [TOTAL], [0]

    def stall_past_limit(received: Received) -> Reply | None:
        # the server stops answering at the limit, so every answer sent had time to arrive
        if given[0] >= limit[0]:
            return Reply(hang=30.0)
        given[0] += 1
        return None

    with MockOpenAI(delay=0.03, chooser=stall_past_limit) as mock:
        for target in (7, 31, 58):  # each rerun resumes the one before, then dies again
            before, limit[0] = len(mock.received), target
            cached_before = _cached(tmp_path) if (tmp_path / "cache.sqlite").exists() else 0
            proc = subprocess.Popen(_command(mock.url, tmp_path, "run"), stderr=subprocess.PIPE)
            _wait_for(mock, target, proc)
            # every answer sent arrives and is cached while the rest hang: kill -9 only then
            assert _wait_cached(tmp_path, given[0], proc) == given[0]
            proc.kill()
            proc.wait()
            assert _cached(tmp_path) == given[0] > cached_before  # no answered call lost
            sent = [json.dumps(r.body, sort_keys=True) for r in mock.received[before:]]
            assert len(set(sent)) == len(sent)  # nothing cached was asked again
        limit[0] = 10 * TOTAL
        before = len(mock.received)
        missing = TOTAL - _cached(tmp_path)
        subprocess.run(_command(mock.url, tmp_path, "run"), check=True, capture_output=True)
        assert len(mock.received) - before == missing  # exactly the calls that were missing
        assert _cached(tmp_path) == TOTAL

        fresh = tmp_path / "fresh"  # an uninterrupted run, in this process
        fresh.mkdir()
        _dataset(fresh)
        result = CliRunner().invoke(main, _command(mock.url, fresh, "run")[3:])
        assert result.exit_code == 0, result.output
    assert _samples(tmp_path, "run") == _samples(fresh, "run")


def test_ctrl_c_exits_at_once_keeping_every_answer(tmp_path: Path) -> None:
    _dataset(tmp_path)
    first = 10

    def stall_after_first(received: Received) -> Reply | None:
        return Reply(hang=300.0) if len(mock.received) > first else None

    with MockOpenAI(chooser=stall_after_first) as mock:
        proc = subprocess.Popen(_command(mock.url, tmp_path, "run"), stderr=subprocess.PIPE)
        _wait_for(mock, first, proc)
        deadline = time.monotonic() + 60
        while mock.in_flight < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)  # until the stalled requests are in flight
        assert mock.in_flight == 4, mock.in_flight
        proc.send_signal(signal.SIGINT)
        # far less than the 300 s the stalled requests hang: they are not awaited (a minute,
        # so that a loaded machine's slow start of the exit does not count as waiting)
        _, err = proc.communicate(timeout=60)
        assert mock.answered == first
    assert proc.returncode == 130
    message = err.decode()
    assert f"{first} answers received from openai/mock in this run are in the cache" in message
    assert "Traceback" not in message
    assert _cached(tmp_path) == first
    assert os.path.exists(tmp_path / "cache.sqlite")
