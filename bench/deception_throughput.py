"""Deception benchmarking throughput: veracity vs a naive llama-cpp-python loop.

Both answer the same items (normal + misleading) on the bundled SmolLM2 with greedy decoding
and the same rendered prompts. veracity goes through LLMClient without a cache, so it
measures generation; it sends the prompts in one batch, so llama.cpp reuses the KV cache of
the shared prefix (instruction + 1-shot example, and the question itself between the normal
and misleading variant). The naive loop resets llama.cpp's state before every prompt.

Both split prompts into the same ``n_batch`` chunks (float rounding depends on the split) and
veracity reuses prefixes in whole chunks only, so greedy predictions must agree exactly; any
disagreement is listed and makes the bench fail.

    python bench/deception_throughput.py [--items 20] [--max-tokens 64] [--dataset DIR]
    python bench/deception_throughput.py --smoke     # 2 items, 16 tokens (CI)

Without the DB-MMLU folder beside the checkout, a 4-item fixture from tests/ is used.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from veracity.backends.llamacpp import LlamaCppBackend, bundled_gguf_path
from veracity.client import LLMClient
from veracity.data.mc import load_db_mmlu
from veracity.methods.deception.core import (
    CATEGORIES,
    DeceptionSettings,
    answer_items,
    build_request,
    parse_response,
)
from veracity.types import MCItem, Sampling

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "db-mmlu" / "DB-MMLU Dataset"
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "db-mmlu-smoke"
SUBJECTS = ("marketing", "high_school_geography", "nutrition", "sociology")


def pick_items(directory: Path, n: int) -> list[MCItem]:
    """n items spread over a few subjects (round robin), those of SUBJECTS the folder has."""
    subjects = [s for s in SUBJECTS if (directory / f"{s}.csv").is_file()] or list(SUBJECTS)
    per = -(-n // len(subjects))
    pools = [load_db_mmlu(directory, [s], per) for s in subjects]
    spread = [pool[k] for k in range(per) for pool in pools if k < len(pool)]
    return spread[:n]


def run_veracity(backend: LlamaCppBackend, items: list[MCItem], sampling: Sampling
                 ) -> tuple[float, int, list[str]]:
    client = LLMClient(backend, cache=None)
    started = time.perf_counter()
    records = answer_items(items, client, DeceptionSettings(sampling=sampling, retries=0))
    seconds = time.perf_counter() - started
    answers = [getattr(r, c).answer for r in records for c in CATEGORIES]
    return seconds, client.stats.completion_tokens, answers


def run_naive(backend: LlamaCppBackend, items: list[MCItem], sampling: Sampling, threads: int
              ) -> tuple[float, int, list[str]]:
    from veracity.backends.llamacpp_load import safe_llama

    llm = safe_llama(str(bundled_gguf_path()), n_ctx=4096, n_threads=threads,
                n_batch=backend.n_batch, verbose=False)
    eos = llm.detokenize([llm.token_eos()], special=True).decode("utf-8", "replace")
    requests = [build_request(item, c, sampling) for item in items for c in CATEGORIES]
    prompts = [backend.render(r.messages, r.prefill) for r in requests]
    tokens, answers = 0, []
    started = time.perf_counter()
    for request, prompt in zip(requests, prompts, strict=True):
        llm.reset()  # type: ignore[no-untyped-call]  # fresh state: no prefix reused
        out = llm.create_completion(prompt=prompt, max_tokens=sampling.max_tokens, temperature=0.0,
                                    top_p=sampling.top_p, top_k=sampling.top_k, min_p=0.0,
                                    repeat_penalty=sampling.repeat_penalty, seed=sampling.seed,
                                    stop=[eos])
        tokens += int(out["usage"]["completion_tokens"])  # type: ignore[index]
        text = out["choices"][0]["text"]  # type: ignore[index]
        answers.append(parse_response(request.prefill, text).answer)
    seconds = time.perf_counter() - started
    llm.close()
    return seconds, tokens, answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATA,
                        help="DB-MMLU directory (<subject>.csv files)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), same code path")
    args = parser.parse_args()
    if args.smoke:
        args.items, args.max_tokens = 2, 16
    dataset = args.dataset if args.dataset.is_dir() else FIXTURE
    items = pick_items(dataset, args.items)
    sampling = Sampling(temperature=0.0, max_tokens=args.max_tokens)
    backend = LlamaCppBackend(bundled_gguf_path(), "llamacpp/default", n_threads=args.threads)
    try:
        v_seconds, v_tokens, v_answers = run_veracity(backend, items, sampling)
        n_seconds, n_tokens, n_answers = run_naive(backend, items, sampling, args.threads)
    finally:
        backend.close()
    n = len(items)
    differ = [k for k, (a, b) in enumerate(zip(v_answers, n_answers, strict=True)) if a != b]
    print(f"{n} items x 2 categories from {'the fixture' if dataset == FIXTURE else dataset.name}, "
          f"greedy, max_tokens {args.max_tokens}, {args.threads} thread(s), bundled SmolLM2-135M")
    for name, seconds, tokens in (("veracity", v_seconds, v_tokens), ("naive", n_seconds, n_tokens)):
        print(f"{name}_seconds: {seconds:.2f} s")
        print(f"{name}_items_per_s: {n / seconds:.3f} items/s")
        print(f"{name}_tokens: {tokens} tokens")
        print(f"{name}_tokens_per_s: {tokens / seconds:.1f} tokens/s")
    print(f"answers_parsed: {sum(a != '-' for a in v_answers)} answers")
    print(f"answers_total: {len(v_answers)} answers")
    print(f"predictions_differ: {len(differ)} answers")
    print(f"ratio_naive_time_over_veracity_time: {n_seconds / v_seconds:.2f} x")
    if differ:
        for k in differ[:10]:
            print(f"  {items[k // 2].id} {CATEGORIES[k % 2]}: veracity {v_answers[k]} "
                  f"naive {n_answers[k]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
