"""Score-only FEWL benchmark: recorded texts in, scores out, no model.

Writes synthetic but realistic recorded texts (questions, J reference answers, R
wrong / corrected pairs, one answer per question) as JSONL, then scores them through the
library's score-only path (the same files ``veracity fewl run --references-file
--pairs-file --answers FILE`` reads). Prints the seconds, the share spent embedding vs
the rest, and the number of distinct texts embedded, and checks that each was embedded
exactly once.

    python bench/fewl_scoring.py                      # 500 x 5 x 25 x 25 with st/default
    python bench/fewl_scoring.py --questions 40       # a quick check
    python bench/fewl_scoring.py --allow-hash         # hash/default if MiniLM is missing
    python bench/fewl_scoring.py --smoke              # 8 x 3 x 3 x 3, seconds (CI)

Judged by the total time against the 35 s target (last line).
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import tempfile
import time
from pathlib import Path

from veracity.cache import Cache
from veracity.data.qa import load_items
from veracity.jsontypes import JsonObject
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings
from veracity.registry import parse_embedder_options
from veracity.runs.common import Context
from veracity.store import write_jsonl

TARGET_SECONDS = 35.0
"""The full-size bench's target on 2 CPU cores."""

PLACES = ["France", "Peru", "Kenya", "Norway", "Japan", "Chile", "Egypt", "Canada", "Nepal",
          "Ghana", "Spain", "Laos", "Iceland", "Brazil", "India", "Poland", "Fiji", "Oman"]
THINGS = ["river", "mountain", "lake", "desert", "volcano", "island", "forest", "canal",
          "bridge", "cathedral", "railway", "harbour", "glacier", "stadium", "museum"]
PEOPLE = ["Ada Lovelace", "Alan Turing", "Marie Curie", "Isaac Newton", "Rosalind Franklin",
          "Nikola Tesla", "Emmy Noether", "Charles Darwin", "Grace Hopper", "Niels Bohr"]
FACTS = ["was built in {y}", "is the longest in {p}", "was named after {n}",
         "lies near the border with {p2}", "was first described by {n} in {y}",
         "attracts many visitors every summer", "is a protected national heritage site",
         "is about {k} kilometres long", "was rebuilt after a fire in {y}"]
QUESTIONS = ["Which {t} in {p} {f}?", "When was the famous {t} of {p} first mapped?",
             "Who is credited with describing the oldest {t} in {p}?",
             "What is special about the largest {t} in {p}?", "Why is the {t} of {p} famous?"]


def _fact(rng: random.Random, p: str) -> str:
    return rng.choice(FACTS).format(y=rng.randint(1500, 2020), p=p, n=rng.choice(PEOPLE),
                                    p2=rng.choice(PLACES), k=rng.randint(5, 900))


