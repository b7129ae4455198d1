"""How many sequences ``hf/...`` decodes in one left-padded batch (``batch=auto|N``).

A γ group (the centre prompt and its N perturbations) or M samples of one prompt decode best
as one batch: on a GPU it is the only fast way, on a CPU one pass over the weights serves every
row. ``batch=auto`` takes up to ``AUTO_LIMIT`` rows (more on a GPU), fewer where the rows' KV
cache and activations would not fit in a share of the memory available at load; ``batch=1``
decodes one prompt at a time (sequential decoding, its own cache identity).

Padding changes the shapes of the matrix products, so a near-tied greedy choice can go the
other way in a batch than alone: ``bench/hf_gamma_batch.py`` measures how often answers and γ
differ from sequential decoding (:func:`agreement`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject

AUTO_LIMIT = 32
"""Rows per batch on a CPU with ``batch=auto``: past this a CPU gains little more."""
AUTO_LIMIT_GPU = 128
MEMORY_SHARE = 0.25
"""Share of the available memory a batch's KV cache and activations may take."""


def parse_batch(value: str | int | None) -> int | None:
    """``auto`` (None) or a number of rows at least 1.

    >>> parse_batch("auto"), parse_batch("4"), parse_batch(None)
    (None, 4, None)
    """
    if value is None or value == "auto":
        return None
    try:
        rows = int(value)
    except ValueError:
        raise ConfigError(f"batch={value}: give auto or a number of sequences >= 1") from None
    if rows < 1:
        raise ConfigError(f"batch={value}: give auto or a number of sequences >= 1")
    return rows


def available_memory(device: str, torch: Any) -> int:
    """Bytes free for a batch: the GPU's free memory, else the system's MemAvailable."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 30


def bytes_per_row(config: Any, dtype_bytes: int, width: int, new_tokens: int) -> int:
    """What one more row of a batch costs at most: its KV cache over the prompt and the new
    tokens, its float32 logits, and the prompt pass's widest activation (the MLP's).

    >>> from types import SimpleNamespace
    >>> c = SimpleNamespace(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    ...                     hidden_size=64, intermediate_size=128, vocab_size=1000)
    >>> bytes_per_row(c, 4, 10, 6)  # 2*2*2*16*16*4 + 1000*4*2 + 10*128*4*2
    26432
    """
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    heads = int(getattr(config, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    inner = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    kv = 2 * layers * kv_heads * head_dim * (width + new_tokens) * dtype_bytes
    return kv + vocab * 4 * 2 + width * inner * dtype_bytes * 2


def rows_that_fit(limit: int, per_row: int, budget: int) -> int:
    """Rows of ``per_row`` bytes within ``budget``, between 1 and ``limit``.

    >>> rows_that_fit(32, 1000, 10_500), rows_that_fit(32, 1000, 10**9), rows_that_fit(32, 10**9, 1)
    (10, 32, 1)
    """
    return max(1, min(limit, budget // max(per_row, 1)))


@dataclass
class BatchStats:
    """What the batched decoder did (``run.json`` → ``compute_path.batch``)."""

    setting: str
    limit: int
    memory_budget_bytes: int
    batches: int = 0
    rows: int = 0
    largest: int = 0
    tokens: int = 0
    """Prompt positions of every batch, padding included."""
    padding: int = 0
    """Of which padding."""

    def add(self, rows: int, width: int, prompt_tokens: int) -> None:
        self.batches += 1
        self.rows += rows
        self.largest = max(self.largest, rows)
        self.tokens += rows * width
        self.padding += rows * width - prompt_tokens

    def as_dict(self) -> JsonObject:
        out = asdict(self)
        out["padding_share"] = round(self.padding / self.tokens, 4) if self.tokens else 0.0
        return out


@dataclass(frozen=True)
class Agreement:
    """How often two decodings of the same prompts gave the same answer."""

    identical: int
    total: int

    @property
    def share(self) -> float:
        return self.identical / self.total if self.total else 1.0


def agreement(answers: Sequence[str], other: Sequence[str]) -> Agreement:
    """Identical answers between two decodings of the same prompts, in order.

    >>> a = agreement(["a", "b", "c"], ["a", "x", "c"])
    >>> a.identical, a.total, round(a.share, 3)
    (2, 3, 0.667)
    """
    if len(answers) != len(other):
        raise ConfigError(f"cannot compare {len(answers)} answers with {len(other)}")
    return Agreement(sum(x == y for x, y in zip(answers, other, strict=True)), len(answers))
