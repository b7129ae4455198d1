"""Gamma throughput on the bundled model: veracity vs a naive Algorithm-1 loop.

N = 10 over the first 20 TruthfulQA questions, greedy, same max tokens. Prints prompts/s and
generated tokens/s for both, the ratio (veracity / naive), checks that the gamma values
agree, then reruns veracity on the same cache to show a finished run makes no model call.

Both use the same llama.cpp batch size (``n_batch``): how a prompt is split into batches
changes float rounding, so a different split could flip a greedy token on a near-tie. The
naive loop evaluates every prompt from an empty context; veracity reuses the prefix shared
with the previous prompt in whole ``n_batch`` chunks only, which splits every prompt exactly
as an empty context does, so the answers, and the gamma values, must agree exactly.

    python bench/gamma_throughput.py [--questions 20] [--n 10] [--max-tokens 64]
    python bench/gamma_throughput.py --smoke     # 2 questions, N 2, 8 tokens (CI)

Without the TruthfulQA file beside the checkout, the built-in questions are used.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import numpy as np

from veracity.backends.llamacpp import bundled_gguf_path
from veracity.cache import Cache
from veracity.client import CachedEmbedder, LLMClient
from veracity.data.qa import load_items
from veracity.methods.gamma import GammaSettings, gamma_from_embeddings, measure_gamma
from veracity.perturb import perturb
from veracity.registry import load_embedder, load_model
from veracity.types import Sampling

N_BATCH = 32
"""The bundled backend's default batch size: both sides split prompts the same way."""
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "truthfulqa" / "TruthfulQA.csv"


def naive_loop(questions: list[str], n: int, max_tokens: int, embedder: CachedEmbedder) -> tuple[
    list[float], list[str], float, int
]:
    """The paper's Algorithm 1 written directly against llama-cpp-python."""
    from llama_cpp.llama_types import CreateChatCompletionResponse

    from veracity.backends.llamacpp_load import safe_llama

    llm = safe_llama(str(bundled_gguf_path()), n_ctx=4096, n_threads=2,
                n_batch=N_BATCH, verbose=False)
    gammas, tokens, every_answer = [], 0, []
    began = time.perf_counter()
    for question in questions:
        answers = []
        for prompt in [question, *perturb(question, n)]:
            llm.reset()  # type: ignore[no-untyped-call]
            out = cast(CreateChatCompletionResponse, llm.create_chat_completion(  # not streamed
                messages=[{"role": "user", "content": prompt}],
                temperature=0.0, max_tokens=max_tokens, repeat_penalty=1.0,
            ))
            answers.append((out["choices"][0]["message"]["content"] or "").strip())
            tokens += out["usage"]["completion_tokens"]
        every_answer.extend(answers)
        vectors = embedder.embed(answers)
        gammas.append(gamma_from_embeddings(vectors[0], vectors[1:]))
    seconds = time.perf_counter() - began
    llm.close()
    return gammas, every_answer, seconds, tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), same code path")
    args = parser.parse_args()
    if args.smoke:
        args.questions, args.n, args.max_tokens = 2, 2, 8
    dataset = f"truthfulqa:{args.data}" if args.data.is_file() else "builtin"
    items = load_items(dataset, args.questions)
    prompts = len(items) * (args.n + 1)
    embedder = CachedEmbedder(load_embedder("st/default"))
    settings = GammaSettings(n=args.n, sampling=Sampling(temperature=0.0, max_tokens=args.max_tokens))

    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(Path(tmp) / "cache.sqlite")
        client = LLMClient(load_model("llamacpp/default", n_threads=2), cache)
        began = time.perf_counter()
        records = measure_gamma(items, client, embedder, settings)
        ours = time.perf_counter() - began
        our_tokens = client.stats.completion_tokens
        client.close()

        naive_gammas, naive_answers, naive_seconds, naive_tokens = naive_loop(
            [i.question for i in items], args.n, args.max_tokens, embedder
        )

        rerun_client = LLMClient(load_model("llamacpp/default", n_threads=2), cache)
        began = time.perf_counter()
        rerun = measure_gamma(items, rerun_client, embedder, settings)
        rerun_seconds = time.perf_counter() - began
        rerun_calls = rerun_client.stats.model_calls
        rerun_client.close()
        cache.close()

    our_gammas = np.array([r["gamma"] for r in records], dtype=float)
    agree = np.allclose(our_gammas, np.array(naive_gammas), atol=1e-6)
    diff = float(np.nanmax(np.abs(our_gammas - np.array(naive_gammas))))
    our_answers = [a for r in records for a in [r["answer"], *r["perturbed_answers"]]]
    same = sum(a == b for a, b in zip(our_answers, naive_answers, strict=True))
    distinct = len({p for r in records for p in [r["prompt"], *r["perturbed_prompts"]]})
    same_rerun = [r["gamma"] for r in rerun] == [r["gamma"] for r in records]
    print(f"dataset {dataset.partition(':')[0]}, questions {len(items)}, N {args.n}, "
          f"prompts {prompts}, max tokens {args.max_tokens}")
    print(f"gamma values agree: {agree}; rerun gives the same gammas: {same_rerun}; "
          f"{prompts - distinct} repeated prompt(s) sent once by veracity")
    print(f"veracity_seconds: {ours:.2f} s")
    print(f"veracity_prompts_per_s: {prompts / ours:.2f} prompts/s")
    print(f"veracity_tokens_per_s: {our_tokens / ours:.1f} tokens/s")
    print(f"naive_seconds: {naive_seconds:.2f} s")
    print(f"naive_prompts_per_s: {prompts / naive_seconds:.2f} prompts/s")
    print(f"naive_tokens_per_s: {naive_tokens / naive_seconds:.1f} tokens/s")
    print(f"gamma_max_abs_diff: {diff:.2e} gamma")
    print(f"mean_gamma: {our_gammas.mean():.4f} gamma")
    print(f"answers_compared: {len(our_answers)} answers")
    print(f"answers_identical: {same} answers")
    print(f"rerun_model_calls: {rerun_calls} calls")
    print(f"rerun_seconds: {rerun_seconds:.2f} s")
    print(f"ratio_veracity_over_naive_prompts_per_s: {naive_seconds / ours:.2f} x")
    return 0 if agree and rerun_calls == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
