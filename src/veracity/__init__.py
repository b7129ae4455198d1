"""veracity: measure how far a large language model's answers can be trusted.

Importing this package loads no torch, llama_cpp or transformers; backends load on use.
"""

from typing import TYPE_CHECKING, Any

from veracity.errors import (
    BackendError,
    CapabilityError,
    ConfigError,
    DataError,
    VeracityError,
)
from veracity.methods.gamma.api import Truster, gamma, score_gamma, trust
from veracity.methods.gamma.calibration.core import read_calibration
from veracity.methods.gamma.calibration.trust import TrustScore
from veracity.methods.gamma.core import gamma_from_embeddings
from veracity.registry import load_embedder, load_model
from veracity.types import Generation, GenRequest, Item, MCItem, Message, Sampling

if TYPE_CHECKING:
    from veracity.methods.consistency.api import consistency
    from veracity.methods.deception.api import deception, score_deception
    from veracity.methods.deception.records import DeceptionRecord, DeceptionSummary
    from veracity.methods.fewl.api import fewl, score_fewl
    from veracity.methods.fewl.pairs import PairSettings
    from veracity.methods.fewl.records import FewlRecord, FewlSummary
    from veracity.methods.fewl.run import FewlSettings
    from veracity.methods.gamma.records import GammaRecord, GammaSummary
    from veracity.records import RecordError
    from veracity.runs.result import RunResult

__version__ = "0.1.0"

_GAMMA, _DECEPTION, _FEWL = (f"veracity.methods.{m}" for m in ("gamma", "deception", "fewl"))
_LAZY = {
    "GammaRecord": f"{_GAMMA}.records", "GammaSummary": f"{_GAMMA}.records",
    "DeceptionRecord": f"{_DECEPTION}.records", "DeceptionSummary": f"{_DECEPTION}.records",
    "FewlRecord": f"{_FEWL}.records", "FewlSummary": f"{_FEWL}.records",
    "FewlSettings": f"{_FEWL}.run", "PairSettings": f"{_FEWL}.pairs",
    "RecordError": "veracity.records", "RunResult": "veracity.runs.result",
}


def __getattr__(name: str) -> Any:
    """The record types load on first use, and each method's public functions (deception,
    fewl, consistency, ...) come from its spec (``api``), found in the method registry."""
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if not name.startswith("_"):
        from veracity.method import load_target, public_api

        target = public_api(name)
        if target is not None:
            return load_target(target)
    raise AttributeError(f"module 'veracity' has no attribute '{name}'")

__all__ = [
    "BackendError",
    "CapabilityError",
    "ConfigError",
    "DataError",
    "DeceptionRecord",
    "DeceptionSummary",
    "FewlRecord",
    "FewlSettings",
    "FewlSummary",
    "GammaRecord",
    "GammaSummary",
    "GenRequest",
    "Generation",
    "Item",
    "MCItem",
    "Message",
    "PairSettings",
    "RecordError",
    "RunResult",
    "Sampling",
    "TrustScore",
    "Truster",
    "VeracityError",
    "consistency",
    "deception",
    "fewl",
    "gamma",
    "gamma_from_embeddings",
    "length",
    "load_embedder",
    "load_model",
    "logprob",
    "p_true",
    "read_calibration",
    "score_deception",
    "score_fewl",
    "score_gamma",
    "semantic_entropy",
    "trust",
]
