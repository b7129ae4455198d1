"""llama-cpp-python's OpenAI-compatible server with the model loaded as veracity loads it.

``python -m llama_cpp.server`` loads its GGUF with llama.cpp's extra buffer types, whose first
decode segfaults on CPUs with AMX (:mod:`veracity.backends.llamacpp_load`). This module runs
that same server, taking the same arguments, with the buffers off where the CPU reports AMX
(``VERACITY_CPU_FLAGS`` overrides what it reports) and untouched elsewhere::

    python -m veracity.backends.llamacpp_server --model FILE.gguf --model_alias local --port 8080
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from veracity.backends.llamacpp_load import (
    can_turn_off_extra_buffers,
    model_params_without_extra_buffers,
    use_extra_buffers,
)
from veracity.cpu import cpu_features


def main() -> None:
    # the server's own entry point (llama-cpp-python's [server] extra), untyped
    serve: Callable[[], None] = importlib.import_module("llama_cpp.server.__main__").main
    if use_extra_buffers("auto", cpu_features()):
        serve()
        return
    if not can_turn_off_extra_buffers():
        sys.exit("this llama-cpp-python cannot load a model without extra buffer types (needed "
                 "on CPUs with AMX, where they crash): pip install -U llama-cpp-python")
    with model_params_without_extra_buffers():  # for the server's whole life: its one model
        serve()


if __name__ == "__main__":
    main()
