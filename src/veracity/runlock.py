"""A run directory belongs to one run at a time.

Every command that writes a run directory claims it first: an exclusive ``flock`` on a file
beside it, ``.NAME.veracity-lock`` for a directory ``NAME``, naming the holder (pid, host,
when); beside, not inside, so a run refused before its first write leaves no directory. A second process
asking for the same directory is refused at once, naming the holder. The kernel drops the lock
when its process ends, however it ends; a lock file left by a process that was killed is taken
over with a message. A claim lasts until the run's Context closes (or the process ends), and a
process may claim the same directory again while it holds it.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from veracity.errors import ConfigError
from veracity.space import writing
from veracity.text import terminal_safe


def lock_file(path: Path | str) -> Path:
    """The lock file of a run directory (which need not exist yet)."""
    where = Path(os.path.realpath(path))
    return where.parent / f".{where.name}.veracity-lock"

log = logging.getLogger("veracity")


class RunDirBusy(ConfigError):
    """Another process is writing the run directory."""


@dataclass
class _Claim:
    fd: int
    lock: Path
    thread: int


_claims: dict[str, _Claim] = {}
_guard = threading.Lock()


def _key(path: Path) -> str:
    return os.path.realpath(path)


def holder_text(record: str) -> str:
    """``pid 123 on host, since 2026-01-01T10:00:00+0000`` from a lock file's text."""
    try:
        info = json.loads(record)
        return terminal_safe(f"pid {info['pid']} on {info['host']}, since {info['since']}")
    except (ValueError, TypeError, KeyError):
        return "a process that left no name"


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode("utf-8", "replace").strip()


NAME_WAIT = 1.0
"""Seconds a refused run waits for the holder to write its name into the lock: the holder
writes it just after it takes the lock, so two runs started together can meet in between."""


def _holder_name(fd: int) -> str:
    """The lock's record once its holder has written it (an empty one after ``NAME_WAIT``)."""
    deadline = time.monotonic() + NAME_WAIT
    record = _read(fd)
    while not record and time.monotonic() < deadline:
        time.sleep(0.005)
        record = _read(fd)
    return record


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file ``fd`` has open (not removed by its last holder)."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def claim_run_dir(path: Path | str) -> None:
    """Claim ``path`` (made if missing) for this process, or raise :class:`RunDirBusy`."""
    directory = Path(path)
    key = _key(directory)
    with _guard:
        if key in _claims:
            return
        lock = lock_file(directory)
        with writing(lock, "the run directory's lock"):
            lock.parent.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = holder_text(_holder_name(fd))
                    os.close(fd)
                    raise RunDirBusy(
                        f"{directory} is in use by another run ({holder}); wait for it to end or "
                        "write to another directory (two runs writing one directory would "
                        "corrupt it)") from None
                except BaseException:
                    os.close(fd)
                    raise
                if _same_file(fd, lock):
                    break
                os.close(fd)  # its holder removed it as we opened it: take the new one
            _take_over(fd, directory)
        _claims[key] = _Claim(fd, lock, threading.get_ident())


def _take_over(fd: int, directory: Path) -> None:
    """Write this process's name into the lock, saying whose lock it replaces, if any."""
    left = _read(fd)
    if left:
        log.warning("%s", terminal_safe(
            f"{directory}: taking over the lock of {holder_text(left)}, which ended without "
            "releasing it"))
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                         "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                         "command": " ".join(sys.argv[:3])[:200]})
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, record.encode("utf-8") + b"\n")


def _release(key: str) -> None:
    claim = _claims.pop(key)
    try:
        claim.lock.unlink(missing_ok=True)  # while still held: nobody can hold the old file
    except OSError:
        pass
    os.close(claim.fd)


def release_run_dir(path: Path | str) -> None:
    """Give up this process's claim on ``path`` (nothing if it holds none)."""
    key = _key(Path(path))
    with _guard:
        if key in _claims:
            _release(key)


def release_run_dirs() -> None:
    """Give up every claim made by the calling thread (a run's Context does at its close)."""
    me = threading.get_ident()
    with _guard:
        for key in [k for k, c in _claims.items() if c.thread == me]:
            _release(key)


@atexit.register
def _release_all() -> None:
    """At exit, claims still held go (their files too): only a killed process leaves one."""
    with _guard:
        for key in list(_claims):
            _release(key)


def holds(path: Path | str) -> bool:
    """Whether this process holds ``path``."""
    return _key(Path(path)) in _claims


@contextmanager
def run_dir_claimed(path: Path | str) -> Iterator[None]:
    """Hold ``path`` for the block; released after it unless it was held before."""
    before = holds(path)
    claim_run_dir(path)
    try:
        yield
    finally:
        if not before:
            release_run_dir(path)
