"""What verifying a draft costs on this machine: one llama.cpp pass over b tokens, against b.

Draft-verified decoding (``decode=draft``) pays off only when a token checked inside a batch
costs much less than a token decoded on its own. This times, on the bundled model after a
60-token prompt, a pass over b tokens (all logits wanted, as verification needs) for b = 1,
2, 4, 8, 16, 32, with llama.cpp's standard attention and with flash attention (the kernel
that makes batched verification exact, see ``veracity.backends.llamacpp_exact``), the two
models loaded side by side and timed in turns. Prints milliseconds per pass and the cost of
each row as a share of a one-token pass; the last line, the ratio judged, is flash's row
cost at b = 8: accepted draft tokens pay for their rows only when more than that share of
the proposed ones is accepted, and the best speed-up verification can give is its inverse.

    python bench/verify_cost.py [--repeats 9] [--threads N]
    python bench/verify_cost.py --smoke     # 3 repeats, b up to 8 (CI)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from veracity.backends.llamacpp import bundled_gguf_path
from veracity.backends.llamacpp_load import new_llama

PROMPT = ("Answer the question in one or two sentences. Which planet is the largest in the "
          "solar system, and how many moons does it have according to the latest counts? "
          "Say how the count was made and why it keeps changing over the years. Then name the "
          "planet with the most moons known today, the spacecraft that first visited both "
          "planets, and the year each visit took place, with one sentence on what it found.")
PREFIX = 60


def pass_ms(llm: Any, tokens: list[int], rows: int) -> float:
    """One pass over ``rows`` tokens after the prompt (then dropped from the KV cache)."""
    llm._batch.set_batch(batch=tokens[:rows], n_past=PREFIX, logits_all=True)
    began = time.perf_counter()
    llm._ctx.decode(llm._batch)
    took = time.perf_counter() - began
    if not llm._ctx.kv_cache_seq_rm(-1, PREFIX, -1):
        raise RuntimeError("could not drop the timed tokens from the KV cache")
    return 1000 * took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), same code path")
    args = parser.parse_args()
    sizes = [1, 2, 4, 8] if args.smoke else [1, 2, 4, 8, 16, 32]
    repeats = 3 if args.smoke else args.repeats
    path = str(bundled_gguf_path())
    models = {name: new_llama(path, False, n_ctx=1024, n_threads=args.threads,
                              n_threads_batch=args.threads, n_batch=64, n_ubatch=64,
                              flash_attn=name == "flash", verbose=False)
              for name in ("standard", "flash")}
    tokens = list(models["flash"].tokenize(PROMPT.encode(), add_bos=True))
    tokens += tokens[1:] * (1 + (PREFIX + max(sizes)) // len(tokens))  # the text again
    for llm in models.values():
        llm._batch.set_batch(batch=tokens[:PREFIX], n_past=0, logits_all=False)
        llm._ctx.decode(llm._batch)
        pass_ms(llm, tokens[PREFIX:], 1)  # warm
    timed: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):  # in turns, so both see the same machine
        for rows in sizes:
            for name, llm in models.items():
                timed.setdefault((name, rows), []).append(pass_ms(llm, tokens[PREFIX:], rows))
    print(f"threads: {args.threads}, prompt: {PREFIX} tokens, median of {repeats} passes")
    cost: dict[str, dict[int, float]] = {}
    for name in models:
        one = statistics.median(timed[(name, 1)])
        for rows in sizes:
            ms = statistics.median(timed[(name, rows)])
            share = ms / rows / one
            cost.setdefault(name, {})[rows] = share
            print(f"{name}_pass_{rows}_tokens: {ms:.1f} ms ({share:.2f} of a one-token pass per row)")
    for rows in sizes:
        ratio = statistics.median(timed[("flash", rows)]) / statistics.median(timed[("standard", rows)])
        print(f"flash_over_standard_pass_{rows}_tokens: {ratio:.2f} x (time)")
    print(f"flash_row_cost_at_8_tokens: {cost['flash'][8]:.2f} share")
    for llm in models.values():
        llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
