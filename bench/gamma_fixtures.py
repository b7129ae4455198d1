"""Generated γ fixtures at any size: recorded generations (``gamma --recorded``) or a JSONL
question dataset (``gamma --dataset jsonl:``), written line by line in constant memory.

Every item is distinct (its number is in the prompt and in every answer), so the work per
item does not shrink as the file grows; answers are about six words, as in the measurements
of the scale issue. Deterministic for a seed.

    python bench/gamma_fixtures.py recorded 100000 out.jsonl [--n 3] [--seed 0]
    python bench/gamma_fixtures.py questions 32000 questions.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WORDS = ("the", "capital", "river", "answer", "is", "not", "known", "city", "north", "south",
         "about", "likely", "paris", "water", "seven", "blue", "model", "true", "false", "year")
TOPICS = ("capital of", "longest river in", "population of", "founder of", "tallest peak in",
          "currency of", "first king of", "language of")
PLACES = ("France", "Peru", "Kenya", "Norway", "Japan", "Chile", "Egypt", "Canada", "Spain")


def _answer(rng: random.Random, number: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(5)) + f" {number}"


def recorded_row(number: int, n: int, rng: random.Random, error_every: int = 0) -> dict[str, object]:
    """One recorded γ item: a prompt, its answer and ``n`` perturbed answers (some equal to the
    answer, some not, so γ spreads); every ``error_every``-th answer is empty (unscored)."""
    answer = _answer(rng, number)
    if error_every and number % error_every == 0:
        answer = ""
    stable = rng.random() < 0.4
    perturbed = [answer if stable or rng.random() < 0.5 else _answer(rng, number)
                 for _ in range(n)]
    prompt = f"What is the {rng.choice(TOPICS)} {rng.choice(PLACES)}? (case {number})"
    return {"id": f"q{number}", "prompt": prompt, "answer": answer,
            "perturbed_answers": perturbed, "model": "recorded/generated"}


def write_recorded(path: Path, count: int, n: int = 3, seed: int = 0,
                   error_every: int = 997) -> Path:
    """``count`` recorded items into ``path`` (JSONL)."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for number in range(count):
            fh.write(json.dumps(recorded_row(number, n, rng, error_every)) + "\n")
    return path


def write_questions(path: Path, count: int, seed: int = 0) -> Path:
    """``count`` distinct questions (``{"id", "question"}``) into ``path`` (JSONL)."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for number in range(count):
            question = f"What is the {rng.choice(TOPICS)} {rng.choice(PLACES)}? (case {number})"
            fh.write(json.dumps({"id": f"q{number}", "question": question}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("recorded", "questions"))
    parser.add_argument("count", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--n", type=int, default=3, help="perturbed answers per recorded item")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.kind == "recorded":
        write_recorded(args.out, args.count, args.n, args.seed)
    else:
        write_questions(args.out, args.count, args.seed)
    print(f"wrote {args.count} {args.kind} items to {args.out}")


if __name__ == "__main__":
    main()
