"""Loading a GGUF into llama.cpp in a way that runs on every CPU.

llama.cpp moves quantised weights into "extra buffer types" to repack them for a faster
kernel. On Intel CPUs with AMX (Sapphire Rapids and newer) that buffer is the AMX one, and the
first decode segfaults inside its matrix multiply (Q4_1/Q8_0 weights, upstream bug without a
fix). Loading with ``use_extra_bufts = False`` avoids it. ``extra_buffers=auto`` turns them off
where the CPU reports AMX and keeps llama.cpp's default elsewhere, so answers on other CPUs stay
bit-identical to what they always were.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from veracity.cpu import CpuFeatures, cpu_features
from veracity.errors import ConfigError

if TYPE_CHECKING:
    from llama_cpp import Llama

EXTRA_BUFFERS = ("auto", "on", "off")
_PATCH_LOCK = threading.RLock()


def use_extra_buffers(setting: str, features: CpuFeatures) -> bool:
    """Whether llama.cpp may repack weights into extra buffer types.

    >>> amx = CpuFeatures("xeon", 2, True, True, True, True)
    >>> use_extra_buffers("auto", amx), use_extra_buffers("on", amx)
    (False, True)
    >>> use_extra_buffers("auto", CpuFeatures("epyc", 2, True, False, False, False))
    True
    """
    if setting not in EXTRA_BUFFERS:
        raise ConfigError(f"extra_buffers={setting}: choose one of {', '.join(EXTRA_BUFFERS)}")
    if setting == "auto":
        return not features.amx
    return setting == "on"


def can_turn_off_extra_buffers() -> bool:
    """Whether this llama-cpp-python's model parameters have ``use_extra_bufts``."""
    import llama_cpp

    return hasattr(llama_cpp.llama_model_default_params(), "use_extra_bufts")


@contextmanager
def model_params_without_extra_buffers() -> Iterator[None]:
    """While active, llama-cpp-python builds its model parameters with extra buffers off.

    ``Llama(...)`` has no argument for the field, but it starts from
    ``llama_model_default_params()``: that function is wrapped for the duration of the load
    (under a lock, so two threads loading models never see each other's wrapper).
    """
    lib: Any = importlib.import_module("llama_cpp.llama_cpp")  # the module llama.py calls
    original = lib.llama_model_default_params

    def without_extra() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    with _PATCH_LOCK:
        lib.llama_model_default_params = without_extra
        try:
            yield
        finally:
            lib.llama_model_default_params = original


def new_llama(model_path: str, extra_buffers: bool, **kwargs: Any) -> Llama:
    """``llama_cpp.Llama(model_path, **kwargs)``, with extra buffer types off unless allowed."""
    from llama_cpp import Llama

    if extra_buffers:
        with _PATCH_LOCK:  # never while another thread's load has the wrapper in place
            return Llama(model_path=model_path, **kwargs)
    if not can_turn_off_extra_buffers():
        raise ConfigError(
            "this llama-cpp-python cannot load a model without extra buffer types (needed on "
            "CPUs with AMX, where they crash): pip install -U llama-cpp-python, or "
            "--model-option extra_buffers=on to try anyway")
    with model_params_without_extra_buffers():
        return Llama(model_path=model_path, **kwargs)


def system_info() -> dict[str, str]:
    """llama.cpp's own report of the CPU features it was built for (``AVX2 = 1`` ...)."""
    import llama_cpp

    text = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    info: dict[str, str] = {}
    for part in text.replace("|", "\n").splitlines():
        key, sep, value = part.partition("=")
        key = key.rpartition(":")[2].strip()  # "CPU : SSE3 = 1": the backend's name comes first
        if sep and key:
            info[key] = value.strip()
    return info


def compute_path(setting: str, extra_buffers: bool) -> dict[str, Any]:
    """What a γ computed on this model can be traced to: CPU features and buffer types."""
    info = system_info()
    built = sorted(k for k, v in info.items() if v == "1" and k.isupper())
    return {
        "cpu": cpu_features().as_dict(),
        "extra_buffers": "on" if extra_buffers else "off",
        "extra_buffers_setting": setting,
        "llama_cpp_features": built,
    }


def safe_llama(model_path: str, **kwargs: Any) -> Llama:
    """``llama_cpp.Llama`` as the backend loads it by default (``extra_buffers=auto``): for
    code that drives llama-cpp-python directly, such as the benches' naive baselines."""
    return new_llama(model_path, use_extra_buffers("auto", cpu_features()), **kwargs)
