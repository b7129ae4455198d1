"""A native crash (a segfault in llama.cpp, torch or ONNX Runtime) is never silent.

:func:`arm` turns on :mod:`faulthandler` for the CLI and the gateway, so a fatal signal prints
the Python stack it happened under. Once a native model is loaded, :func:`watch_native` routes
that report through a small watcher process which copies it to stderr and, when the process
did crash, adds a line pointing to ``veracity doctor``: a dying process cannot print anything
after the fault itself. Library users are left alone unless they call :func:`arm`.
"""

from __future__ import annotations

import faulthandler
import io
import os
import subprocess
import sys
import threading

HINT = ("veracity: the process crashed in native code (above: where). Run `veracity doctor` to "
        "check what this machine can run and how to fix it.")
WATCHER = r"""
import os, sys
seen = False
while True:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    seen = seen or b"Fatal Python error" in chunk
    os.write(2, chunk)
if seen:
    os.write(2, (sys.argv[1] + "\n").encode())
"""

_lock = threading.Lock()
_armed = False
_watcher: subprocess.Popen[bytes] | None = None
_pipe: int | None = None


def arm() -> None:
    """Print the Python stack on a fatal signal (SIGSEGV, SIGABRT, ...), to stderr."""
    global _armed
    with _lock:
        if not _armed:
            try:
                faulthandler.enable(file=sys.stderr, all_threads=True)
            except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
                return  # stderr is not a file (an embedding host's capture): nothing to arm
            _armed = True


def watch_native() -> None:
    """Called when native code is about to run models: if :func:`arm` was called, from now on
    a crash report also names ``veracity doctor``. Costs one small process, started once."""
    global _watcher, _pipe
    with _lock:
        if not _armed or _watcher is not None:
            return
        try:
            stderr = sys.stderr.fileno()
        except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
            return
        read_end, write_end = os.pipe()
        try:
            _watcher = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", WATCHER, HINT],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=stderr,
                start_new_session=True,  # Ctrl-C in the terminal is the CLI's, not the watcher's
            )
        except (OSError, ValueError, subprocess.SubprocessError):
            os.close(write_end)  # no watcher: the plain faulthandler report still shows where
            return
        finally:
            os.close(read_end)
        _pipe = write_end
        faulthandler.enable(file=write_end, all_threads=True)
