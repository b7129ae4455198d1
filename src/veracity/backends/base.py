"""The backend protocol every model implementation follows."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from veracity.errors import BackendError, CapabilityError
from veracity.jsontypes import JsonObject
from veracity.types import Generation, GenRequest

Outcome = Generation | BackendError
Finished = list[tuple[int, Outcome]]


class CutShort(KeyboardInterrupt):
    """Ctrl-C during :meth:`StreamingBackend.stream`, carrying the outcomes that had already
    finished but were not yet handed over, so the client can still cache them."""

    def __init__(self, finished: Finished) -> None:
        super().__init__()
        self.finished = finished
"""Outcomes that finished together, each with the index of its request."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; methods check these before they start."""

    prefill: bool = False
    """Can continue a partially written assistant turn."""
    seed: bool = False
    """Honours a sampling seed, so sampled outputs are reproducible."""
    inputs_embeds: bool = False
    """Can generate from perturbed input embeddings (white-box ball)."""
    max_concurrency: int = 1
    """How many requests it usefully runs at once."""
    batch: int = 1
    """Requests it decodes together: the client never hands it fewer at a time (when there
    are that many), so a slow batch is not cut into one-request calls."""
    logprobs: bool = False
    """Returns each generated token's log-probability and its top alternatives when a request
    asks (``GenRequest.logprobs``)."""


@runtime_checkable
class Backend(Protocol):
    """A model that turns a batch of requests into a batch of outcomes.

    ``generate`` never raises for a single failed request: it returns the error in that
    request's slot, so the client can keep (and cache) everything that did succeed.
    """

    spec: str
    capabilities: Capabilities

    def identity(self) -> JsonObject:
        """Everything besides the request that changes outputs (no secrets)."""
        ...

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        """Generate one outcome per request, in order."""
        ...

    def close(self) -> None:
        """Release resources (threads, sockets, model memory)."""
        ...


@runtime_checkable
class StreamingBackend(Backend, Protocol):
    """A backend that hands over each outcome as soon as it is ready (HTTP backends).

    The client caches each group at once, so an interrupted stage loses no answer it
    received. Backends without ``stream`` are called through ``generate`` in small chunks.
    """

    def stream(self, requests: Sequence[GenRequest], stop: threading.Event) -> Iterator[Finished]:
        """Yield the outcomes finished since the last yield (at least one each time), until
        every request is done. Once ``stop`` is set, requests not yet sent are dropped (never
        yielded) and the iterator ends when those in flight are done; closing the iterator
        abandons those in flight too. Ctrl-C inside the iterator (or thrown into it at a
        yield) is raised again as :class:`CutShort` with the outcomes finished by then."""
        ...


@runtime_checkable
class ComputeVaried(Protocol):
    """A backend that can compute the same request along other numerical paths.

    A compute variation changes how the model's arithmetic is carried out (batch composition,
    batch splits, thread counts, padding), never the prompt text or its tokens; the varied backend's
    ``identity()`` records it, so its outputs are cached apart from the default path's.
    """

    def compute_variations(self, n: int) -> list[dict[str, Any]]:
        """``n`` distinct variations, none of them the backend's own default path."""
        ...

    def varied(self, variation: dict[str, Any]) -> Backend:
        """This model computing with ``variation`` (close it after use)."""
        ...


def require(backend: Backend, capability: str, needed_for: str) -> None:
    """Fail at once, naming the capability, when a backend lacks it."""
    if not getattr(backend.capabilities, capability, False):
        raise CapabilityError(
            f"{needed_for} needs the '{capability}' capability, which backend "
            f"'{backend.spec}' does not have."
        )
