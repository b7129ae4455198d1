"""Fine-tuning a base model without a chat template (the paper's §5.2): a tiny causal model with
random weights built here from a config, trained fully and with LoRA on raw-text prompts,
checkpointed, resumed, saved and loaded back; and ``fewl finetune --method full`` end to end."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixtures.tiny_causal_lm import WORDS, build
from veracity.errors import ConfigError
from veracity.registry import load_model
from veracity.types import Generation, GenRequest, Sampling

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("trl", "peft", "datasets", "transformers")),
    reason="needs pip install 'veracity[train]'")

FIXTURE = Path(__file__).parent / "fixtures" / "mitigation_qa.jsonl"
PAIRS = [("who wrote hamlet ?", "william shakespeare wrote hamlet ."),
         ("how many legs does a spider have ?", "a spider has eight legs ."),
         ("what is the capital of france ?", "paris is the capital of france .")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer Llama with random weights and a word-level tokenizer, no chat template."""
    path = tmp_path_factory.mktemp("tiny-base")
    build(path)
    return path


def test_raw_prompts_are_tokenized_as_the_backend_renders_them(tiny: Path) -> None:
    from transformers import AutoTokenizer

    from veracity.methods.fewl.mitigation.prompts import templated_examples

    tok = AutoTokenizer.from_pretrained(str(tiny))
    ids = {w: i for i, w in enumerate(WORDS)}
    [record] = templated_examples(tok, [PAIRS[0], ("who ?", "  ")], "raw")  # empty answer: none
    # raw completion: BOS, the prompt's words, then the answer and EOS, the loss on those only
    prompt = ["<s>", "who", "wrote", "hamlet", "?"]
    answer = ["william", "shakespeare", "wrote", "hamlet", ".", "</s>"]
    assert record["input_ids"] == [ids[w] for w in prompt + answer]
    assert record["completion_mask"] == [0] * len(prompt) + [1] * len(answer)
    [plain] = templated_examples(tok, PAIRS[:1], "plain")
    assert sum(plain["completion_mask"]) == len(answer)  # "User: ... Assistant:" is the prompt


def test_a_base_without_template_needs_one(tiny: Path) -> None:
    from veracity.methods.fewl.mitigation.lora import LoraSettings, load_base, train_lora

    with pytest.raises(ConfigError, match="--chat-template"):
        load_base(f"hf/{tiny}", "cpu")
    with pytest.raises(ConfigError, match="unknown fine-tuning method"):
        train_lora(f"hf/{tiny}", PAIRS, tiny / "x", LoraSettings(method="half"))


def test_full_fine_tuning_checkpoints_resumes_and_loads(tiny: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from veracity.methods.fewl.mitigation.lora import LoraSettings, train_lora

    settings = LoraSettings(method="full", chat_template="raw", max_steps=1, save_steps=1,
                            batch_size=2, max_length=64, threads=1, learning_rate=1e-2)
    first = train_lora(f"hf/{tiny}", PAIRS, tmp_path / "rule", settings, progress=False)
    assert first.steps == 1 and first.resumed_from is None and first.examples == 3
    assert first.adapter is None and first.merged == tmp_path / "rule" / "merged"
    assert (tmp_path / "rule" / "checkpoints" / "checkpoint-1" / "optimizer.pt").is_file()
    second = train_lora(f"hf/{tiny}", PAIRS, tmp_path / "rule", replace(settings, max_steps=2),
                        progress=False)
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-1")
    assert second.steps == 2 and second.merged is not None
    log = json.loads((tmp_path / "rule" / "training.json").read_text())
    assert log["settings"]["method"] == "full" and log["merged"]
    before = load_file(str(tiny / "model.safetensors"))
    after = load_file(str(second.merged / "model.safetensors"))
    moved = [k for k in before if k in after and not bool((before[k] == after[k]).all())]
    assert len(moved) > len(before) // 2  # every weight trains, not an adapter's few
    with pytest.raises(ConfigError, match="chat template"):
        load_model(f"hf/{second.merged}", device="cpu")
    backend = load_model(f"hf/{second.merged}", device="cpu", chat_template="raw")
    try:
        out = backend.generate([GenRequest.user("who wrote hamlet ?",
                                                Sampling(max_tokens=4, temperature=0.0))])
        assert isinstance(out[0], Generation)
    finally:
        backend.close()


def test_lora_on_a_base_without_template(tiny: Path, tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    from veracity.methods.fewl.mitigation.lora import LoraSettings, train_lora

    settings = LoraSettings(chat_template="raw", max_steps=2, save_steps=1, batch_size=2,
                            lora_r=2, max_length=64, threads=1)
    result = train_lora(f"hf/{tiny}", PAIRS, tmp_path / "rule", settings, merge=True,
                        progress=False)
    assert result.adapter is not None and result.merged is not None and result.steps == 2
    weights = load_file(str(result.adapter / "adapter_model.safetensors"))
    assert any(abs(v).max() > 0 for k, v in weights.items() if "lora_B" in k)
    backend = load_model(f"hf/{tiny}", device="cpu", chat_template="raw",
                         adapter=str(result.adapter))
    try:
        out = backend.generate([GenRequest.user("who wrote hamlet ?", Sampling(max_tokens=3))])
        assert isinstance(out[0], Generation)
    finally:
        backend.close()


def test_finetune_full_prints_table_7(tiny: Path, tmp_path: Path) -> None:
    from veracity.methods.fewl.mitigation.cli import finetune_cmd

    out = tmp_path / "ft"
    args = ["--dataset", f"jsonl:{FIXTURE}", "--base", f"hf/{tiny}", "--preset", "paper",
            "--candidates", "fake/context", "--reference", "fake/pairs", "--reference-samples",
            "2", "--pairs", "3", "--neighbours", "3", "--similarity", "hash/default",
            "--judge", "fake/judge", "--max-steps", "1", "--save-steps", "1", "--batch-size", "4",
            "--max-length", "64", "--max-tokens", "6", "--threads", "1", "--device", "cpu",
            "--out", str(out), "--cache", str(tmp_path / "c.sqlite"), "--quiet"]
    result = CliRunner().invoke(finetune_cmd, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "Table 7 layout" in result.output and "win rate (decided, C.10)" in result.output
    assert "not asked (empty/same)" in result.output
    assert "preset paper: method=full, epochs=10.0, split=0.8" in result.output
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == "full" and [r["rule"] for r in results["rows"]] == [
        "gold", "baseline", "fewl"]
    for rule, t in results["training"].items():
        assert t["method"] == "full" and t["adapter"] is None and t["steps"] == 1, rule
        assert (out / t["merged"] / "config.json").is_file()
    info = json.loads((out / "run.json").read_text())
    assert info["config"]["preset"]["applied"]["base_chat_template"] == "raw"
    assert results["lora"]["chat_template"] == "raw"  # the base's prompts only
    assert "chat_template" not in info["config"]["model_options"]["models"]["hf"]
    rerun = CliRunner().invoke(finetune_cmd, args, catch_exceptions=False)
    assert rerun.exit_code == 0, rerun.output  # resumes: every rule already at its last step
    again = json.loads((out / "results.json").read_text())
    assert all(t["resumed_from"] for t in again["training"].values())
