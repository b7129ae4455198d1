"""veracity: measure how far a large language model's answers can be trusted.

Importing this package loads no torch, llama_cpp or transformers; backends load on use.
"""

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

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "CapabilityError",
    "ConfigError",
    "DataError",
    "GenRequest",
    "Generation",
    "Item",
    "MCItem",
    "Message",
    "Sampling",
    "TrustScore",
    "Truster",
    "VeracityError",
    "gamma",
    "gamma_from_embeddings",
    "load_embedder",
    "load_model",
    "read_calibration",
    "score_gamma",
    "trust",
]
