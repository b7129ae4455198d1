"""How a benchmark runs: its settings (recorded in run.json and benchmark.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.labels import LabelSource
from veracity.types import Sampling


@dataclass(frozen=True)
class BenchmarkSettings:
    """How the benchmark runs; every field is recorded in benchmark.json."""

    budget: int = 11
    """K model calls per question, the shared greedy answer included."""
    labels: tuple[str, ...] = ("contains",)
    methods: tuple[str, ...] = ()
    """Methods to run (empty = every method that declares a signal)."""
    temperature: float = 0.7
    max_tokens: int = 64
    seed: int = 0
    folds: int = 5
    resamples: int = 2000
    level: float = 0.95
    entailment: str | None = None
    references: tuple[str, ...] = ()
    """Reference model specs of FEWL (none: FEWL is left out)."""

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ConfigError("--budget must be at least 1 (the greedy answer)")
        if not self.labels:
            raise ConfigError("give at least one label source (--labels)")
        for text in self.labels:
            LabelSource.parse(text)
        if self.folds < 2:
            raise ConfigError("--folds must be at least 2")

    @property
    def sampling(self) -> Sampling:
        """The greedy answers' decoding: a γ run's centre answers use the same (cache hits)."""
        return Sampling(temperature=0.0, max_tokens=self.max_tokens)

    def describe(self) -> JsonObject:
        """As benchmark.json and run.json record them."""
        return asdict(self) | {name: list(getattr(self, name))
                               for name in ("labels", "methods", "references")}
