"""Issue 42: a run directory belongs to one run at a time.

Two processes started together on one ``--out`` used to crash each other (FEWL: a read-only
database, disk I/O errors; γ: a shared ``run.json.tmp``) and each made every model call. Now
the second is refused at once, naming the first; a lock left by a killed process is taken over
with a message.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from veracity import runlock
from veracity.runlock import RunDirBusy, claim_run_dir, lock_file, release_run_dir
from veracity.store import RunDir

pytestmark = pytest.mark.slow

SLOW = ["--model-option", "delay=0.05", "--quiet"]


def gamma(out: Path, cache: Path) -> list[str]:
    return ["gamma", "--dataset", "builtin", "--limit", "6", "--model", "fake/echo", "--embedder",
            "hash/default", "-n", "3", "--out", str(out), "--cache", str(cache), *SLOW]


def fewl(out: Path, cache: Path) -> list[str]:
    return ["fewl", "run", "--dataset", "builtin", "--limit", "6", "--answers", "fake/stable",
            "--reference", "fake/pairs", "--reference-samples", "3", "--pairs", "4",
            "--neighbours", "3", "--similarity", "hash/default", "--out", str(out), "--cache",
            str(cache), *SLOW]


def start(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen([sys.executable, "-m", "veracity", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("command", [gamma, fewl], ids=["gamma", "fewl"])
def test_two_runs_started_together_one_is_refused_at_once(tmp_path: Path, command) -> None:
    out = tmp_path / "run"
    # separate caches: the second run cannot finish early by reading the first one's answers
    procs = [start(command(out, tmp_path / f"cache-{i}.sqlite")) for i in range(2)]
    ended: dict[int, float] = {}
    while len(ended) < 2:
        for i, proc in enumerate(procs):
            if i not in ended and proc.poll() is not None:
                ended[i] = time.monotonic()
        time.sleep(0.01)
    results = [(p.returncode, *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    loser = next(i for i, (code, _, _) in enumerate(results) if code == 1)
    winner = 1 - loser
    err = results[loser][2]
    assert "Traceback" not in err
    assert f"is in use by another run (pid {procs[winner].pid} on " in err, err
    assert ended[loser] < ended[winner]  # refused at once, not after doing the work
    run = RunDir.open(out)
    assert run.info["finished"] and run.results
    assert not lock_file(out).exists()  # released by the run that held it
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_message(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "run"
    lock_file(out).write_text(json.dumps({"pid": dead.pid, "host": "here", "since": "earlier"}))
    done = subprocess.run([sys.executable, "-m", "veracity", *gamma(out, tmp_path / "c.sqlite")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"taking over the lock of pid {dead.pid} on here, since earlier" in done.stderr
    assert not lock_file(out).exists()


def test_a_command_writing_into_a_run_held_elsewhere_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "veracity", *gamma(out, tmp_path / "c.sqlite")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    claim_run_dir(out)  # this process writes the run now
    try:
        refused = subprocess.run([sys.executable, "-m", "veracity", "validate", "gamma", str(out),
                                  "--cache", str(tmp_path / "c.sqlite")],
                                 capture_output=True, text=True)
    finally:
        release_run_dir(out)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"is in use by another run (pid {os.getpid()} on " in refused.stderr
    assert not lock_file(out).exists()


def test_a_process_may_claim_its_own_directory_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    claim_run_dir(out)
    claim_run_dir(out)
    held = json.loads(lock_file(out).read_text())
    assert held["pid"] == os.getpid()
    release_run_dir(out)
    assert not lock_file(out).exists() and not out.exists()  # a claim makes no directory


def test_a_run_refused_between_the_holders_lock_and_its_name_waits_for_the_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder takes the lock, then writes its name: a run refused in between reads the
    name once it is there, or says no name was left after NAME_WAIT."""
    out = tmp_path / "run"
    out.mkdir()
    holder = os.open(lock_file(out), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken, no name yet
        record = json.dumps({"pid": 4242, "host": "there", "since": "now"}).encode()
        writer = threading.Timer(0.2, lambda: os.write(holder, record))
        writer.start()
        with pytest.raises(RunDirBusy, match=r"in use by another run \(pid 4242 on there"):
            claim_run_dir(out)
        writer.join()
        os.ftruncate(holder, 0)
        monkeypatch.setattr(runlock, "NAME_WAIT", 0.05)
        with pytest.raises(RunDirBusy, match="a process that left no name"):
            claim_run_dir(out)
    finally:
        os.close(holder)
