"""Does gamma measure more than numerical noise? TruthfulQA on the bundled model.

Runs ``gamma --control numeric`` on the first K TruthfulQA questions, labels the answers as
``validate gamma`` does (with the self-consistency baseline), and fits a calibration. Prints
mean gamma and gamma_null, the AUROC for flagging incorrect answers of gamma, gamma - gamma_null
and the baseline (bootstrap 95% CIs), the calibration's expected calibration error on a
held-out half, the verdict thresholds, and last the ratio mean gamma / mean gamma_null.
On llama.cpp the null answers come from batch compositions (the prompt decoded beside other
sequences in one batch).

On a shared machine, worker processes can fill the cache first (``--part warm --shard i/k``,
group by group of five questions); ``--part all`` then computes everything from the cache.

    python bench/gamma_control_study.py --questions 100 -n 10 --max-tokens 64 --cache c.sqlite
    python bench/gamma_control_study.py --smoke
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

from veracity.cache import Cache
from veracity.data.qa import load_items
from veracity.methods.consistency.core import ConsistencySettings, consistency_scores
from veracity.methods.gamma.calibration.run import calibrate
from veracity.methods.gamma.control import null_generations, variations
from veracity.methods.gamma.core import GammaSettings, measure_gamma
from veracity.methods.gamma.run import run_gamma
from veracity.methods.gamma.validation.core import AurocBlock, ValidateSettings, validate_gamma
from veracity.runs.common import Context
from veracity.types import Item, Sampling

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "truthfulqa" / "TruthfulQA.csv"
MODEL, EMBEDDER = "llamacpp/default", "st/default"


def _ci(name: str, block: AurocBlock | None) -> None:
    if block is None:
        return
    low, high = block.ci
    print(f"{name}: {block.auroc:.3f} AUROC (95% CI {low:.3f} to {high:.3f})")


def _percent(share: float | None) -> str:
    return "—" if share is None else f"{100 * share:.1f}"


def warm(items: list[Item], ctx: Context, settings: GammaSettings, baseline: ConsistencySettings,
         shard: str) -> None:
    """Generate every stage's answers for this worker's groups of questions, group by group,
    so that the first questions are complete in the cache first (hashed embeddings: scoring
    happens in the final pass)."""
    index, count = (int(v) for v in shard.split("/"))
    client, hashed = ctx.client(MODEL), ctx.embedder("hash/default")
    paths = variations(client, settings.n)
    for start in range(5 * (index - 1), len(items), 5 * count):
        group = items[start : start + 5]
        measure_gamma(group, client, hashed, settings)
        null_generations([i.question for i in group], client, settings.sampling, paths)
        consistency_scores([i.question for i in group], client, hashed, baseline,
                           greedy=["-"] * len(group))
        print(f"warm: questions {start + 1}-{start + len(group)} done", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--baseline-samples", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="llama.cpp threads (1 is fastest on a crowded CPU)")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--cache", type=Path, help="SQLite cache (default: a temporary one)")
    parser.add_argument("--out", type=Path, help="run directory (default: temporary)")
    parser.add_argument("--part", choices=("all", "warm"), default="all",
                        help="warm: only generate (into the cache), for one --shard")
    parser.add_argument("--shard", default="1/1",
                        help="with --part warm: worker i of k takes every k-th group of 5 questions")
    parser.add_argument("--smoke", action="store_true", help="3 questions, n=2, 8 tokens")
    args = parser.parse_args()
    if args.smoke:
        args.questions, args.n, args.max_tokens, args.baseline_samples = 3, 2, 8, 2
    if not args.data.is_file():
        print(f"skipped: {args.data} not found", file=sys.stderr)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="veracity-study-"))
    ctx = Context(cache=Cache(args.cache or tmp / "cache.sqlite"),
                  model_options={"llamacpp": {"n_threads": args.threads}})
    dataset = f"truthfulqa:{args.data}"
    items = load_items(dataset, args.questions)
    sampling = Sampling(temperature=0.0, max_tokens=args.max_tokens)
    settings = GammaSettings(n=args.n, sampling=sampling, control="numeric")
    baseline = ConsistencySettings(args.baseline_samples, 0.7, args.max_tokens, 0)
    try:
        if args.part == "warm":
            warm(items, ctx, settings, baseline, args.shard)
            return 0
        out = args.out or tmp / "run"
        outcome = run_gamma(items, MODEL, EMBEDDER, settings, ctx, out, dataset)
        found = validate_gamma(out, ValidateSettings(baseline_samples=args.baseline_samples,
                                                     temperature=0.7), ctx).aggregate
        calibration = calibrate([out], out / "calibration.json", resamples=200, holdout=0.5)
    finally:
        ctx.close()
    control = outcome.summary.control
    if control is None:
        raise RuntimeError("the run has no null control")
    curve = calibration.curves[0]
    print(f"questions: {len(items)} items")
    print(f"perturbed and null answers per question: {args.n} each")
    print(f"max tokens: {args.max_tokens} tokens")
    print(f"accuracy: {found.accuracy.all.accuracy:.3f} share correct")
    print(f"mean gamma: {control.mean_gamma:.4f} (s.e. {control.stderr_gamma:.4f})")
    print(f"mean gamma_null: {control.mean_gamma_null:.4f} (s.e. "
          f"{control.stderr_gamma_null:.4f})")
    print(f"null answers all identical: {_percent(control.share_null_identical)} % of items")
    records = list(outcome.records)
    for kind, answers in (("null", [r.extra.get("null_answers") or [] for r in records]),
                          ("perturbed", [r.perturbed_answers for r in records])):
        pairs = [(a, r.answer) for r, given in zip(records, answers, strict=True) for a in given]
        same = sum(a == answer for a, answer in pairs) / len(pairs) if pairs else float("nan")
        print(f"{kind} answers equal to the answer: {100 * same:.1f} % of answers")
    print(f"gamma above the null's 95th percentile: {_percent(control.share_above_null_p95)} "
          "% of items")
    _ci("auroc gamma", found.gamma)
    _ci("auroc gamma - gamma_null", found.gamma_minus_null)
    _ci("auroc gamma_null", found.gamma_null)
    _ci("auroc self-consistency", found.baseline)
    print(f"held-out ece: {curve.holdout['ece']:.3f} (fit on {curve.holdout['n_fit']}, measured on "
          f"{curve.holdout['n_eval']} answers)")
    t = curve.thresholds
    reached = f"gamma < {t['low']:.4f}, {100 * t['share_trustworthy']:.1f} % of answers" \
        if t["precision_reached"] else "none"
    print(f"trustworthy cut at precision {t['target_precision']}: {reached}")
    print(f"untrustworthy cut at recall {t['target_recall']}: gamma >= {t['high']:.4f} "
          f"({100 * t['share_untrustworthy']:.1f} % of answers flagged)")
    print(f"run directory: {out}")
    mean, null = control.mean_gamma, control.mean_gamma_null
    ratio = math.nan if mean is None else mean / null if null else float("inf")
    print(f"mean gamma / mean gamma_null: {ratio:.2f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
