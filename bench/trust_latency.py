"""Latency of ``veracity.trust`` on the bundled SmolLM2 + MiniLM, with warm (loaded) models.

Loads a Truster once, warms it up, then scores short questions with no cache, so every
score generates: n perturbed answers (plus the answer itself unless the caller gives it)
and one embedding batch. Prints the median and max wall time per score, and the
completion tokens generated per score.

    python bench/trust_latency.py [--repeats 5] [--max-tokens 64] [--threads T]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: all cores)")
    args = parser.parse_args()
    began = time.perf_counter()
    options = {"n_threads": args.threads} if args.threads else {}
    model = veracity.load_model("llamacpp/default", **options)
    truster = veracity.Truster(model, max_tokens=args.max_tokens, cache=False)
    print(f"models loaded in {time.perf_counter() - began:.1f} s")
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
    print(f"{'n':>2} {'answer given':>12} {'median s':>9} {'max s':>7} {'generations':>11} "
          f"{'tokens':>7} {'tokens/s':>8}")
    for n, given, median, worst, count, tokens, rate in rows:
        print(f"{n:>2} {str(given):>12} {median:9.2f} {worst:7.2f} {count:>11} {tokens:7.1f} "
              f"{rate:8.1f}")


if __name__ == "__main__":
    main()
