"""FEWL maths on small hand-computed cases."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veracity.client import CachedEmbedder
from veracity.errors import ConfigError
from veracity.methods.fewl.core import (
    VARIANTS,
    LentReferences,
    activation,
    conjugate,
    expertise,
    fewl_terms,
    laziness_penalty,
    measurement_accuracy,
    score_texts,
    select_neighbours,
    single_weights,
    softmax_weights,
    table_texts,
    truthfulness,
    uniform_weights,
)
from veracity.methods.fewl.similarity import EmbeddingSimilarity

# hand values: g_tv(v) = tanh(v) / 2
G = {0.1: 0.0498340, 0.2: 0.0986877, 0.3: 0.1456563, 0.5: 0.2310586, 0.8: 0.3320184,
     0.9: 0.3581489}


def test_divergence_pairs() -> None:
    assert activation(0.5, "tv") == pytest.approx(0.2310586)
    assert conjugate(0.25, "tv") == pytest.approx(0.25)
    # JS: g(1) = log 2 - log(1 + e^-1); f*(g(1)) = -log(2 - e^g(1)) = v - log 2 + log(1 + e^-v)
    assert activation(1.0, "js") == pytest.approx(0.3798855)
    assert conjugate(activation(1.0, "js"), "js") == pytest.approx(0.6201145)
    assert activation(0.0, "js") == pytest.approx(0.0)
    assert conjugate(0.0, "js") == pytest.approx(0.0)
    # KL: g(v) = v, f*(t) = e^(t - 1)
    assert activation(0.5, "kl") == pytest.approx(0.5)
    assert conjugate(0.5, "kl") == pytest.approx(0.6065307)
    with pytest.raises(ConfigError, match="divergence"):
        activation(0.5, "hellinger")  # type: ignore[arg-type]


def test_expertise_is_mean_gap_over_valid_pairs() -> None:
    co = [[[0.9, 0.7], [0.4, 0.6]]]
    iw = [[[0.3, 0.5], [0.6, 0.6]]]
    assert expertise(co, iw, [[True, True]])[0] == pytest.approx([0.4, -0.1])
    assert expertise(co, iw, [[True, False]])[0] == pytest.approx([0.6, -0.2])
    assert np.isnan(expertise(co, iw, [[False, False]])).all()
    # the other [reconstructed] forms: -mean SIM(h_j, IW) and mean SIM(h_j, CO)
    assert expertise(co, iw, [[True, True]], "wrong")[0] == pytest.approx([-0.4, -0.6])
    assert expertise(co, iw, [[True, True]], "corrected")[0] == pytest.approx([0.8, 0.5])
    with pytest.raises(ConfigError, match="expertise"):
        expertise(co, iw, [[True, True]], "ratio")  # type: ignore[arg-type]


def test_softmax_weights_with_tau_and_mask() -> None:
    # softmax([0.4, -0.1]) = sigmoid(0.5) = 0.6224593
    assert softmax_weights([[0.4, -0.1]], [[True, True]])[0] == pytest.approx(
        [0.6224593, 0.3775407])
    # tau = 0.5 doubles the gap: sigmoid(1) = 0.7310586
    assert softmax_weights([[0.4, -0.1]], [[True, True]], tau=0.5)[0, 0] == pytest.approx(
        0.7310586)
    assert softmax_weights([[0.4, 9.0]], [[True, False]])[0] == pytest.approx([1.0, 0.0])
    assert np.isnan(softmax_weights([[0.4, 0.1]], [[False, False]])).all()
    assert np.isnan(softmax_weights([[np.nan, 0.1]], [[True, True]])).all()
    with pytest.raises(ConfigError, match="tau"):
        softmax_weights([[0.0]], [[True]], tau=0.0)


def test_uniform_and_single_weights() -> None:
    mask = [[True, True, False], [False, True, True]]
    assert uniform_weights(mask) == pytest.approx(np.array([[0.5, 0.5, 0], [0, 0.5, 0.5]]))
    single = single_weights(mask)
    assert single[0] == pytest.approx([1.0, 0.0, 0.0])
    assert np.isnan(single[1]).all()  # reference 0 missing on question 1


def test_truthfulness_hand_computed() -> None:
    lam = [[0.6224593, 0.3775407]]
    # 0.6224593 * g(0.8) + 0.3775407 * g(0.2)
    expected = 0.6224593 * G[0.8] + 0.3775407 * G[0.2]
    assert expected == pytest.approx(0.2439265, abs=1e-6)
    assert truthfulness(lam, [[0.8, 0.2]])[0] == pytest.approx(0.2439265, abs=1e-6)
    # a zero-weight (missing) reference is ignored even if its similarity is NaN
    assert truthfulness([[1.0, 0.0]], [[0.8, np.nan]])[0] == pytest.approx(G[0.8], abs=1e-6)


def test_laziness_penalty_hand_computed() -> None:
    sims = [[[0.5, 0.1], [0.3, 0.9]]]  # (Q=1, K=2, J=2)
    lam = [[0.5, 0.5]]
    # j=0: mean(g(.5), g(.3)) = 0.1883575; j=1: mean(g(.1), g(.9)) = 0.2039915 -> 0.1961745
    everything = np.ones((1, 2, 2), dtype=bool)
    assert laziness_penalty(lam, sims, everything)[0] == pytest.approx(0.1961745, abs=1e-6)
    # neighbour 1 has no reference 0: j=0 uses g(.5) only -> 0.2175250
    partial = np.array([[[True, True], [False, True]]])
    assert laziness_penalty(lam, sims, partial)[0] == pytest.approx(0.2175250, abs=1e-6)
    # no neighbours at all: no penalty
    assert laziness_penalty(lam, sims, np.zeros((1, 2, 2), bool))[0] == 0.0
    # KL: f*(g(v)) = e^(v-1); one neighbour at 0.5 -> e^-0.5
    assert laziness_penalty([[1.0]], [[[0.5]]], [[[True]]], "kl")[0] == pytest.approx(0.6065307)


def test_fewl_terms_and_nan_rows() -> None:
    sims_nb = [[[0.5, 0.1], [0.3, 0.9]], [[0.5, 0.1], [0.3, 0.9]]]
    valid = np.ones((2, 2, 2), dtype=bool)
    w = np.array([[0.5, 0.5], [np.nan, np.nan]])
    terms = fewl_terms(w, [[0.8, 0.2], [0.8, 0.2]], sims_nb, valid, "tv")
    t = 0.5 * G[0.8] + 0.5 * G[0.2]
    assert terms.truthfulness[0] == pytest.approx(t, abs=1e-6)
    assert terms.fewl[0] == pytest.approx(t - 0.1961745, abs=1e-6)
    assert np.isnan(terms.fewl[1])
    unpenalised = fewl_terms(w, [[0.8, 0.2], [0.8, 0.2]], sims_nb, valid, "tv", penalised=False)
    assert unpenalised.penalty[0] == 0.0 and unpenalised.fewl[0] == pytest.approx(t, abs=1e-6)


def test_neighbours_exclude_self_near_duplicates_and_handle_fewer_than_k() -> None:
    vectors = [[1, 0], [0.9, 0.1], [0.6, 0.8], [0, 1], [-1, 0]]
    # cos(q0, q1) = 0.9939 > 0.8: a near-duplicate; cos(q0, q2) = 0.6, q3 0, q4 -1
    nb = select_neighbours(vectors, k=2)
    assert list(nb.index[0]) == [2, 3] and nb.mask[0].all()
    assert nb.cosine[0] == pytest.approx([0.6, 0.0])
    wide = select_neighbours(vectors, k=10)
    assert list(wide.index[0][wide.mask[0]]) == [2, 3, 4]
    assert wide.mask[0].sum() == 3  # fewer than K available: the rest are masked
    assert 1 not in wide.index[0][wide.mask[0]] and 0 not in wide.index[0][wide.mask[0]]
    looser = select_neighbours(vectors, k=1, near_duplicate=0.999)
    assert list(looser.index[0]) == [1]
    eligible = select_neighbours(vectors, k=2, eligible=[True, True, False, True, True])
    assert list(eligible.index[0]) == [3, 4]
    alone = select_neighbours([[1.0, 0.0]], k=3)
    assert not alone.mask.any()
    blocks = select_neighbours(vectors, k=2, block=2)
    assert (blocks.index == nb.index).all() and (blocks.mask == nb.mask).all()


def test_measurement_accuracy_counts_ties_half() -> None:
    result = measurement_accuracy([1.0, 2.0, 3.0, np.nan], [0.0, 2.0, 4.0, 1.0])
    assert result == {"accuracy": pytest.approx(0.5), "n": 3, "ties": 1}
    assert math.isnan(float(measurement_accuracy([np.nan], [1.0])["accuracy"]))


class DictEmbedder:
    """Fixed 2-d vectors per text, so every similarity is known."""

    spec = "dict/test"

    def __init__(self, vectors: dict[str, Sequence[float]]) -> None:
        self.vectors = vectors
        self.calls: list[list[str]] = []

    def identity(self) -> dict[str, Any]:
        return {}

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls.append(list(texts))
        return np.array([self.vectors[t] for t in texts], dtype=np.float32)


def _unit(angle_degrees: float) -> list[float]:
    a = math.radians(angle_degrees)
    return [math.cos(a), math.sin(a)]


def test_score_texts_matches_the_formulas_and_embeds_each_text_once() -> None:
    names = ["ans", "ref-a", "ref-b", "iw", "co", "gold", "ans2", "ref-c"]
    vecs = {n: _unit(d) for n, d in zip(names, [0, 10, 80, 90, 20, 15, 60, 30], strict=True)}
    embedder = CachedEmbedder(DictEmbedder(vecs))
    sim = EmbeddingSimilarity(embedder, "affine")
    nb = select_neighbours([[1.0, 0.0], [0.0, 1.0]], k=1)
    scores = score_texts(
        references=[["ref-a", "ref-b"], ["ref-c", ""]],
        pairs=[[("iw", "co")], [("iw", "co"), ("iw", "co")]],
        answer_sets={"m": ["ans", "ans2"], "empty": ["", None]},
        similarity=sim, neighbours=nb, tau=1.0, labelled=[("gold", ["iw"]), ("gold", [])],
    )
    assert embedder.stats.texts_embedded == len(names) == scores.distinct_texts

    def s(a: str, b: str) -> float:
        return (1 + float(np.dot(vecs[a], vecs[b]))) / 2

    # expertise of question 0's references; ref-c alone on question 1 (empty ref = missing)
    e0 = [s("ref-a", "co") - s("ref-a", "iw"), s("ref-b", "co") - s("ref-b", "iw")]
    assert scores.expertise[0] == pytest.approx(e0)
    assert list(scores.ref_mask[1]) == [True, False]
    lam = np.exp(e0) / np.exp(e0).sum()
    assert scores.weights[0] == pytest.approx(lam)
    assert scores.weights[1] == pytest.approx([1.0, 0.0])
    g = lambda v: 0.5 * math.tanh(v)  # noqa: E731
    t0 = lam[0] * g(s("ans", "ref-a")) + lam[1] * g(s("ans", "ref-b"))
    l0 = lam[0] * g(s("ans", "ref-c"))  # neighbour of q0 is q1, whose only reference is ref-c
    fewl = scores.sets["m"]["tv"]["fewl"]
    assert fewl.truthfulness[0] == pytest.approx(t0)
    assert fewl.penalty[0] == pytest.approx(l0)
    assert fewl.fewl[0] == pytest.approx(t0 - l0)
    single = scores.sets["m"]["tv"]["single"].fewl[0]
    assert single == pytest.approx(g(s("ans", "ref-a")))
    uniform = scores.sets["m"]["tv"]["fewl_uniform"].fewl[0]
    assert uniform == pytest.approx(0.5 * g(s("ans", "ref-a")) + 0.5 * g(s("ans", "ref-b"))
                                    - 0.5 * g(s("ans", "ref-c")))
    # ideal λ from both labels: the gap between the labelled correct and hallucinated answer
    ideal = np.exp([s("ref-a", "gold") - s("ref-a", "iw"), s("ref-b", "gold") - s("ref-b", "iw")])
    assert scores.ideal_weights is not None
    assert scores.ideal_weights[0] == pytest.approx(ideal / ideal.sum())
    assert np.isnan(scores.ideal_weights[1]).all()  # no hallucinated answer: no oracle
    assert set(scores.sets["m"]["js"]) == set(VARIANTS)
    assert np.isnan(scores.sets["empty"]["tv"]["fewl"].fewl).all()


def test_questions_without_pairs_are_not_scored() -> None:
    embedder = CachedEmbedder(DictEmbedder({"a": [1, 0], "r": [0.8, 0.6], "w": [0, 1],
                                            "c": [1, 0]}))
    nb = select_neighbours([[1.0, 0.0], [0.0, 1.0]], k=1)
    scores = score_texts([["r"], ["r"]], [[("w", "c")], []], {"m": ["a", "a"]},
                         EmbeddingSimilarity(embedder), nb)
    assert list(scores.scorable) == [True, False]
    for variant in VARIANTS[:5]:
        values = scores.sets["m"]["tv"][variant].fewl
        assert np.isfinite(values[0]) and np.isnan(values[1])


def test_references_lent_as_vectors_score_as_their_texts() -> None:
    """Question 0 scored alone, question 1 only lending its references to 0's penalty: given as
    vectors (a streamed chunk's neighbours) they give the same digits as their texts; a
    similarity that is not an embedding cannot take them."""
    names = ["ans", "ref-a", "ref-b", "iw", "co", "ref-c", "ref-d"]
    vecs = {n: _unit(d) for n, d in zip(names, [0, 10, 80, 90, 20, 30, 55], strict=True)}
    sim = EmbeddingSimilarity(CachedEmbedder(DictEmbedder(vecs)), "affine")
    nb = select_neighbours([[1.0, 0.0], [0.6, 0.8]], k=1)
    common = dict(pairs=[[("iw", "co")], []], answer_sets={"m": ["ans", None]},
                  similarity=sim, neighbours=nb, widths=(3, 1), scored=1)
    texts = score_texts(references=[["ref-a", "ref-b"], ["ref-c", "", "ref-d"]], **common)
    lent = LentReferences(np.array([1, 1]), np.array([0, 2]),
                          np.stack([vecs["ref-c"], vecs["ref-d"]]).astype(np.float32))
    vectors = score_texts(references=[["ref-a", "ref-b"], []], lent=lent, **common)
    for variant in VARIANTS[:7]:
        a, b = texts.sets["m"]["tv"][variant], vectors.sets["m"]["tv"][variant]
        assert a.fewl.tolist() == b.fewl.tolist() and a.penalty.tolist() == b.penalty.tolist()
    assert texts.sets["m"]["tv"]["fewl"].penalty[0] != 0.0
    with pytest.raises(ConfigError, match="embedding similarity"):
        score_texts(references=[["ref-a", "ref-b"], []], lent=lent, **{
            **common, "similarity": _NotEmbedding()})


class _NotEmbedding:
    spec = "pairs/test"

    def describe(self) -> dict[str, str]:
        return {"kind": "test"}

    def table(self, texts: object) -> object:
        return lambda a, b: np.zeros(np.shape(a))


_WORDS = st.sampled_from(["a", "b", "c", " ", "", "d e"])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_table_texts_are_the_texts_the_scoring_gives_its_table(data: st.DataObject) -> None:
    """What a streamed run embeds ahead of a chunk's scoring (``table_texts``) is the list the
    scoring itself hands its similarity, text for text and in order, whatever the repeats,
    blanks, missing answers, labels and scored rows."""
    q = data.draw(st.integers(1, 4))
    refs = [data.draw(st.lists(_WORDS, max_size=3)) for _ in range(q)]
    pairs = [data.draw(st.lists(st.tuples(_WORDS, _WORDS), max_size=3)) for _ in range(q)]
    answers = {name: data.draw(st.lists(st.one_of(st.none(), _WORDS), min_size=q, max_size=q))
               for name in data.draw(st.lists(st.sampled_from(["x", "y"]), unique=True))}
    labelled = data.draw(st.one_of(st.none(), st.lists(
        st.tuples(_WORDS, st.lists(_WORDS, max_size=2)), min_size=q, max_size=q)))
    scored = data.draw(st.one_of(st.none(), st.integers(1, q)))
    asked: list[list[str]] = []

    class Recorded:
        spec = "recorded"

        def describe(self) -> dict[str, Any]:
            return {}

        def table(self, texts: Sequence[str]) -> Any:
            asked.append(list(texts))
            return lambda a, b: np.zeros(np.shape(a))

    neighbours = select_neighbours(np.eye(q, 2) + 0.1, k=1)
    score_texts(refs, pairs, answers, Recorded(), neighbours, labelled=labelled, scored=scored)
    assert asked == [table_texts(refs, pairs, answers, labelled, scored)]
