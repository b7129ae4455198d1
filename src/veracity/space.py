"""Out of space is an error like any other: one message naming the file and what was written.

Writes to the cache, a run directory, the item store and the traffic log go through
:func:`writing`, which turns the operating system's and SQLite's failures into a
:class:`~veracity.errors.StorageError` (an ``Error:`` line and exit code 1 on the command line).
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from veracity.errors import StorageError

_UMASK = os.umask(0o022)
os.umask(_UMASK)
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""Out of space, over a quota, or past the process's file size limit (``ulimit -f``)."""


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` says a file system (or a size limit) has no room for the write."""
    if isinstance(exc, OSError):
        return exc.errno in NO_SPACE
    if isinstance(exc, sqlite3.Error):
        return (getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
                or "disk is full" in str(exc))
    return False


def free_bytes(path: Path) -> int | None:
    """Free bytes on the file system holding ``path`` (or its nearest existing parent)."""
    for place in (path, *path.parents):
        try:
            return shutil.disk_usage(place).free
        except OSError:
            continue
    return None


def megabytes(size: int) -> str:
    """``12.3 MB`` (10^6 bytes, as ``df -H`` counts)."""
    return f"{size / 1e6:.1f} MB"


def storage_error(exc: BaseException, path: Path | str, what: str, kept: str = "",
                  then: str = "rerun the same command") -> StorageError:
    """The error to raise for a failed write of ``what`` to ``path`` (``kept``: what is safe;
    ``then``: what to do once there is room)."""
    where = Path(path)
    if is_no_space(exc):
        free = free_bytes(where)
        reason = "no space left" + (f" ({megabytes(free)} free)" if free is not None else "")
        if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
            reason = "the file is larger than this process may write (ulimit -f) or no space left"
        hint = f"free some space (or pick another place), then {then}"
    elif isinstance(exc, sqlite3.Error) and "disk I/O error" in str(exc):
        reason = "disk I/O error (a full disk, a file size limit or a failing device)"
        hint = f"free some space (or pick another place), then {then}"
    else:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        hint = f"check that the place is writable, then {then}"
    kept = f" ({kept})" if kept else ""
    return StorageError(f"cannot write {what} to {where}: {reason}; {hint}{kept}")


@contextmanager
def writing(path: Path | str, what: str) -> Iterator[None]:
    """Turn a failed write inside the block into a :class:`StorageError` naming ``path``."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        raise storage_error(exc, path, what) from exc


def replace_text(target: Path, text: str | Iterable[str], what: str) -> None:
    """Write ``text`` (or its parts, one after another) to a temporary file of this process
    beside ``target``, then rename it into place: a reader sees the old file or the new one, and
    two processes never share a temporary name. A failed write leaves ``target`` as it was and
    no temporary file behind."""
    with writing(target, what):
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                    suffix=f".{os.getpid()}.tmp")
        tmp = Path(name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                for part in [text] if isinstance(text, str) else text:
                    fh.write(part)
            os.chmod(tmp, 0o666 & ~_UMASK)  # as open() would have made it
            tmp.replace(target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