def make_recorded(folder: Path, questions: int, refs: int, pairs: int, seed: int) -> dict[str, Path]:
    """Write dataset.jsonl, references.jsonl, pairs.jsonl and answers.jsonl into folder."""
    rng = random.Random(seed)
    data: list[JsonObject] = []
    references: list[JsonObject] = []
    pair_rows: list[JsonObject] = []
    answers: list[JsonObject] = []
    for i in range(questions):
        p, t = rng.choice(PLACES), rng.choice(THINGS)
        question = rng.choice(QUESTIONS).format(t=t, p=p, f=_fact(rng, p)) + f" (case {i})"
        truth = f"The {t} in {p} {_fact(rng, p)}"
        qid = f"q{i:04d}"
        data.append({"id": qid, "question": question})
        references.append({"id": qid, "references": [
            truth if j == 0 else f"{truth}, and it {_fact(rng, p)}." if j % 2 else
            f"I believe the {t} {_fact(rng, p)}." for j in range(refs)]})
        pair_rows.append({"id": qid, "pairs": [
            {"wrong": f"The {t} is actually in {rng.choice(PLACES)} and {_fact(rng, p)} ({r}).",
             "corrected": f"No: the {t} is in {p}, where it {_fact(rng, p)} ({r})."}
            for r in range(pairs)]})
        answers.append({"id": qid, "answer": rng.choice([truth, f"I am not sure, maybe the {t} "
                        f"{_fact(rng, p)}.", "I don't know."])})
    paths = {name: folder / f"{name}.jsonl" for name in ("dataset", "references", "pairs",
                                                          "answers")}
    for name, rows in (("dataset", data), ("references", references), ("pairs", pair_rows),
                       ("answers", answers)):
        write_jsonl(paths[name], rows)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--references", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=25)
    parser.add_argument("--neighbours", type=int, default=25)
    parser.add_argument("--embedder", default="st/default")
    parser.add_argument("--allow-hash", action="store_true",
                        help="fall back to hash/default when sentence-transformers is missing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--embedder-option", action="append", default=[], metavar="KEY=VALUE",
                        help="as on the CLI, e.g. backend=onnx (default: the st provider's default)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), same code path")
    args = parser.parse_args()
    if args.smoke:
        args.questions, args.references, args.pairs, args.neighbours = 8, 3, 3, 3
    embedder = args.embedder
    if embedder.startswith("st/") and importlib.util.find_spec("sentence_transformers") is None:
        if not args.allow_hash:
            print("st/default needs sentence-transformers (or pass --allow-hash)", file=sys.stderr)
            return 2
        embedder = "hash/default"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = make_recorded(folder, args.questions, args.references, args.pairs, args.seed)
        items = load_items(f"jsonl:{paths['dataset']}")
        settings = FewlSettings(
            references_file=paths["references"], pairs_file=paths["pairs"],
            pairs=PairSettings(r=args.pairs), similarity=embedder, neighbours=args.neighbours)
        ctx = Context(cache=Cache(folder / "cache.sqlite"),
                      embedder_options=parse_embedder_options(args.embedder_option))
        ctx.embedder(embedder)  # load the model before the clock starts
        started = time.perf_counter()
        outcome = run_fewl(items, [AnswerSource("answers", path=paths["answers"])], settings, ctx,
                           out=None, dataset="bench")
        seconds = time.perf_counter() - started
        stats = ctx.embedders[embedder].stats
        distinct = {i.question for i in items}
        for record in outcome.records:
            distinct.update(record.references)
            distinct.update(t for p in record.pairs for t in (p["wrong"], p["corrected"]))
            distinct.update(a.answer for a in record.answers.values() if a.answer)
        assert stats.texts_embedded == len(distinct), (stats.texts_embedded, len(distinct))
        again = time.perf_counter()
        run_fewl(items, [AnswerSource("answers", path=paths["answers"])], settings, ctx,
                 out=None, dataset="bench")
        second = time.perf_counter() - again
        assert stats.texts_embedded == len(distinct), "a text was embedded twice"
        assert ctx.model_calls() == 0
        identity = ctx.embedders[embedder].embedder.identity()
        ctx.close()
    share = stats.embed_seconds / seconds if seconds else 0.0
    print(f"FEWL score-only: {args.questions} questions x {args.references} references x "
          f"{args.pairs} pairs x {args.neighbours} neighbours, embedder {embedder} "
          f"{identity}")
    print("(rest = reading files, cache keys and writes, neighbour search, scoring, records;")
    print(" second pass = every vector already in memory: scoring without embedding or cache)")
    print(f"distinct_texts_embedded: {stats.texts_embedded} texts")
    print(f"embedding_seconds: {stats.embed_seconds:.2f} s")
    print(f"embedding_share: {100 * share:.1f} %")
    print(f"rest_seconds: {seconds - stats.embed_seconds:.2f} s")
    print(f"second_pass_seconds: {second:.2f} s")
    print(f"mean_fewl: {outcome.summary.models['answers'].mean:.4f} score")
    print(f"total_seconds: {seconds:.2f} s")
    print(f"ratio_total_over_target_{TARGET_SECONDS:.0f}s: {seconds / TARGET_SECONDS:.3f} x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
