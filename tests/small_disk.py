"""File systems of a fixed size for the out-of-space tests.

``small_tmpfs`` mounts a tmpfs of a given size (root only: skips with the reason elsewhere);
``size_limited`` is the portable variant: a child process whose files may not grow past a
size (``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored so a write past it fails with ``EFBIG`` as a
full disk fails with ``ENOSPC``).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``256k``) mounted at ``path`` for the block."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def resize_tmpfs(path: Path, size: str) -> None:
    """Give the tmpfs at ``path`` more room (space freed, as an operator would)."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


def size_limited(limit: int) -> Callable[[], None]:
    """A ``preexec_fn``: files of the child may not grow past ``limit`` bytes."""

    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_files


def veracity(args: list[str], limit: int | None = None, timeout: float = 240,
             **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m veracity ARGS`` in a child process (files limited to ``limit`` bytes)."""
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env}
    environment.pop("OPENAI_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "veracity", *args], capture_output=True,
                          text=True, timeout=timeout, env=environment,
                          preexec_fn=None if limit is None else size_limited(limit))


def one_clean_error(done: subprocess.CompletedProcess[str], *names: str) -> str:
    """The single ``Error:`` line of a failed command, checked: exit code 1, no traceback, and
    every one of ``names`` in it."""
    assert done.returncode == 1, (done.returncode, done.stdout[-2000:], done.stderr[-4000:])
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.stderr[-4000:]
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]
