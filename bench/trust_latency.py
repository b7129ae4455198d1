"""Latency of ``veracity.trust`` on the bundled SmolLM2 + MiniLM, with warm (loaded) models.

Loads a Truster once, warms it up, then scores short questions with no cache, so every
score generates: n perturbed answers (plus the answer itself unless the caller gives it)
and one embedding batch. Prints the median and max wall time per score, and the
completion tokens generated per score.

    python bench/trust_latency.py [--repeats 5] [--max-tokens 64] [--threads T]
    python bench/trust_latency.py --smoke     # 1 repeat, 8 tokens (CI)

Run for both decoders: ``sequential`` (token by token) and ``draft`` (the perturbed answers
verified against the answer, see ``decode=draft``). Judged by the median latency of n = 1
with the answer given, sequential over draft (last line); the target is 0.15 s for draft.
"""

from __future__ import annotations

import argparse
import statistics
import time

import veracity
from veracity.methods.gamma.calibration.trust import TrustSettings
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


def measure(decode: str, args: argparse.Namespace) -> dict[tuple[int, bool], float]:
    """Median seconds per score for n in (1, 3), without and with the model's own answer given."""
    began = time.perf_counter()
    options: dict[str, object] = {"decode": decode}
    if args.threads:
        options["n_threads"] = args.threads
    model = veracity.load_model("llamacpp/default", **options)
    truster = veracity.Truster(model, max_tokens=args.max_tokens, cache=False)
    loaded = time.perf_counter() - began
    truster("Warm up: what is 1 + 1?")
    questions = QUESTIONS[: args.repeats]
    own = {q: truster(q).answer for q in questions}  # what a gateway would be handed
    rows = []
    for n in (1, 3):
        truster.settings = TrustSettings(n=n, sampling=Sampling(max_tokens=args.max_tokens))
        for given in (False, True):
            times, calls = [], []
            tokens_before = truster.client.stats.completion_tokens
            for question in questions:
                score = truster(question, own[question] if given else None)
                times.append(score.seconds)
                calls.append(score.model_calls)
            tokens = (truster.client.stats.completion_tokens - tokens_before) / len(times)
            rows.append((n, given, statistics.median(times), max(times), calls[0], tokens,
                         tokens / statistics.mean(times)))
    truster.close()
    model.close()
    print(f"{decode}_models_loaded_seconds: {loaded:.2f} s")
    medians = {}
    for n, given, median, worst, count, tokens, rate in rows:
        name = f"{decode}_n{n}_{'answer_given' if given else 'no_answer'}"
        medians[n, given] = median
        print(f"{name}_median_seconds: {median:.3f} s")
        print(f"{name}_max_seconds: {worst:.3f} s")
        print(f"{name}_generations: {count} generations")
        print(f"{name}_tokens: {tokens:.1f} tokens")
        print(f"{name}_tokens_per_s: {rate:.1f} tokens/s")
    print(f"{decode}_ratio_median_n3_over_n1_answer_given: "
          f"{medians[3, True] / medians[1, True]:.2f} x")
    return medians


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: all cores)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), same code path")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.max_tokens = 1, 8
    print(f"{args.repeats} question(s) per setting, max_tokens {args.max_tokens}, no cache; "
          "generations and tokens are per score; the answer given is the model's own")
    sequential = measure("sequential", args)
    draft = measure("draft", args)
    print(f"ratio_sequential_over_draft_n1_answer_given: "
          f"{sequential[1, True] / draft[1, True]:.2f} x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
