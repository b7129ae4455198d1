"""FEWL (Wei et al. 2024): truthfulness of an answer against expertise-weighted references.

Pure, vectorised numpy maths over similarity arrays; no model, no text. Shapes: Q questions,
J references, R intentionally-wrong / corrected pairs, K neighbour questions. Ragged inputs
are padded, and a boolean mask says which slots hold real values.

- expertise  s_j(x) = (1/R) sum_r [SIM(h_j(x), CO_r) - SIM(h_j(x), IW_r)]       [reconstructed]
- weights    lambda_j(x) = softmax_j(s_j(x) / tau), tau = 1                        [reconstructed]
- truth      T(x) = sum_j lambda_j(x) g(SIM(h(x), h_j(x)))
- penalty    L(x) = sum_j lambda_j(x) (1/K) sum_{x' in NN_K(x)} f*(g(SIM(h(x), h_j(x'))))
             NN_K: the K most similar other questions, near-duplicates (> 0.8) excluded  [reconstructed]
- FEWL(h(x)) = T(x) - L(x); higher means less hallucination.

(g, f*) are the f-GAN pairs of the chosen f-divergence: total variation (the paper's
default), Jensen-Shannon and KL. For total variation f* is the identity, so L is the
weighted mean of g over the neighbours' references.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from veracity.errors import ConfigError
from veracity.methods.fewl.similarity import EmbeddingTable, Similarity

Divergence = Literal["tv", "js", "kl"]
DIVERGENCES: tuple[Divergence, ...] = ("tv", "js", "kl")
ExpertiseForm = Literal["gap", "wrong", "corrected"]
EXPERTISE_FORMS: tuple[ExpertiseForm, ...] = ("gap", "wrong", "corrected")
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

VARIANTS: tuple[str, ...] = (
    "single", "single_penalty", "multi_uniform_no_penalty", "multi_expertise_no_penalty",
    "single_best_no_penalty", "fewl", "fewl_uniform", "fewl_ideal",
)
"""The rows of the paper's Tables 1, 3 and 10 and of C.8, in table order, each named after
what it computes:

- ``single``: the first reference alone, no penalty (Table 1 "Single").
- ``single_penalty``: the first reference alone, with the penalty ("Single + Penalty").
- ``multi_uniform_no_penalty``: every reference weighted 1/J, no penalty: "Multi + No
  Penalty" as section 4.1 defines it.
- ``multi_expertise_no_penalty``: expertise weights λ, no penalty: the same row as appendix
  C.8 names it ("expertise weighting").
- ``single_best_no_penalty``: the reference of highest expertise s_j(x) alone, no penalty
  (C.8 "single-best").
- ``fewl``: expertise weights with the penalty (FEWL).
- ``fewl_uniform``: weights 1/J with the penalty (Table 2 "FEWL (Uniform)").
- ``fewl_ideal``: weights from the labelled answers, with the penalty (Tables 2 and 9,
  "FEWL (Ideal λ)"); only where a dataset has labels.
