"""What an interrupted gamma run keeps: kill -9 and Ctrl-C against a slow local server.

Runs ``veracity gamma`` on ``openai/bench`` against ``tests/mock_openai.py`` (127.0.0.1, every
answer after ``--delay`` s) in a subprocess. kill -9 lands at several points of the run, with
no pause, and each time the answers the server had sent are compared with those in the cache.
Then Ctrl-C lands while requests hang on a stalled server: the time to exit and the answers kept
are measured. The last line is the share of answered calls kept over all trials.

    python bench/interrupt.py [--items 40] [--delay 0.05] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from mock_openai import MockOpenAI, Received, Reply  # noqa: E402

N = 4


def _command(url: str, folder: Path) -> list[str]:
    return [sys.executable, "-m", "veracity", "gamma", "--dataset", f"jsonl:{folder / 'q.jsonl'}",
            "--model", "openai/bench", "--base-url", url, "--embedder", "hash/default", "-n", str(N),
            "--cache", str(folder / "cache.sqlite"), "--out", str(folder / "run"),
            "--max-concurrency", "4", "--quiet"]


def _cached(folder: Path) -> int:
    if not (folder / "cache.sqlite").exists():
        return 0
    with sqlite3.connect(folder / "cache.sqlite") as conn:
        return int(conn.execute("SELECT COUNT(*) FROM entries WHERE kind = 'generation'").fetchone()[0])


def _until(mock: MockOpenAI, answered: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while mock.answered < answered and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)


def _folder(items: int) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="veracity-interrupt-"))
    (folder / "q.jsonl").write_text("".join(
        json.dumps({"question": f"Name the number {i}, twice."}) + "\n" for i in range(items)))
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.05, help="server seconds per answer")
    parser.add_argument("--smoke", action="store_true", help="8 items, two kills")
    args = parser.parse_args()
    items = 8 if args.smoke else args.items
    total = items * (N + 1)
    points = [total // 3, 2 * total // 3] if args.smoke else [total * k // 6 for k in range(1, 6)]

    folder = _folder(items)
    answered_all = kept_all = worst = 0  # over all kills; a lost answer is asked (and paid) again
    with MockOpenAI(delay=args.delay) as mock:
        for point in points:  # each run resumes the one before, then is killed
            proc = subprocess.Popen(_command(mock.url, folder), stderr=subprocess.DEVNULL)
            _until(mock, point, proc)
            answered = mock.answered
            proc.kill()
            proc.wait()
            before = answered_all - kept_all
            answered_all, kept_all = answered, _cached(folder)
            lost = max(0, answered_all - kept_all - before)
            worst = max(worst, lost)
            print(f"kill -9 at {point} answered: lost {lost} calls")
    lost_kill = max(0, answered_all - kept_all)
    per_second = 4 / args.delay  # the server's pace: 4 requests in flight

    folder = _folder(items)
    first = total // 2

    def stall(received: Received) -> Reply | None:
        return Reply(hang=60.0) if len(stalled.received) > first else None

    with MockOpenAI(delay=args.delay, chooser=stall) as stalled:
        proc = subprocess.Popen(_command(stalled.url, folder), stderr=subprocess.PIPE)
        _until(stalled, first, proc)
        while stalled.in_flight < 4 and proc.poll() is None:
            time.sleep(0.001)
        began = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        exit_seconds = time.perf_counter() - began
        answered = stalled.answered
    kept = _cached(folder)
    said = err.decode().strip().splitlines()[-1] if err else ""
    print(f"ctrl-c says: {said}")
    print(f"ctrl_c_exit: {exit_seconds:.2f} s")
    print(f"ctrl_c_kept: {kept} calls (of {answered} answered)")
    print(f"kill_9_lost: {lost_kill} calls (of {answered_all} answered, {len(points)} kills)")
    print(f"kill_9_worst: {worst / per_second:.2f} s of answers lost by one kill")
    share = (kept_all + kept) / max(1, answered_all + answered)
    print(f"answered_calls_kept: {share:.3f} ratio")
    # what a kill -9 loses is at most about a second of answers; Ctrl-C exits in about one
    return 0 if worst <= per_second and exit_seconds < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
