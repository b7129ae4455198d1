"""Paths given by the user: ``~`` expanded with a clear error, outputs checked before any work."""

from __future__ import annotations

import os
from pathlib import Path

from veracity.errors import ConfigError


def user_path(value: str | Path) -> Path:
    """``value`` with ``~`` / ``~user`` expanded; a ConfigError when that user does not exist."""
    try:
        return Path(value).expanduser()
    except RuntimeError:
        raise ConfigError(f"{value}: cannot expand '~' (no such user or no home directory)") from None


def default_cache_path() -> Path:
    """``$VERACITY_CACHE``, else ``$VERACITY_HOME/cache.sqlite``, else ``~/.cache/veracity``."""
    if os.environ.get("VERACITY_CACHE"):
        return user_path(os.environ["VERACITY_CACHE"])
    home = os.environ.get("VERACITY_HOME")
    base = user_path(home) if home else Path.home() / ".cache" / "veracity"
    return base / "cache.sqlite"


def _blocking_file(path: Path) -> Path | None:
    """The existing non-directory at ``path`` or above it, if any."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return None if candidate.is_dir() else candidate
    return None


def check_output_dir(path: Path) -> None:
    """An output directory must be a writable directory, or creatable as one."""
    blocker = _blocking_file(path)
    if blocker == path:
        raise ConfigError(f"{path} is a file, not a directory: pick another output directory")
    if blocker is not None:
        raise ConfigError(f"{path} cannot be created: {blocker} is a file, not a directory")
    existing = next(p for p in (path, *path.parents, Path(".")) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{path}: cannot write into {existing} (permission denied)")


def check_output_file(path: Path) -> None:
    """An output file must not be a directory, nor sit under a file."""
    if path.is_dir():
        raise ConfigError(f"{path} is a directory: give a file name")
    blocker = _blocking_file(path.parent)
    if blocker is not None:
        raise ConfigError(f"{path} cannot be written: {blocker} is a file, not a directory")
