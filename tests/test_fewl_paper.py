"""FEWL as published: the rows of Tables 1, 3 and 10 and C.8, ideal λ from both labels, the
paper's meaning of a corrected answer, --repeats, Table 5 and Table 8, Figure 4."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from data_paths import FIXTURES
from veracity.backends.fake import FakeBackend
from veracity.client import CachedEmbedder, LLMClient
from veracity.data.labelled import load_labelled
from veracity.errors import ConfigError, DataError
from veracity.methods.fewl.core import (
    VARIANTS,
    sample_level_agreement,
    score_texts,
    select_neighbours,
    single_best_weights,
    tqa_metric,
)
from veracity.methods.fewl.modes import run_fewl_validate
from veracity.methods.fewl.neighbours.random import random_neighbours
from veracity.methods.fewl.pairs import (
    PAIR_PROMPT,
    PairPrompt,
    PairSettings,
    generate_pairs,
    pair_prompt,
    parse_pairs,
)
from veracity.methods.fewl.records import AccuracyCell, Comparison
from veracity.methods.fewl.run import FewlSettings
from veracity.methods.fewl.similarity import EmbeddingSimilarity
from veracity.methods.fewl.validation.core import TABLE_ROWS, combine_repeats
from veracity.runs.common import Context
from veracity.store import RunDir

FORMATS = FIXTURES / "formats"
FAST = ["--reference", "fake/pairs", "--reference-samples", "3", "--pairs", "4",
        "--neighbours", "2", "--similarity", "hash/default"]


def fewl_cli(args: list[str], cache: Path, ok: bool = True) -> Result:
    from veracity.cli import main

    result = CliRunner().invoke(main, ["fewl", *args, "--cache", str(cache)], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


class DictEmbedder:
    """Fixed vectors per text: similarities are known in closed form."""

    spec = "test/dict"

    def __init__(self, vectors: Mapping[str, Sequence[float]]) -> None:
        self.vectors = vectors

    def identity(self) -> dict[str, Any]:
        return {}

    def embed(self, texts: Sequence[str]) -> Any:
        return np.array([self.vectors[t] for t in texts], dtype=np.float32)


def _unit(angle_degrees: float) -> list[float]:
    a = math.radians(angle_degrees)
    return [math.cos(a), math.sin(a)]


def test_single_best_weights_pick_the_highest_valid_expertise() -> None:
    scores = [[0.1, 0.4, 0.9], [0.5, np.nan, 0.2], [np.nan, np.nan, np.nan], [0.3, 0.3, 0.0]]
    mask = [[True, True, False], [True, True, True], [True, True, True], [True, True, True]]
    w = single_best_weights(scores, mask)
    assert w[0].tolist() == [0.0, 1.0, 0.0]  # 0.9 is on a missing reference
    assert w[1].tolist() == [1.0, 0.0, 0.0]
    assert np.isnan(w[2]).all()
    assert w[3].tolist() == [1.0, 0.0, 0.0]  # a tie goes to the first


def test_every_row_of_table_one_matches_its_formula() -> None:
    names = ["ans", "ref-a", "ref-b", "iw", "co", "good", "bad", "ans2", "ref-c", "ref-d"]
    angles = [0, 10, 80, 90, 20, 15, 70, 60, 30, 50]
    vecs = {n: _unit(d) for n, d in zip(names, angles, strict=True)}
    sim = EmbeddingSimilarity(CachedEmbedder(DictEmbedder(vecs)), "affine")
    nb = select_neighbours([[1.0, 0.0], [0.0, 1.0]], k=1)
    scores = score_texts(
        references=[["ref-a", "ref-b"], ["ref-c", "ref-d"]],
        pairs=[[("iw", "co")], [("iw", "co")]],
        answer_sets={"m": ["ans", "ans2"]}, similarity=sim, neighbours=nb,
        labelled=[("good", ["bad", "iw"]), ("good", ["bad"])],
    )

    def s(a: str, b: str) -> float:
        return (1 + float(np.dot(vecs[a], vecs[b]))) / 2

    def g(v: float) -> float:
        return 0.5 * math.tanh(v)

    e = np.array([s("ref-a", "co") - s("ref-a", "iw"), s("ref-b", "co") - s("ref-b", "iw")])
    lam = np.exp(e) / np.exp(e).sum()
    ga, gb = g(s("ans", "ref-a")), g(s("ans", "ref-b"))
    gc, gd = g(s("ans", "ref-c")), g(s("ans", "ref-d"))  # question 0's neighbour is question 1
    # ideal expertise: mean over the hallucinated labels of SIM(h_j, good) − SIM(h_j, bad_k)
    ideal_e = np.array([
        np.mean([s(r, "good") - s(r, "bad"), s(r, "good") - s(r, "iw")]) for r in ("ref-a", "ref-b")])
    ideal = np.exp(ideal_e) / np.exp(ideal_e).sum()
    best = int(np.argmax(e))
    expected = {
        "single": ga,
        "single_penalty": ga - gc,
        "multi_uniform_no_penalty": (ga + gb) / 2,
        "multi_expertise_no_penalty": lam[0] * ga + lam[1] * gb,
        "single_best_no_penalty": [ga, gb][best],
        "fewl": lam[0] * ga + lam[1] * gb - (lam[0] * gc + lam[1] * gd),
        "fewl_uniform": (ga + gb) / 2 - (gc + gd) / 2,
        "fewl_ideal": ideal[0] * ga + ideal[1] * gb - (ideal[0] * gc + ideal[1] * gd),
    }
    assert set(expected) == set(VARIANTS) == {v for v, _ in TABLE_ROWS}
    for variant, value in expected.items():
        assert scores.sets["m"]["tv"][variant].fewl[0] == pytest.approx(value), variant
    # Figure 4's agreements: mean SIM to the IW and to the CO answers per reference
    assert scores.agreement_wrong[0] == pytest.approx([s("ref-a", "iw"), s("ref-b", "iw")])
    assert scores.agreement_corrected[0] == pytest.approx([s("ref-a", "co"), s("ref-b", "co")])


def test_random_neighbours_respect_the_threshold_and_the_seed() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(30, 4))
    vectors[1] = vectors[0] * 2.0  # a near-duplicate of question 0 (cosine 1)
    nb = random_neighbours(vectors, k=5, near_duplicate=0.8, seed=7)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    for row in range(30):
        chosen = nb.index[row][nb.mask[row]]
        assert len(chosen) == 5 and len(set(chosen.tolist())) == 5 and row not in chosen
        assert (unit[chosen] @ unit[row] <= 0.8 + 1e-12).all()
        assert nb.cosine[row][nb.mask[row]] == pytest.approx(unit[chosen] @ unit[row])
    assert 1 not in nb.index[0][nb.mask[0]]
    again = random_neighbours(vectors, k=5, near_duplicate=0.8, seed=7)
    other = random_neighbours(vectors, k=5, near_duplicate=0.8, seed=8)
    assert (again.index == nb.index).all() and (other.index != nb.index).any()
    # not the nearest ones: over 30 questions the draw differs from the top 5
    nearest = select_neighbours(vectors, k=5)
    assert (np.sort(nearest.index, axis=1) != np.sort(nb.index, axis=1)).any()
    # questions 0 and 1 are near-duplicates and question 2 is not eligible: 0 and 1 have no
    # neighbour at all, 2 has both
    few = random_neighbours(vectors[:3], k=5, eligible=[True, True, False])
    assert few.mask.sum(axis=1).tolist() == [0, 0, 2]


def test_tqa_metric_and_sample_level_agreement_by_hand() -> None:
    metric = tqa_metric([[0.9, 0.4], [0.2, 0.0]], [[True, True], [True, False]],
                        [[0.5, 0.7], [0.6, 0.1]], [[True, True], [True, True]])
    assert metric == pytest.approx([0.9 - 0.7, 0.2 - 0.6])
    assert np.isnan(tqa_metric([[0.9]], [[False]], [[0.5]], [[True]])[0])
    # questions: metric prefers a, b, a, (tie), a, (unscored)
    found = sample_level_agreement([0.5, 0.1, 0.4, 0.3, 0.9, 0.5], [0.2, 0.6, 0.1, 0.3, 0.0, 0.1],
                                   [1.0, 0.0, 0.2, 0.5, 0.1, np.nan],
                                   [0.5, 0.3, 0.9, 0.1, 0.7, 0.0])
    # decided: questions 1, 2, 3 and 5; the score agrees on 1 and 2
    assert found == {"agree": 2, "n": 4, "metric_ties": 1}


def test_repeats_combine_to_mean_and_sample_std() -> None:
    def table(acc: float) -> dict[str, Comparison]:
        return {"a vs b": Comparison(1, {"tv": {"fewl": AccuracyCell(acc, 10, 0)}})}

    merged = combine_repeats([table(0.6), table(0.8), table(0.7)])
    cell = merged["a vs b"].cells["tv"]["fewl"]
    assert cell.accuracy == pytest.approx(0.7)
    assert cell.std == pytest.approx(0.1)  # sqrt(((-0.1)^2 + 0.1^2 + 0) / 2)
    assert cell.repeats == (0.6, 0.8, 0.7) and cell.n == 10
    assert merged["a vs b"].to_json()["tv"]["fewl"]["repeats"] == [0.6, 0.8, 0.7]
    assert combine_repeats([table(0.6)])["a vs b"].cells["tv"]["fewl"].std is None


def test_default_prompt_asks_for_a_high_level_negation() -> None:
    prompt = pair_prompt("Are birds mammals?", 3)
    assert "negates that wrong answer at a high level" in prompt
    assert "need not say what the right answer is" in prompt
    # the one-shot example's corrected answers deny the wrong one without naming the answer
    assert "Jupiter" not in prompt


def test_a_users_pair_prompt_is_filled_parsed_and_recorded(tmp_path: Path) -> None:
    path = tmp_path / "paper.txt"
    path.write_text('Give {r} "Wrong Answer / Non-Wrong Answer" pairs as JSON {"a": 1} for: '
                    "{question}\n", encoding="utf-8")
    prompt = PairPrompt.from_file(path)
    assert not prompt.builtin
    assert pair_prompt(" Why? ", 5, prompt.template) == (
        'Give 5 "Wrong Answer / Non-Wrong Answer" pairs as JSON {"a": 1} for: Why?\n')
    described = prompt.describe()
    assert described["source"] == str(path) and described["prefill"] is None
    assert len(described["sha256"]) == 64 and described["template"] == prompt.template
    assert PairPrompt().describe()["source"] == "builtin"
    reply = "Wrong Answer 1: Birds are mammals.\nNon-Wrong Answer 1: Birds are not in the " \
            "mammal class."
    backend = FakeBackend(responder=lambda request: reply)
    outcome = generate_pairs(LLMClient(backend), ["Are birds mammals?"], PairSettings(r=1),
                             prompt)
    assert outcome.pairs[0][0].corrected == "Birds are not in the mammal class."
    assert backend.history[0].prefill == ""  # the built-in template's prefill is not forced
    assert parse_pairs(reply) == outcome.pairs[0]
    empty = tmp_path / "empty.txt"
    empty.write_text("no placeholder here", encoding="utf-8")
    with pytest.raises(DataError, match="must contain"):
        PairPrompt.from_file(empty)
    with pytest.raises(DataError, match="cannot read"):
        PairPrompt.from_file(tmp_path / "missing.txt")
    assert PAIR_PROMPT == PairPrompt().template


@pytest.mark.parametrize(("kind", "file", "columns"), [
    ("chale", "chale.json", ["non-halu vs mid-halu", "non-halu vs halu"]),
    ("truthfulqa", "truthfulqa.csv", ["best vs first-incorrect"]),
    ("halueval", "halueval.json", ["right vs hallucinated"]),
])
def test_validate_prints_table_one_with_repeats(tmp_path: Path, kind: str, file: str,
                                                columns: list[str]) -> None:
    out = tmp_path / "val"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Write {r} pairs for: {question}\n", encoding="utf-8")
    result = fewl_cli(["validate", "--dataset", f"{kind}:{FORMATS / file}", *FAST,
                       "--neighbours-mode", "random", "--repeats", "2", "--pair-prompt",
                       str(prompt), "--out", str(out)], tmp_path / "c.sqlite")
    assert "mean ± std over 2 repeat(s)" in result.output
    for _, label in TABLE_ROWS:
        assert label in result.output
    for column in columns:
        assert column in result.output
    run = RunDir.open(out)
    results = run.results
    assert results["repeats"] == 2 and results["repeat_seeds"] == [0, 1]
    cell = results["validation"][columns[0]]["tv"]["fewl"]
    assert len(cell["repeats"]) == 2 and cell["std"] is not None
    assert cell["accuracy"] == pytest.approx(np.mean(cell["repeats"]))
    settings = run.info["config"]["settings"]
    assert settings["neighbours_mode"] == "random"
    assert settings["pair_prompt"]["source"] == str(prompt)
    assert "Figure 4" in (out / "report.html").read_text()


def test_repeats_reseed_the_stochastic_parts_only(tmp_path: Path, cache: Any) -> None:
    items = load_labelled(f"chale:{FORMATS / 'chale.json'}")
    settings = FewlSettings(references=("fake/pairs",), reference_samples=2,
                            pairs=PairSettings(r=3), similarity="hash/default", neighbours=1)
    with Context(cache=cache) as ctx:
        run_fewl_validate(items, settings, ctx, None, "chale", repeats=3)
        history = ctx.clients["fake/pairs"].backend.history  # type: ignore[attr-defined]
        pair_seeds = sorted({r.sampling.seed for r in history if "pairs" in r.messages[-1].content})
        ref_seeds = sorted({r.sampling.seed for r in history
                            if "pairs" not in r.messages[-1].content})
    assert pair_seeds == [0, 1, 2] and ref_seeds == [0, 1, 2]
    greedy = FewlSettings(references=("fake/pairs",), pairs=PairSettings(r=3),
                          similarity="hash/default", neighbours=1)
    with Context(cache=None) as ctx:
        run_fewl_validate(items, greedy, ctx, None, "chale", repeats=2)
        history = ctx.clients["fake/pairs"].backend.history  # type: ignore[attr-defined]
        greedy_seeds = {r.sampling.seed for r in history if "pairs" not in r.messages[-1].content}
    assert greedy_seeds == {0}  # one greedy reference answer: the same call every repeat
    with pytest.raises(ConfigError, match="repeats"), Context() as ctx:
        run_fewl_validate(items, settings, ctx, None, "chale", repeats=0)


def test_rank_reports_table_five(tmp_path: Path) -> None:
    from veracity.data.qa import load_items

    items = load_items(f"truthfulqa:{FORMATS / 'truthfulqa.csv'}")
    right, wrong = tmp_path / "right.jsonl", tmp_path / "wrong.jsonl"
    right.write_text("".join(json.dumps({"id": i.id, "answer": i.references[0]}) + "\n"
                             for i in items))
    wrong.write_text("".join(json.dumps({"id": i.id, "answer": i.metadata["incorrect_answers"][0]})
                             + "\n" for i in items))
    out = tmp_path / "rank"
    result = fewl_cli(["rank", "--dataset", f"truthfulqa:{FORMATS / 'truthfulqa.csv'}",
                       "--answers", str(right), "--answers", str(wrong), *FAST, "--out", str(out)],
                      tmp_path / "c.sqlite")
    level = RunDir.open(out).results["ranking"]["sample_level"]
    assert level["n_questions"] == len(items)
    (pair,) = level["pairs"]
    assert (pair["a"], pair["b"]) == ("right", "wrong")
    # a gold correct answer is its own best match: the metric prefers it on every question
    assert pair["with_penalty"]["n"] == len(items) and pair["with_penalty"]["metric_ties"] == 0
    for key in ("with_penalty", "without_penalty"):
        assert 0 <= pair[key]["agree"] <= pair[key]["n"]
    rec = next(RunDir.open(out).samples())
    assert rec["answers"]["right"]["tqa_metric"] > rec["answers"]["wrong"]["tqa_metric"]
    assert "sample-level ranking (Table 5)" in result.output
    assert "Table 5" in (out / "report.html").read_text()


def _judge(request: Any) -> str:
    """Grades by exact match with the reference the prompt shows; rates 2 / 0 likewise."""
    prompt = request.messages[-1].content
    if prompt.startswith("You are grading"):
        gold = prompt.split("Correct reference answers: ")[1].split("\n")[0]
        answer = prompt.split("Answer to grade: ")[1].split("\n")[0]
        return "CORRECT" if answer == gold else "INCORRECT"
    gold = prompt.split("Reference answer: ")[1].split("\n")[0]
    answer = prompt.split("Answer to rate: ")[1].split("\n")[0]
    return "Rating: 2" if answer == gold else "0 (wrong)" if answer == "nonsense" else "1"


def test_figures_two_and_three_from_a_judge(tmp_path: Path) -> None:
    from veracity.data.labelled import LabelledItem
    from veracity.methods.fewl.validation.figures import parse_rating
    from veracity.report import build_report

    golds = ["Paris", "Paris", "Rome", "Rome"]
    questions = ["capital of france", "seat of the french government", "capital of italy",
                 "where does the italian parliament sit"]
    items = [LabelledItem(f"q{i}", q, g, (("halu", f"not {g}"),), g, "good")
             for i, (q, g) in enumerate(zip(questions, golds, strict=True))]
    refs = tmp_path / "refs.jsonl"
    refs.write_text("".join(json.dumps({"id": f"q{i}", "references": [g, "nonsense", "close"]})
                            + "\n" for i, g in enumerate(golds)))
    settings = FewlSettings(references_file=refs, pairs_model="fake/pairs",
                            pairs=PairSettings(r=2), similarity="hash/default", neighbours=2,
                            near_duplicate=1.0)
    out = tmp_path / "run"
    with Context() as ctx:
        ctx.clients["test/judge"] = LLMClient(FakeBackend(responder=_judge))
        outcome = run_fewl_validate(items, settings, ctx, out, "toy", judge="test/judge")
    two = outcome.results["figures"]["figure2"]
    # every question has three neighbours (k = 10, only 3 others), one with the same gold answer
    assert two["per_question"] == [1, 1, 1, 1] and two["histogram"][:3] == [0, 4, 0]
    assert two["mean_correct"] == 1.0 and two["unjudged"] == 0
    three = outcome.results["figures"]["figure3"]["references"]
    assert three["refs.jsonl#0"]["counts"] == [0, 0, 4] and three["refs.jsonl#0"]["mean"] == 2.0
    assert three["refs.jsonl#1"]["counts"] == [4, 0, 0]
    assert three["refs.jsonl#2"]["counts"] == [0, 4, 0] and three["refs.jsonl#2"]["mean"] == 1.0
    assert (parse_rating("I'd say 2."), parse_rating("10 out of 12"), parse_rating("x")) == (
        2, None, None)
    html = build_report([out], out / "report.html").read_text()
    assert "Figure 2" in html and "Figure 3" in html and "Figure 4" in html


def test_validate_on_a_seeded_sample_with_repeats(tmp_path: Path) -> None:
    out = tmp_path / "val"
    fewl_cli(["validate", "--dataset", f"chale:{FORMATS / 'chale.json'}", *FAST, "--sample", "2",
              "--sample-seed", "5", "--repeats", "2", "--out", str(out)], tmp_path / "c.sqlite")
    run = RunDir.open(out)
    selection = run.info["config"]["selection"]
    assert (selection["sample"], selection["sample_seed"], selection["n_selected"]) == (2, 5, 2)
    assert [r["id"] for r in run.samples()] == selection["ids"]
    assert run.results["n_questions"] == 2 and run.results["repeats"] == 2
