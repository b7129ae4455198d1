"""veracity: measure how far a large language model's answers can be trusted.

Importing this package loads no torch, llama_cpp or transformers; backends load on use.
"""

from typing import TYPE_CHECKING, Any

from veracity.api import Truster, gamma, score_gamma, trust
from veracity.errors import (
    BackendError,
    CapabilityError,
    ConfigError,
    DataError,
    VeracityError,
)
from veracity.methods.calibration import read_calibration
from veracity.methods.gamma import gamma_from_embeddings
from veracity.methods.trust import TrustScore
from veracity.registry import load_embedder, load_model
from veracity.types import Generation, GenRequest, Item, MCItem, Message, Sampling

if TYPE_CHECKING:
    from veracity.api_deception import deception, score_deception
    from veracity.api_fewl import fewl, score_fewl
    from veracity.methods.fewl_pairs import PairSettings
    from veracity.records import DeceptionRecord, FewlRecord, GammaRecord, RecordError
    from veracity.runs.fewl import FewlSettings
    from veracity.runs.result import RunResult
    from veracity.summaries import DeceptionSummary, FewlSummary, GammaSummary

__version__ = "0.1.0"

_LAZY = {
    "deception": "veracity.api_deception", "score_deception": "veracity.api_deception",
    "fewl": "veracity.api_fewl", "score_fewl": "veracity.api_fewl",
    "GammaRecord": "veracity.records", "DeceptionRecord": "veracity.records",
    "FewlRecord": "veracity.records", "RecordError": "veracity.records",
    "RunResult": "veracity.runs.result",
    "FewlSettings": "veracity.runs.fewl", "PairSettings": "veracity.methods.fewl_pairs",
    "GammaSummary": "veracity.summaries", "DeceptionSummary": "veracity.summaries",
    "FewlSummary": "veracity.summaries",
}


def __getattr__(name: str) -> Any:
    """Deception, FEWL and the record types load on first use (their datasets and runs)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
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
    "deception",
    "fewl",
    "gamma",
    "gamma_from_embeddings",
    "load_embedder",
    "load_model",
    "read_calibration",
    "score_deception",
    "score_fewl",
    "score_gamma",
    "trust",
]
