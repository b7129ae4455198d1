"""Where a run's requests execute: in this process (the default) or on Ray actors.

This module only parses the choice; ``veracity.executors.ray_actors`` is the one module
of veracity that imports ray, and it is imported only when Ray is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.registry import is_remote

LOCAL = "local"


@dataclass(frozen=True)
class RaySettings:
    """How models (and optionally embedders) run on a Ray cluster."""

    address: str | None = None
    """``None`` starts a local Ray; ``auto``, ``HOST:PORT`` or ``ray://HOST:10001`` joins a cluster."""
    actors: int = 2
    """Actors per model; each loads the model once."""
    num_cpus: float = 1.0
    """CPUs each actor reserves (also the threads an in-process model uses)."""
    num_gpus: float = 0.0
    """GPUs each actor reserves."""
    batch_size: int = 8
    """Requests sent to an actor at once."""
    embeddings: bool = False
    """Embed on actors too (each loads the embedder once)."""

    def __post_init__(self) -> None:
        if self.actors < 1:
            raise ConfigError(f"--actors must be at least 1, got {self.actors}")
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ConfigError("actor CPUs and GPUs must not be negative")
        if self.batch_size < 1:
            raise ConfigError(f"the actor batch size must be at least 1, got {self.batch_size}")

    def describe(self) -> JsonObject:
        """For run.json: where and how requests ran (never a credential: Ray addresses have none)."""
        return {"executor": "ray", "address": self.address or "local", "actors": self.actors,
                "num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "batch_size": self.batch_size,
                "embeddings": self.embeddings}


def parse_executor(
    executor: str | None,
    ray_address: str | None = None,
    actors: int = 2,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    batch_size: int = 8,
    embeddings: bool = False,
) -> RaySettings | None:
    """``local`` (or nothing) -> None; ``ray`` or ``ray://ADDRESS`` -> RaySettings."""
    name = (executor or ("ray" if ray_address else LOCAL)).strip()
    if name == LOCAL:
        if ray_address or embeddings:
            raise ConfigError("--ray-address and --ray-embeddings need --executor ray")
        return None
    if name == "ray":
        address = ray_address
    elif name.startswith("ray://"):
        if ray_address and ray_address != name:
            raise ConfigError(f"--executor {name} and --ray-address {ray_address} disagree")
        address = name
    else:
        raise ConfigError(f"unknown executor '{name}': use local, ray or ray://HOST:PORT")
    return RaySettings(address, actors, num_cpus, num_gpus, batch_size, embeddings)


def runs_on_ray(spec: str, what: str = "model") -> bool:
    """Models that run in a process (llamacpp, hf, fake, plugins) go to actors; those whose
    provider is declared remote (``openai/...``) already run elsewhere and stay with the driver."""
    return not is_remote(spec, what)
