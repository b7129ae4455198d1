"""Latency of ``veracity.trust`` on the bundled SmolLM2 + MiniLM, with warm (loaded) models.

Loads a Truster once, warms it up, then scores short questions with no cache, so every
score generates: n perturbed answers (plus the answer itself unless the caller gives it)
and one embedding batch. Prints the median and max wall time per score, and the
completion tokens generated per score.

    python bench/trust_latency.py [--repeats 5] [--max-tokens 64] [--threads T]
    python bench/trust_latency.py --smoke     # 1 repeat, 8 tokens (CI)

Judged by the median latency of n = 3 over n = 1 (answer given; last line): below 3 when the
perturbed generations share work.
"""

from __future__ import annotations

import argparse
import statistics
import time

import veracity
from veracity.methods.trust import TrustSettings
from veracity.types import Sampling

QUESTIONS = (
    "What is the capital of France?",
    "Who wrote Hamlet?",
    "How many legs does a spider have?",
    "What is the boiling point of water?",
    "Which planet is closest to the sun?",
    "What colour is the sky on a clear day?",
    "Who painted the Mona Lisa?",
    "What is 12 times 12?",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: all cores)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), same code path")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.max_tokens = 1, 8
    began = time.perf_counter()
    options = {"n_threads": args.threads} if args.threads else {}
    model = veracity.load_model("llamacpp/default", **options)
    truster = veracity.Truster(model, max_tokens=args.max_tokens, cache=False)
    loaded = time.perf_counter() - began
    truster("Warm up: what is 1 + 1?")
    rows = []
    for n in (1, 3):
        truster.settings = TrustSettings(n=n, sampling=Sampling(max_tokens=args.max_tokens))
        for given in (False, True):
            times, calls = [], []
            tokens_before = truster.client.stats.completion_tokens
            for question in QUESTIONS[: args.repeats]:
                answer = "Paris is the capital of France." if given else None
                score = truster(question, answer)
                times.append(score.seconds)
                calls.append(score.model_calls)
            tokens = (truster.client.stats.completion_tokens - tokens_before) / len(times)
            rows.append((n, given, statistics.median(times), max(times), calls[0], tokens,
                         tokens / statistics.mean(times)))
    truster.close()
    model.close()
    print(f"{args.repeats} question(s) per setting, max_tokens {args.max_tokens}, no cache; "
          "generations and tokens are per score")
    print(f"models_loaded_seconds: {loaded:.2f} s")
    medians = {}
    for n, given, median, worst, count, tokens, rate in rows:
        name = f"n{n}_{'answer_given' if given else 'no_answer'}"
        medians[n, given] = median
        print(f"{name}_median_seconds: {median:.3f} s")
        print(f"{name}_max_seconds: {worst:.3f} s")
        print(f"{name}_generations: {count} generations")
        print(f"{name}_tokens: {tokens:.1f} tokens")
        print(f"{name}_tokens_per_s: {rate:.1f} tokens/s")
    print(f"ratio_median_n3_over_n1_answer_given: {medians[3, True] / medians[1, True]:.2f} x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
