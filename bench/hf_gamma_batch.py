"""γ through ``hf/default`` (the bundled SmolLM2 in transformers): batched against sequential.

The same built-in questions, N perturbations, greedy, same max tokens, each side on a fresh
cache: ``batch=auto`` (the default: each chunk of prompts, the centre and its perturbations
together, decoded as left-padded batches bounded by memory) and one prompt at a time (the same
loaded model with ``batch_size=1``, what ``--model-option batch=1`` gives). Printed: wall time
and prompts/s of each, the ratio (batched / sequential, the judged figure), the share of
answers identical between the two (padding can move a near-tied greedy choice), the mean and
max |Δγ|, the batches the batched side ran, and the load average.

    python bench/hf_gamma_batch.py [--questions 8] [--n 10] [--max-tokens 32] [--threads 2]
    python bench/hf_gamma_batch.py --smoke     # 2 questions, N 2, 8 tokens (CI)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from veracity.backends.hf_batch import agreement
from veracity.cache import Cache
from veracity.client import CachedEmbedder, LLMClient
from veracity.data.qa import load_items
from veracity.methods.gamma.core import GammaSettings, measure_gamma
from veracity.methods.gamma.records import GammaRecord
from veracity.registry import load_embedder, load_model
from veracity.types import Item, Sampling


def timed_gamma(backend: Any, items: list[Item], settings: GammaSettings,
                embedder: CachedEmbedder) -> tuple[list[GammaRecord], float]:
    """γ of every item on a fresh cache, and its wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(Path(tmp) / "cache.sqlite")
        client = LLMClient(backend, cache)
        began = time.perf_counter()
        records = measure_gamma(items, client, embedder, settings)
        seconds = time.perf_counter() - began
        cache.close()
    return records, seconds


def answers(records: list[GammaRecord]) -> list[str]:
    return [a for r in records for a in [r.answer, *r.perturbed_answers]]


def gammas(records: list[GammaRecord]) -> np.ndarray:
    return np.array([np.nan if r.gamma is None else r.gamma for r in records])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, same code path")
    args = parser.parse_args()
    if args.smoke:
        args.questions, args.n, args.max_tokens = 2, 2, 8
    items = load_items("builtin", args.questions)
    settings = GammaSettings(n=args.n, sampling=Sampling(temperature=0.0, max_tokens=args.max_tokens))
    prompts = len(items) * (args.n + 1)
    embedder = load_embedder("st/default")
    began = time.perf_counter()
    batched_backend: Any = load_model("hf/default", threads=args.threads)
    print(f"loaded hf/default in {time.perf_counter() - began:.1f} s, torch threads "
          f"{args.threads}, batch=auto: up to {batched_backend.batch_size} rows, memory budget "
          f"{batched_backend.batch_stats.memory_budget_bytes / 1e9:.2f} GB", flush=True)
    sequential_backend = batched_backend.varied({"batch_size": 1, "extra_padding": 0})
    load = os.getloadavg()
    # sequential first, then batched: each with its own embedding memo and a fresh cache
    alone, alone_seconds = timed_gamma(sequential_backend, items, settings, CachedEmbedder(embedder))
    together, together_seconds = timed_gamma(batched_backend, items, settings,
                                             CachedEmbedder(embedder))
    load_after = os.getloadavg()
    batch = batched_backend.compute_path()["batch"]
    same = agreement(answers(together), answers(alone))
    moved = np.abs(gammas(together) - gammas(alone))
    ratio = alone_seconds / together_seconds
    print(f"questions {len(items)}, N {args.n}, prompts {prompts}, max tokens {args.max_tokens}")
    print(f"load average (1, 5, 15 min) before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(f"hf_sequential_seconds: {alone_seconds:.2f} s ({prompts / alone_seconds:.2f} prompts/s)")
    print(f"hf_batched_seconds: {together_seconds:.2f} s ({prompts / together_seconds:.2f} prompts/s)")
    print(f"hf_batches: {batch['batches']} batches of {batch['rows']} prompts, largest "
          f"{batch['largest']}, padding {batch['padding_share']:.1%} of prompt positions")
    print(f"hf_answers_identical: {same.share:.4f} share ({same.identical}/{same.total})")
    print(f"hf_mean_abs_gamma_change: {float(np.nanmean(moved)):.2e} gamma")
    print(f"hf_max_abs_gamma_change: {float(np.nanmax(moved)):.2e} gamma")
    print(f"\n| | sequential (batch=1) | batched (batch=auto) |\n|---|---|---|\n"
          f"| wall time | {alone_seconds:.1f} s | {together_seconds:.1f} s |\n"
          f"| prompts/s | {prompts / alone_seconds:.2f} | {prompts / together_seconds:.2f} |\n"
          f"| answers identical to sequential | – | {same.identical} of {same.total} |\n"
          f"| max abs γ change | – | {float(np.nanmax(moved)):.4f} |")
    print(f"ratio_batched_over_sequential: {ratio:.2f} x")
    batched_backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
