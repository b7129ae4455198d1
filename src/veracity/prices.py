"""What tokens cost: a prices file (``--prices FILE``) and the money a number of tokens costs.

The file is TOML, in US dollars per million tokens, per model name (as requests name it, or
a model spec offline), with an optional default::

    [default]
    input = 0.15      # per million prompt tokens
    output = 0.60     # per million completion tokens

    [models."gpt-4o-mini"]
    input = 0.15
    output = 0.60
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from veracity.errors import ConfigError


@dataclass(frozen=True)
class Price:
    input: float
    """USD per million prompt tokens."""
    output: float
    """USD per million completion tokens."""

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1e6


@dataclass(frozen=True)
class Prices:
    models: Mapping[str, Price] = field(default_factory=dict)
    default: Price | None = None
    source: str = ""

    def price(self, model: str) -> Price | None:
        return self.models.get(model, self.default)

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """USD, or None when the file prices neither this model nor a default."""
        found = self.price(model)
        return None if found is None else found.cost(prompt_tokens, completion_tokens)


def _price(table: Any, where: str) -> Price:
    if not isinstance(table, dict) or set(table) - {"input", "output"} or not table:
        raise ConfigError(f"{where}: expected a table with input and output (USD per million tokens)")
    values = []
    for key in ("input", "output"):
        value = table.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                or not math.isfinite(value):
            raise ConfigError(f"{where}: '{key}' must be a non-negative number, got {value!r}")
        values.append(float(value))
    return Price(*values)


def read_prices(path: Path | str) -> Prices:
    """A prices file; a ConfigError naming the file and the problem."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read prices {file}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"prices {file} is not valid TOML: {exc}") from None
    unknown = set(data) - {"default", "models"}
    if unknown:
        raise ConfigError(f"prices {file}: unknown tables {', '.join(sorted(unknown))}; known: "
                          "default, models")
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError(f"prices {file}: [models] must be a table of model names")
    default = None if "default" not in data else _price(data["default"], f"prices {file} [default]")
    return Prices({str(k): _price(v, f"prices {file} [models.\"{k}\"]") for k, v in models.items()},
                  default, str(file))