"""
LEGACY_VARIANTS: dict[str, str] = {
    "uniform": "fewl_uniform", "fewl_no_penalty": "multi_expertise_no_penalty",
    "ideal": "fewl_ideal",
}
"""Names earlier runs stored, and what each is called now (same computation)."""


def _check_divergence(divergence: str) -> None:
    if divergence not in DIVERGENCES:
        raise ConfigError(f"unknown divergence '{divergence}'; known: {', '.join(DIVERGENCES)}")


def activation(v: npt.ArrayLike, divergence: Divergence = "tv") -> Floats:
    """g(v), the f-GAN output activation: tv ½·tanh(v), js log 2 − log(1 + e^−v), kl v."""
    _check_divergence(divergence)
    x = np.asarray(v, dtype=np.float64)
    if divergence == "tv":
        return 0.5 * np.tanh(x)
    if divergence == "js":
        return math.log(2.0) - np.logaddexp(0.0, -x)
    return x.copy()


def conjugate(t: npt.ArrayLike, divergence: Divergence = "tv") -> Floats:
    """f*(t), the convex conjugate: tv t, js −log(2 − e^t), kl e^(t−1)."""
    _check_divergence(divergence)
    x = np.asarray(t, dtype=np.float64)
    if divergence == "tv":
        return x.copy()
    if divergence == "js":
        return -np.log(2.0 - np.exp(x))
    return np.exp(x - 1.0)


def expertise(
    sim_corrected: npt.ArrayLike,
    sim_wrong: npt.ArrayLike,
    pair_mask: npt.ArrayLike,
    form: ExpertiseForm = "gap",
) -> Floats:
    """s (Q, J) from SIM(h_j, CO_r) and SIM(h_j, IW_r), both (Q, J, R); pair_mask (Q, R).

    [reconstructed] ``gap`` (default): mean of SIM(h_j, CO_r) − SIM(h_j, IW_r); ``wrong``:
    mean of −SIM(h_j, IW_r) (disagreement with the wrong answers only); ``corrected``: mean
    of SIM(h_j, CO_r). NaN where a question has no pairs: it is never scored on an empty set.
    """
    if form not in EXPERTISE_FORMS:
        raise ConfigError(f"unknown expertise form '{form}'; known: {', '.join(EXPERTISE_FORMS)}")
    co = np.asarray(sim_corrected, dtype=np.float64)
    iw = np.asarray(sim_wrong, dtype=np.float64)
    mask = np.asarray(pair_mask, dtype=bool)[:, None, :]
    values = co - iw if form == "gap" else -iw if form == "wrong" else co
    diff = np.where(mask, values, 0.0)
    count = mask.sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, diff.sum(axis=2) / count, np.nan)


def softmax_weights(scores: npt.ArrayLike, ref_mask: npt.ArrayLike, tau: float = 1.0) -> Floats:
    """lambda (Q, J) = softmax over the valid references of scores / tau; 0 off the mask.

    A row with no valid reference, or a NaN score on a valid one, gives a NaN row.
    """
    if not tau > 0:
        raise ConfigError(f"softmax temperature tau must be > 0, got {tau}")
    s = np.asarray(scores, dtype=np.float64)
    mask = np.asarray(ref_mask, dtype=bool)
    z = np.where(mask, s / tau, -np.inf)
    with np.errstate(invalid="ignore"):
        top = np.max(z, axis=1, keepdims=True)
        e = np.where(mask, np.exp(z - top), 0.0)
        w: Floats = e / e.sum(axis=1, keepdims=True)
    bad = ~mask.any(axis=1) | np.any(mask & np.isnan(s), axis=1)
    w[bad] = np.nan
    return w


def uniform_weights(ref_mask: npt.ArrayLike) -> Floats:
    """lambda_j = 1 / (number of valid references); NaN rows where there are none."""
    mask = np.asarray(ref_mask, dtype=bool)
    count = mask.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, mask / count, np.nan)


def single_weights(ref_mask: npt.ArrayLike, index: int = 0) -> Floats:
    """All weight on reference ``index``; NaN rows where that reference is missing."""
    mask = np.asarray(ref_mask, dtype=bool)
    w = np.zeros(mask.shape, dtype=np.float64)
    w[:, index] = 1.0
    w[~mask[:, index]] = np.nan
    return w


def single_best_weights(scores: npt.ArrayLike, ref_mask: npt.ArrayLike) -> Floats:
    """All weight on the valid reference of highest score (ties: the first); NaN rows where
    no valid reference has a finite score."""
    s = np.asarray(scores, dtype=np.float64)
    mask = np.asarray(ref_mask, dtype=bool)
    ranked = np.where(mask & np.isfinite(s), s, -np.inf)
    w = np.zeros(mask.shape, dtype=np.float64)
    w[np.arange(mask.shape[0]), np.argmax(ranked, axis=1)] = 1.0
    w[~np.isfinite(ranked).any(axis=1)] = np.nan
    return w


def truthfulness(
    weights: npt.ArrayLike, sim_answer_refs: npt.ArrayLike, divergence: Divergence = "tv"
) -> Floats:
    """T (Q,) = sum_j lambda_j g(SIM(h, h_j)); weights and sims (Q, J), 0-weight slots ignored."""
    w = np.asarray(weights, dtype=np.float64)
    g = activation(np.nan_to_num(np.asarray(sim_answer_refs, dtype=np.float64)), divergence)
    out: Floats = np.sum(np.where(w != 0, w * g, 0.0), axis=1)
    return out


def laziness_penalty(
    weights: npt.ArrayLike,
    sim_answer_neighbour_refs: npt.ArrayLike,
    valid: npt.ArrayLike,
    divergence: Divergence = "tv",
) -> Floats:
    """L (Q,) = sum_j lambda_j mean_k f*(g(SIM(h(x), h_j(x'_k)))).

    sims and valid are (Q, K, J); the mean runs over the valid neighbours of each j, and a
    reference with no valid neighbour adds 0 (so a question with no neighbours has L = 0).
    """
    w = np.asarray(weights, dtype=np.float64)
    ok = np.asarray(valid, dtype=bool)
    sims = np.nan_to_num(np.asarray(sim_answer_neighbour_refs, dtype=np.float64))
    terms = np.where(ok, conjugate(activation(sims, divergence), divergence), 0.0)
    count = ok.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_ref = np.where(count > 0, terms.sum(axis=1) / np.maximum(count, 1), 0.0)
    out: Floats = np.sum(np.where(w != 0, w * per_ref, 0.0), axis=1)
    return out


class Terms(NamedTuple):
    """Per-question truthfulness, penalty and their difference, FEWL (all (Q,))."""

    truthfulness: Floats
    penalty: Floats
    fewl: Floats


def fewl_terms(
    weights: npt.ArrayLike,
    sim_answer_refs: npt.ArrayLike,
    sim_answer_neighbour_refs: npt.ArrayLike,
    neighbour_valid: npt.ArrayLike,
    divergence: Divergence = "tv",
    penalised: bool = True,
) -> Terms:
    """T, L and FEWL = T − L (or T alone when not penalised); NaN where the weights are NaN."""
    w = np.asarray(weights, dtype=np.float64)
    undefined = np.isnan(w).any(axis=1)
    safe = np.nan_to_num(w)
    t = truthfulness(safe, sim_answer_refs, divergence)
    if penalised:
        pen = laziness_penalty(safe, sim_answer_neighbour_refs, neighbour_valid, divergence)
    else:
        pen = np.zeros_like(t)
    t[undefined] = np.nan
    pen[undefined] = np.nan
    return Terms(t, pen, t - pen)


@dataclass(frozen=True)
class Neighbours:
    """NN_K of every question: indices (Q, K), which slots are real (Q, K), their cosine."""

    index: Ints
    mask: Bools
    cosine: Floats


ColumnBlock = Callable[[int, int], Floats]
"""Unit question vectors of rows [start, stop) as float64: how a neighbour search reads the
questions it compares against (an array in memory, or a file mapped chunk by chunk)."""
COLUMN_BLOCK = 8192
"""Questions compared at once: a row block x this many cosines in memory."""


def unit_rows(vectors: npt.ArrayLike) -> Floats:
    """Rows scaled to unit length in float64 (zero rows stay zero); each row on its own, so
    a block of rows gives the same digits as the whole matrix."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    out: Floats = np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)
    return out


def nearest_block(
    rows: Floats, first: int, columns: ColumnBlock, n: int, k: int, near_duplicate: float,
    eligible: Bools, column_block: int = COLUMN_BLOCK,
) -> Neighbours:
    """NN_K of the unit rows ``rows`` (questions first, first + 1, ...) among all n questions,
    read ``column_block`` at a time through ``columns``: memory is rows x column_block
    whatever n is. The same choice as a stable sort of each whole row by falling cosine
    (ties to the lower index), skipping itself, near-duplicates and non-eligible questions.
    """
    size = rows.shape[0]
    best = np.full((size, k), -np.inf)
    best_index = np.zeros((size, k), dtype=np.int64)
    local = np.arange(size)
    own = first + local
    for start in range(0, n, column_block):
        stop = min(start + column_block, n)
        cos = rows @ columns(start, stop).T
        cos[cos > near_duplicate] = -np.inf  # in place: a block is the largest array here
        cos[:, ~eligible[start:stop]] = -np.inf
        inside = (own >= start) & (own < stop)
        cos[local[inside], own[inside] - start] = -np.inf
        best, best_index = _top(best, best_index, cos, start, k)
    mask = np.isfinite(best)
    return Neighbours(np.where(mask, best_index, 0), mask, np.where(mask, best, np.nan))


def _top(best: Floats, best_index: Ints, cos: Floats, start: int,
         k: int) -> tuple[Floats, Ints]:
    """Per row, the k largest finite values among the best so far and a block of cosines
    (columns start, start + 1, ...), ties to the lower index, padded with -inf / 0. Only the
    block's values at or above its own k-th largest can enter, and every one of them is
    looked at, so the order is exact."""
    size, width = cos.shape
    out = np.full((size, k), -np.inf)
    out_index = np.zeros((size, k), dtype=np.int64)
    if k == 0:
        return out, out_index
    take_k = min(k, width)
    if take_k:
        kth = np.partition(cos, width - take_k, axis=1)[:, width - take_k]
        # a row short of finite values has -inf as its k-th: the lowest float keeps them out
        row, col = np.nonzero(cos >= np.maximum(kth, np.finfo(np.float64).min)[:, None])
        found, at = cos[row, col], col + start
    else:
        row = at = np.zeros(0, np.int64)
        found = np.zeros(0)
    old_row, old_col = np.nonzero(np.isfinite(best))
    row = np.concatenate([old_row, row])
    found = np.concatenate([best[old_row, old_col], found])
    at = np.concatenate([best_index[old_row, old_col], at])
    order = np.lexsort((at, -found, row))
    row, found, at = row[order], found[order], at[order]
    starts = np.searchsorted(row, np.arange(size))
    rank = np.arange(row.size) - starts[row]
    take = rank < k
    out[row[take], rank[take]] = found[take]
    out_index[row[take], rank[take]] = at[take]
    return out, out_index


def select_neighbours(
    question_vectors: npt.ArrayLike,
    k: int,
    near_duplicate: float = 0.8,
    eligible: npt.ArrayLike | None = None,
    block: int = 1024,
    column_block: int = COLUMN_BLOCK,
) -> Neighbours:
    """The k most similar other questions by cosine, excluding itself, near-duplicates
    (cosine > near_duplicate) and non-eligible questions. Fewer than k available: the
    remaining slots are masked out. Ties go to the lower index. [reconstructed]

    Rows go ``block`` at a time (:func:`nearest_block`), as a streamed run reads them.
    """
    if k < 0:
        raise ConfigError(f"number of neighbours must be >= 0, got {k}")
    unit = unit_rows(question_vectors)
    parts = [nb for _, nb in neighbour_blocks(lambda a, b: unit[a:b], unit.shape[0], k,
                                              near_duplicate, eligible, block, column_block)]
    if not parts:
        return Neighbours(np.zeros((0, k), np.int64), np.zeros((0, k), bool), np.zeros((0, k)))
    return Neighbours(np.concatenate([p.index for p in parts]),
                      np.concatenate([p.mask for p in parts]),
                      np.concatenate([p.cosine for p in parts]))


def neighbour_blocks(
    unit: ColumnBlock, n: int, k: int, near_duplicate: float = 0.8,
    eligible: npt.ArrayLike | None = None, block: int = 1024, column_block: int = COLUMN_BLOCK,
) -> Iterator[tuple[int, Neighbours]]:
    """(first row, NN_K of rows first..first + block) for every block of the n questions
    whose unit vectors ``unit`` reads: the whole search in memory bounded by block x
    column_block. Blocks always start at multiples of ``block``, so a search over a matrix in
    memory and one over a file multiply the same shapes and give the same digits."""
    if k < 0:
        raise ConfigError(f"number of neighbours must be >= 0, got {k}")
    ok = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    for start in range(0, n, block):
        stop = min(start + block, n)
        # a copy: numpy multiplies a matrix by its own transpose with another BLAS routine
        # (syrk), whose digits differ from the product of two arrays a file gives
        rows = np.array(unit(start, stop), dtype=np.float64, copy=True)
        yield start, nearest_block(rows, start, unit, n, k, near_duplicate, ok, column_block)


def measurement_accuracy(better: npt.ArrayLike, worse: npt.ArrayLike) -> dict[str, float | int]:
    """Share of questions where the better answer scores higher (ties count ½).

    Only questions where both scores are finite count; returns accuracy, n and ties.
    """
    b = np.asarray(better, dtype=np.float64)
    w = np.asarray(worse, dtype=np.float64)
    both = np.isfinite(b) & np.isfinite(w)
    n = int(both.sum())
    if n == 0:
        return {"accuracy": math.nan, "n": 0, "ties": 0}
    wins = float((b[both] > w[both]).sum())
    ties = int((b[both] == w[both]).sum())
    return {"accuracy": (wins + 0.5 * ties) / n, "n": n, "ties": ties}


def tqa_metric(sim_correct: npt.ArrayLike, correct_mask: npt.ArrayLike,
               sim_incorrect: npt.ArrayLike, incorrect_mask: npt.ArrayLike) -> Floats:
    """TruthfulQA's "diff" score of an answer: its highest similarity to a gold correct answer
    minus its highest similarity to a gold incorrect one; inputs (Q, C) and (Q, I) with masks.
    NaN where either side has no answer."""
    c = np.where(np.asarray(correct_mask, bool), np.asarray(sim_correct, np.float64), -np.inf)
    i = np.where(np.asarray(incorrect_mask, bool), np.asarray(sim_incorrect, np.float64), -np.inf)
    best_c, best_i = c.max(axis=1, initial=-np.inf), i.max(axis=1, initial=-np.inf)
    out: Floats = np.where(np.isfinite(best_c) & np.isfinite(best_i), best_c - best_i, np.nan)
    return out


def sample_level_agreement(metric_a: npt.ArrayLike, metric_b: npt.ArrayLike,
                           score_a: npt.ArrayLike, score_b: npt.ArrayLike) -> dict[str, int]:
    """The paper's Table 5: over questions where the gold metric prefers one of two answers
    (no tie, both scored), how many times the score prefers the same one.

    Returns ``agree`` (the count), ``n`` (questions compared) and ``metric_ties`` (questions
    left out because the metric could not tell the two answers apart).
    """
    ma, mb = np.asarray(metric_a, np.float64), np.asarray(metric_b, np.float64)
    sa, sb = np.asarray(score_a, np.float64), np.asarray(score_b, np.float64)
    finite = np.isfinite(ma) & np.isfinite(mb) & np.isfinite(sa) & np.isfinite(sb)
    decided = finite & (ma != mb)
    agree = decided & (np.sign(ma - mb) == np.sign(sa - sb))
    return {"agree": int(agree.sum()), "n": int(decided.sum()),
            "metric_ties": int((finite & (ma == mb)).sum())}


# --- from texts to arrays: one distinct-text table, index arrays, one similarity pass ----


@dataclass
class FewlScores:
    """Everything FEWL computed for one dataset; arrays are indexed by question."""

    expertise: Floats
    """s_j(x), (Q, J); NaN where a question has no pairs or the reference is missing."""
    weights: Floats
    """lambda_j(x), (Q, J); NaN rows for questions that cannot be scored."""
    ideal_weights: Floats | None
    """Oracle lambda from the labelled answers (see ``score_texts``); None without labels."""
    agreement_wrong: Floats
    """Mean SIM(h_j(x), IW_r(x)) over a question's pairs, (Q, J): Figure 4's IW boxes."""
    agreement_corrected: Floats
    """Mean SIM(h_j(x), CO_r(x)), (Q, J): Figure 4's CO boxes."""
    ref_mask: Bools
    pair_count: Ints
    scorable: Bools
    """At least ``min_pairs`` pairs and one reference: only these questions get scores."""
    neighbours: Neighbours
    sets: dict[str, dict[str, dict[str, Terms]]]
    """answer set -> divergence -> variant (see VARIANTS) -> Terms."""
    distinct_texts: int


@dataclass(frozen=True)
class LentReferences:
    """References of the rows past the scored ones given as vectors, not texts (a streamed
    chunk's neighbours, whose reference vectors are in a file): vector i is the reference in
    slot ``slots[i]`` of row ``rows[i]``. Only an embedding similarity takes them."""

    rows: Ints
    slots: Ints
    vectors: npt.NDArray[np.float32]
    scaled: bool = False
    """The vectors are already scaled by
    :func:`~veracity.methods.fewl.similarity.unit_vectors` (the table copies them)."""


class _Texts:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def add(self, text: str) -> int:
        return self.index.setdefault(text, len(self.index))


@dataclass
class _Gathered:
    """Every distinct text of a scoring, in the order the similarity table gets them, and
    where each question's references, pairs, answers and labels are in it."""

    texts: _Texts
    ref_idx: Ints
    ref_mask: Bools
    iw_idx: Ints
    co_idx: Ints
    pair_mask: Bools
    answers: dict[str, tuple[Ints, Bools]]
    lab_good: Ints
    lab_bad: Ints
    lab_mask: Bools
    m: int
    """Questions scored (the rest lend their references)."""


def _gather(references: Sequence[Sequence[str]], pairs: Sequence[Sequence[tuple[str, str]]],
            answer_sets: Mapping[str, Sequence[str | None]],
            labelled: Sequence[tuple[str, Sequence[str]]] | None, widths: tuple[int, int],
            scored: int | None) -> _Gathered:
    q = len(references)
    texts = _Texts()
    j = max(max((len(r) for r in references), default=0), widths[0])
    r = max(max((len(p) for p in pairs), default=0), widths[1])
    ref_idx = np.zeros((q, max(j, 1)), dtype=np.int64)
    ref_mask = np.zeros((q, max(j, 1)), dtype=bool)
    iw_idx = np.zeros((q, max(r, 1)), dtype=np.int64)
    co_idx = np.zeros_like(iw_idx)
    pair_mask = np.zeros((q, max(r, 1)), dtype=bool)
    for row, (refs, qpairs) in enumerate(zip(references, pairs, strict=True)):
        for col, text in enumerate(refs):
            if text.strip():
                ref_idx[row, col], ref_mask[row, col] = texts.add(text), True
        for col, (wrong, corrected) in enumerate(qpairs):
            iw_idx[row, col], co_idx[row, col] = texts.add(wrong), texts.add(corrected)
            pair_mask[row, col] = True
    answers: dict[str, tuple[Ints, Bools]] = {}
    for name, values in answer_sets.items():
        if len(values) != q:
            raise ConfigError(f"answer set '{name}' has {len(values)} answers for {q} questions")
        ok = np.array([bool(v and v.strip()) for v in values], dtype=bool)
        idx = np.array([texts.add(v) if v and v.strip() else 0 for v in values], dtype=np.int64)
        answers[name] = (idx, ok)
    lab_width = max((len(w) for _, w in labelled or ()), default=0)
    lab_good = np.zeros((q, 1), dtype=np.int64)
    lab_bad = np.zeros((q, max(lab_width, 1)), dtype=np.int64)
    lab_mask = np.zeros((q, max(lab_width, 1)), dtype=bool)
    m = q if scored is None else min(scored, q)
    if labelled is not None:
        if len(labelled) != q:
            raise ConfigError(f"{len(labelled)} labelled answer sets for {q} questions")
        for row, (good, bad) in enumerate(labelled[:m]):
            lab_good[row, 0] = texts.add(good)
            for col, text in enumerate(bad):
                lab_bad[row, col], lab_mask[row, col] = texts.add(text), True
    return _Gathered(texts, ref_idx, ref_mask, iw_idx, co_idx, pair_mask, answers, lab_good,
                     lab_bad, lab_mask, m)


def table_texts(references: Sequence[Sequence[str]], pairs: Sequence[Sequence[tuple[str, str]]],
                answer_sets: Mapping[str, Sequence[str | None]],
                labelled: Sequence[tuple[str, Sequence[str]]] | None = None,
                scored: int | None = None) -> list[str]:
    """The texts :func:`score_texts` gives its similarity's table for the same arguments, in
    the same order (each once).

    >>> table_texts([["ref"], []], [[("wrong", "right")], []], {"a": ["right", "new"]})
    ['ref', 'wrong', 'right', 'new']
    """
    return list(_gather(references, pairs, answer_sets, labelled, (0, 0), scored).texts.index)


def _sims(table: Any, left: Any, right: Any, valid: Any) -> Floats:
    a, b, ok = np.broadcast_arrays(np.asarray(left), np.asarray(right), np.asarray(valid, bool))
    out = np.full(a.shape, np.nan)
    if ok.any():
        out[ok] = table(a[ok], b[ok])
    return out


def score_texts(
    references: Sequence[Sequence[str]],
    pairs: Sequence[Sequence[tuple[str, str]]],
    answer_sets: Mapping[str, Sequence[str | None]],
    similarity: Similarity,
    neighbours: Neighbours,
    tau: float = 1.0,
    labelled: Sequence[tuple[str, Sequence[str]]] | None = None,
    divergences: Sequence[Divergence] = DIVERGENCES,
    min_pairs: int = 1,
    expertise_form: ExpertiseForm = "gap",
    widths: tuple[int, int] = (0, 0),
    scored: int | None = None,
    lent: LentReferences | None = None,
) -> FewlScores:
    """FEWL and its ablations for every answer set, vectorised over question x reference x
    pair; every distinct text goes through the similarity exactly once.

    Empty references are treated as missing; empty or None answers are unscored.
    ``labelled`` holds, per question, the labelled non-hallucinated answer and the labelled
    hallucinated ones: the ideal weights of ``fewl_ideal`` are the softmax of the expertise
    those labels give, mean_k SIM(h_j, correct) − SIM(h_j, hallucinated_k) (the paper
    computes ideal λ "from the labeled non-hallucinated and hallucinated answers"; the exact
    formula is [reconstructed] as the same gap the generated pairs use).

    ``widths`` pads the reference and pair axes to at least (J, R): a chunk of a larger run
    sums over the same padded shapes as the whole run, so its digits are the same.

    ``scored``: only the first questions are scored; the rest (a chunk's neighbours from
    outside it) lend their references to those questions' laziness penalty, and every array
    of the result has ``scored`` rows (the neighbours' indices still count all questions).
    ``lent`` gives some of those rows' references as vectors (their rows in ``references``
    then empty), added to the similarity table after every text.
    """
    for divergence in divergences:
        _check_divergence(divergence)
    g = _gather(references, pairs, answer_sets, labelled, widths, scored)
    texts, m = g.texts, g.m
    ref_idx, ref_mask, iw_idx, co_idx, pair_mask = g.ref_idx, g.ref_mask, g.iw_idx, g.co_idx, \
        g.pair_mask
    answers, lab_good, lab_bad, lab_mask = g.answers, g.lab_good, g.lab_bad, g.lab_mask
    q = len(references)
    table = similarity.table(list(texts.index))
    if lent is not None and lent.rows.size:
        if not isinstance(table, EmbeddingTable):
            raise ConfigError("references lent as vectors need an embedding similarity")
        ref_idx[lent.rows, lent.slots] = len(texts.index) + np.arange(lent.rows.size)
        ref_mask[lent.rows, lent.slots] = True
        table = table.extended(lent.vectors, lent.scaled)
    nb_refs, nb_ref_mask = ref_idx[neighbours.index[:m]], ref_mask[neighbours.index[:m]]
    if m < q:
        ref_idx, iw_idx, co_idx = ref_idx[:m], iw_idx[:m], co_idx[:m]
        ref_mask, pair_mask = ref_mask[:m], pair_mask[:m]
        lab_good, lab_bad, lab_mask = lab_good[:m], lab_bad[:m], lab_mask[:m]
        answers = {name: (idx[:m], ok[:m]) for name, (idx, ok) in answers.items()}
        neighbours = Neighbours(neighbours.index[:m], neighbours.mask[:m],
                                neighbours.cosine[:m])

    both = ref_mask[:, :, None] & pair_mask[:, None, :]
    sim_co = _sims(table, ref_idx[:, :, None], co_idx[:, None, :], both)
    sim_iw = _sims(table, ref_idx[:, :, None], iw_idx[:, None, :], both)
    pair_count = pair_mask.sum(axis=1)
    scorable = (pair_count >= min_pairs) & ref_mask.any(axis=1)
    s = expertise(sim_co, sim_iw, pair_mask, expertise_form)
    agree_iw = expertise(np.zeros_like(sim_iw), sim_iw, pair_mask, "wrong") * -1.0
    agree_co = expertise(sim_co, np.zeros_like(sim_co), pair_mask, "corrected")
    weights = softmax_weights(np.where(ref_mask, s, 0.0), ref_mask, tau)
    uniform = uniform_weights(ref_mask)
    options: dict[str, tuple[Floats, bool]] = {
        "single": (single_weights(ref_mask), False),
        "single_penalty": (single_weights(ref_mask), True),
        "multi_uniform_no_penalty": (uniform, False),
        "multi_expertise_no_penalty": (weights, False),
        "single_best_no_penalty": (single_best_weights(np.where(ref_mask, s, np.nan), ref_mask),
                                   False),
        "fewl": (weights, True),
        "fewl_uniform": (uniform.copy(), True),
    }
    ideal = None
    if labelled is not None:
        both_lab = ref_mask[:, :, None] & lab_mask[:, None, :]
        sim_good = _sims(table, ref_idx[:, :, None], lab_good[:, None, :], both_lab)
        sim_bad = _sims(table, ref_idx[:, :, None], lab_bad[:, None, :], both_lab)
        s_ideal = expertise(sim_good, sim_bad, lab_mask, "gap")
        ideal = softmax_weights(np.where(ref_mask, s_ideal, 0.0), ref_mask, tau)
        ideal[~lab_mask.any(axis=1)] = np.nan
        options["fewl_ideal"] = (ideal, True)
    for w, _ in options.values():
        w[~scorable] = np.nan

    sets: dict[str, dict[str, dict[str, Terms]]] = {}
    for name, (idx, ok) in answers.items():
        sim_ar = _sims(table, idx[:, None], ref_idx, ok[:, None] & ref_mask)
        valid = neighbours.mask[:, :, None] & nb_ref_mask & ok[:, None, None]
        sim_nb = _sims(table, idx[:, None, None], nb_refs, valid)
        per_div: dict[str, dict[str, Terms]] = {}
        for divergence in divergences:
            per_var: dict[str, Terms] = {}
            for variant, (w, penalised) in options.items():
                terms = fewl_terms(w, sim_ar, sim_nb, valid, divergence, penalised)
                per_var[variant] = Terms(*(np.where(ok, a, np.nan) for a in terms))
            per_div[divergence] = per_var
        sets[name] = per_div
    return FewlScores(s, weights, ideal, agree_iw, agree_co, ref_mask, pair_count, scorable,
                      neighbours, sets, len(texts.index))
