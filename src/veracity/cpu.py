"""What this CPU can do, as far as veracity's numerics care: vector and matrix instructions.

llama.cpp and the embedders pick kernels by these features (AVX2, AVX-512, AMX), so they are
recorded beside every run and decide defaults that differ between machines.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from veracity.jsontypes import JsonObject

CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class CpuFeatures:
    """The instruction sets that change which kernels run."""

    model: str
    cores: int
    avx2: bool
    avx512: bool
    avx512_bf16: bool
    amx: bool
    """Advanced Matrix Extensions (Intel Sapphire Rapids and newer): any of AMX-TILE/INT8/BF16."""

    def as_dict(self) -> JsonObject:
        return asdict(self)

    def fingerprint(self) -> str:
        """Stable id of this kind of CPU: same model, cores and features give the same id.

        >>> a = CpuFeatures("x", 2, True, False, False, False)
        >>> a.fingerprint() == CpuFeatures("x", 2, True, False, False, False).fingerprint()
        True
        >>> a.fingerprint() == CpuFeatures("x", 2, True, False, False, True).fingerprint()
        False
        """
        text = repr(sorted(self.as_dict().items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_flags(flags: set[str], model: str, cores: int) -> CpuFeatures:
    """Features from a set of lower-case CPU flag names (Linux ``/proc/cpuinfo`` spelling).

    >>> parse_flags({"avx2", "amx_int8", "amx_tile"}, "Xeon", 2).amx
    True
    >>> parse_flags({"avx2", "avx512f"}, "EPYC", 2).avx512
    True
    """
    return CpuFeatures(
        model=model,
        cores=cores,
        avx2="avx2" in flags,
        avx512="avx512f" in flags,
        avx512_bf16="avx512_bf16" in flags,
        amx=any(f in flags for f in ("amx_tile", "amx_int8", "amx_bf16")),
    )


def _linux_flags(text: str) -> tuple[set[str], str]:
    flags: set[str] = set()
    model = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features") and not flags:
            flags = set(value.lower().split())
        elif key == "model name" and not model:
            model = value.strip()
    return flags, model


def _mac_flags() -> tuple[set[str], str]:
    def sysctl(name: str) -> str:
        try:
            return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True,
                                  timeout=5, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    words = " ".join(sysctl(n) for n in ("machdep.cpu.features", "machdep.cpu.leaf7_features"))
    flags = {w.lower().replace(".", "_") for w in words.split()}
    return flags, sysctl("machdep.cpu.brand_string") or platform.processor()


def available_cpus() -> int:
    """Cores this process may run on (its affinity), not the machine's total."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@lru_cache(maxsize=1)
def cpu_features() -> CpuFeatures:
    """This machine's CPU features (read once per process).

    ``VERACITY_CPU_FLAGS`` (space-separated flag names) replaces what the CPU reports: it lets a
    test or a user see what veracity would do on another CPU.
    """
    cores = available_cpus()
    forced = os.environ.get("VERACITY_CPU_FLAGS")
    if forced is not None:
        return parse_flags(set(forced.lower().split()), "VERACITY_CPU_FLAGS", cores)
    if CPUINFO.is_file():
        try:
            flags, model = _linux_flags(CPUINFO.read_text(errors="replace"))
        except OSError:
            flags, model = set(), ""
    elif platform.system() == "Darwin":
        flags, model = _mac_flags()
    else:
        flags, model = set(), ""
    return parse_flags(flags, model or platform.processor() or platform.machine(), cores)
