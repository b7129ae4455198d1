"""Gamma throughput on the bundled model: veracity vs a naive Algorithm-1 loop.

N = 10 over the first 20 built-in questions and (when the file is there) the first 20 TruthfulQA
questions, greedy, same max tokens. Prints prompts/s and generated tokens/s of veracity's
default path (``attention=auto``: flash attention where the load-time probe finds it
batch-invariant and a timing finds it no slower; ``decode=auto``: a call's greedy requests decoded
together where the kernel is batch-invariant; what each chose is printed) and of the
naive loop, the ratio (default / naive, the judged figure), then reruns the default on the same
cache to show a finished run makes no model call. ``attention=standard`` (sequential) must give
the naive loop's answers and γ exactly (the same kernel), and the default's answers are compared
with ``attention=flash`` sequential decoding. Then ``decode=batch`` (flash attention, a call's
greedy requests decoded together): its speed and its answers against flash sequential decoding.
Then (unless ``--no-draft``) the draft path (``decode=draft``, flash attention: perturbed
answers verified against the centre answer): its speed, the share of perturbed answers identical
to sequential decoding with the same kernel and with standard attention, how γ moved, the share
of draft tokens accepted, and the draft's ratio to the naive loop on the items whose perturbed
answers all equal the centre one.

Both use the same llama.cpp batch size (``n_batch``): how a prompt is split into batches
changes float rounding, so a different split could flip a greedy token on a near-tie. The
naive loop evaluates every prompt from an empty context; veracity reuses the prefix shared
with the previous prompt in whole ``n_batch`` chunks only, which splits every prompt exactly
as an empty context does, so the answers, and the gamma values, must agree exactly.

    python bench/gamma_throughput.py [--questions 20] [--n 10] [--max-tokens 64] [--no-draft]
    python bench/gamma_throughput.py --smoke     # 2 questions, N 2, 8 tokens (CI)

Without the TruthfulQA file beside the checkout, the built-in questions are used.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

from veracity.backends.llamacpp import bundled_gguf_path
from veracity.backends.llamacpp_draft import DraftStats
from veracity.cache import Cache
from veracity.client import CachedEmbedder, LLMClient
from veracity.data.qa import load_items
from veracity.methods.gamma.core import GammaSettings, gamma_from_embeddings, measure_gamma
from veracity.methods.gamma.records import GammaRecord
from veracity.perturb import perturb
from veracity.registry import load_embedder, load_model
from veracity.types import Item, Sampling

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
    embedder = CachedEmbedder(embedder.embedder)  # a fresh in-process memo, as for every path
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


def veracity_run(items: list[Item], settings: GammaSettings, embedder: CachedEmbedder,
                 **options: str) -> tuple[list[GammaRecord], float, int, DraftStats]:
    """γ through veracity on the bundled model with these model options, on a fresh cache."""
    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(Path(tmp) / "cache.sqlite")
        records, seconds, tokens, stats, _ = cached_run(items, settings, embedder, cache, **options)
        cache.close()
    return records, seconds, tokens, stats


def cached_run(items: list[Item], settings: GammaSettings, embedder: CachedEmbedder, cache: Cache,
               **options: str) -> tuple[list[GammaRecord], float, int, DraftStats, Any]:
    """γ through veracity on ``cache``: records, seconds, tokens, draft counts, and the model's
    compute path (which attention kernel ran and why) and model calls."""
    client = LLMClient(load_model("llamacpp/default", n_threads=2, **options), cache)
    # a fresh in-process memo: otherwise a later path reuses the vectors of every answer it
    # shares with an earlier one and is timed without embedding them
    embedder = CachedEmbedder(embedder.embedder)
    began = time.perf_counter()
    records = measure_gamma(items, client, embedder, settings)
    seconds = time.perf_counter() - began
    backend = cast(Any, client.backend)
    path = backend.compute_path() | {"model_calls": client.stats.model_calls}
    tokens, stats = client.stats.completion_tokens, backend.draft_stats
    client.close()
    return records, seconds, tokens, stats, path


def perturbed(records: list[GammaRecord]) -> list[str]:
    return [a for r in records for a in r.perturbed_answers]


def gammas(records: list[GammaRecord]) -> np.ndarray:
    return np.array([np.nan if r.gamma is None else r.gamma for r in records])


def print_moves(name: str, versus: str, items: list[Item], before: np.ndarray, after: np.ndarray
                ) -> None:
    """Mean and max |Δγ| between two runs, and every γ that moved by more than 0.01."""
    moved = np.abs(after - before)
    print(f"{name}_{versus}_mean_abs_gamma_change: {float(np.nanmean(moved)):.2e} gamma")
    print(f"{name}_{versus}_max_abs_gamma_change: {float(np.nanmax(moved)):.2e} gamma")
    for k in np.flatnonzero(moved > 0.01):
        print(f"  gamma moved by {moved[k]:.4f} on {items[k].id}: {before[k]:.4f} -> {after[k]:.4f}")


def identical(a: list[GammaRecord], b: list[GammaRecord]) -> tuple[int, int]:
    """Answers (centre and perturbed) identical between two runs, and how many."""
    left = [x for r in a for x in [r.answer, *r.perturbed_answers]]
    right = [x for r in b for x in [r.answer, *r.perturbed_answers]]
    return sum(x == y for x, y in zip(left, right, strict=True)), len(left)


def run_dataset(dataset: str, args: argparse.Namespace, embedder: CachedEmbedder
                ) -> tuple[bool, float, float]:
    """One dataset: the default path, the naive loop, standard and flash attention and (unless
    --no-draft) drafts; prints figures prefixed by the dataset; returns (standard agrees with
    naive, the default agrees with flash and reruns free; default ratio; draft ratio)."""
    name = dataset.partition(":")[0]
    items = load_items(dataset, args.questions)
    prompts = len(items) * (args.n + 1)
    settings = GammaSettings(n=args.n, sampling=Sampling(temperature=0.0, max_tokens=args.max_tokens))

    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(Path(tmp) / "cache.sqlite")
        records, ours, our_tokens, _, path = cached_run(items, settings, embedder, cache)
        naive_gammas, naive_answers, naive_seconds, naive_tokens = naive_loop(
            [i.question for i in items], args.n, args.max_tokens, embedder
        )
        rerun, rerun_seconds, _, _, rerun_path = cached_run(items, settings, embedder, cache)
        rerun_calls = rerun_path["model_calls"]
        cache.close()
    standard, standard_seconds, _, _ = veracity_run(items, settings, embedder,
                                                    attention="standard", decode="sequential")
    flashed, flash_seconds, flash_tokens, _ = veracity_run(items, settings, embedder,
                                                           attention="flash", decode="sequential")
    choice = path["attention"]
    standard_gammas = gammas(standard)
    agree = np.allclose(standard_gammas, np.array(naive_gammas), atol=1e-6)
    diff = float(np.nanmax(np.abs(standard_gammas - np.array(naive_gammas))))
    standard_answers = [a for r in standard for a in [r.answer, *r.perturbed_answers]]
    same = sum(a == b for a, b in zip(standard_answers, naive_answers, strict=True))
    distinct = len({p for r in records for p in [r.prompt, *r.perturbed_prompts]})
    same_rerun = [r.gamma for r in rerun] == [r.gamma for r in records]
    kernel_run = flashed if choice["kernel"] == "flash" else standard  # both sequential
    same_kernel, total = identical(records, kernel_run)
    same_flash, _ = identical(records, flashed)
    our_gammas = gammas(records)
    print(f"dataset {name}, questions {len(items)}, N {args.n}, "
          f"prompts {prompts}, max tokens {args.max_tokens}")
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"default attention=auto chose {choice['kernel']}: {choice['reason']} "
          f"(tokens/s {choice['tokens_per_second']}, "
          f"{'measured at this load' if choice['measured'] else 'remembered'}); "
          f"decode=auto chose {path['decode']}")
    print(f"standard attention agrees with the naive loop: {agree}; rerun gives the same gammas: "
          f"{same_rerun}; {prompts - distinct} repeated prompt(s) sent once by veracity")
    print(f"{name}_default_seconds: {ours:.2f} s")
    print(f"{name}_default_prompts_per_s: {prompts / ours:.2f} prompts/s")
    print(f"{name}_default_tokens_per_s: {our_tokens / ours:.1f} tokens/s")
    print(f"{name}_naive_seconds: {naive_seconds:.2f} s")
    print(f"{name}_naive_prompts_per_s: {prompts / naive_seconds:.2f} prompts/s")
    print(f"{name}_naive_tokens_per_s: {naive_tokens / naive_seconds:.1f} tokens/s")
    print(f"{name}_standard_seconds: {standard_seconds:.2f} s")
    print(f"{name}_standard_gamma_max_abs_diff_vs_naive: {diff:.2e} gamma")
    print(f"{name}_standard_answers_identical_to_naive: {same} of {len(standard_answers)} answers")
    print(f"{name}_mean_gamma: {np.nanmean(our_gammas):.4f} gamma")
    print(f"{name}_default_answers_identical_to_{choice['kernel']}_sequential: {same_kernel} of "
          f"{total} answers")
    print(f"{name}_default_answers_identical_to_flash_sequential: {same_flash} of {total} answers")
    print_moves(name, "default_vs_standard", items, standard_gammas, our_gammas)
    print(f"{name}_rerun_model_calls: {rerun_calls} calls")
    print(f"{name}_rerun_seconds: {rerun_seconds:.2f} s")
    print(f"{name}_ratio_default_over_naive_prompts_per_s: {naive_seconds / ours:.2f} x")
    print(f"{name}_ratio_standard_over_naive_prompts_per_s: {naive_seconds / standard_seconds:.2f} x")
    print(f"{name}_flash_sequential_seconds: {flash_seconds:.2f} s")
    print(f"{name}_flash_sequential_tokens_per_s: {flash_tokens / flash_seconds:.1f} tokens/s")
    print(f"{name}_ratio_flash_sequential_over_naive_prompts_per_s: "
          f"{naive_seconds / flash_seconds:.2f} x")
    print(f"\n| {name} | naive loop | default (attention=auto: {choice['kernel']}, "
          f"decode=auto: {path['decode']}) | "
          f"attention=standard | attention=flash |\n|---|---|---|---|---|\n"
          f"| wall time | {naive_seconds:.1f} s | {ours:.1f} s | {standard_seconds:.1f} s | "
          f"{flash_seconds:.1f} s |\n"
          f"| ratio to the naive loop | 1.00x | {naive_seconds / ours:.2f}x | "
          f"{naive_seconds / standard_seconds:.2f}x | {naive_seconds / flash_seconds:.2f}x |\n"
          f"| answers identical to flash sequential | – | {same_flash} of {total} | – | – |\n")
    # decode=batch named: the greedy requests of a call decoded together
    batched, batch_seconds, _, _ = veracity_run(items, settings, embedder, attention="flash",
                                                decode="batch")
    same_batch, _ = identical(batched, flashed)
    print(f"{name}_batch_seconds: {batch_seconds:.2f} s")
    print(f"{name}_ratio_batch_over_naive_prompts_per_s: {naive_seconds / batch_seconds:.2f} x")
    print(f"{name}_ratio_batch_over_flash_sequential: {flash_seconds / batch_seconds:.2f} x")
    print(f"{name}_batch_answers_identical_to_flash_sequential: {same_batch} of {total} answers")
    ok = bool(agree and rerun_calls == 0 and same_kernel == total)
    ratio = naive_seconds / ours
    if args.no_draft:
        return ok, ratio, float("nan")
    drafted, draft_seconds, draft_tokens, stats = veracity_run(items, settings, embedder,
                                                               decode="draft")
    draft_perturbed = perturbed(drafted)
    draft_same = sum(a == b for a, b in zip(perturbed(flashed), draft_perturbed, strict=True))
    standard_same = sum(a == b for a, b in zip(perturbed(standard), draft_perturbed, strict=True))
    flash_gammas = gammas(flashed)
    draft_gammas = gammas(drafted)
    stable = [k for k, r in enumerate(drafted) if all(a == r.answer for a in r.perturbed_answers)]
    print(f"{name}_draft_seconds: {draft_seconds:.2f} s")
    print(f"{name}_draft_tokens_per_s: {draft_tokens / draft_seconds:.1f} tokens/s")
    print(f"{name}_draft_perturbed_identical_to_sequential: "
          f"{draft_same / max(len(draft_perturbed), 1):.4f} share ({draft_same}/"
          f"{len(draft_perturbed)}, both with flash attention)")
    print_moves(name, "draft_vs_flash_sequential", items, flash_gammas, draft_gammas)
    print(f"{name}_draft_perturbed_identical_to_standard_attention: "
          f"{standard_same / max(len(draft_perturbed), 1):.4f} share ({standard_same}/"
          f"{len(draft_perturbed)}, against standard-attention sequential answers)")
    print_moves(name, "draft_vs_standard_sequential", items, standard_gammas, draft_gammas)
    print(f"{name}_draft_tokens_accepted: {stats.accepted / max(stats.proposed, 1):.3f} share "
          f"({stats.accepted}/{stats.proposed}, {stats.forward_passes} verification passes)")
    if stats.pass_cost:
        timed = ", ".join(f"{rows}: {cost:.2f}" for rows, cost in stats.pass_cost.items() if rows <= 17)
        print(f"{name}_draft_pass_cost_measured: {{{timed}}} one-token passes by rows")
    if stable:
        subset = [items[k] for k in stable]
        _, stable_draft_seconds, _, _ = veracity_run(subset, settings, embedder, decode="draft")
        _, _, stable_naive_seconds, _ = naive_loop([i.question for i in subset], args.n,
                                                   args.max_tokens, embedder)
        print(f"{name}_stable_items: {len(subset)} items (every perturbed answer equals y0)")
        print(f"{name}_stable_ratio_draft_over_naive: {stable_naive_seconds / stable_draft_seconds:.2f} x")
    draft_ratio = naive_seconds / draft_seconds
    print(f"{name}_ratio_draft_over_naive_prompts_per_s: {draft_ratio:.2f} x")
    return ok, ratio, draft_ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--no-draft", action="store_true", help="skip the decode=draft runs")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), same code path")
    args = parser.parse_args()
    if args.smoke:
        args.questions, args.n, args.max_tokens = 2, 2, 8
    embedder = CachedEmbedder(load_embedder("st/default"))
    embedder.embed(["warm-up: the embedder loads before any path is timed"])
    datasets = [f"truthfulqa:{args.data}"] if args.data.is_file() else []
    ok = True
    for dataset in datasets:
        ok = run_dataset(dataset, args, embedder)[0] and ok
    builtin_ok, ratio, draft_ratio = run_dataset("builtin", args, embedder)
    print(f"ratio_draft_over_naive_builtin: {draft_ratio:.2f} x")
    print(f"ratio_default_over_naive_builtin: {ratio:.2f} x")
    return 0 if ok and builtin_ok else 1


if __name__ == "__main__":
    sys.exit(main())
