"""Label-free supervised fine-tuning by TRL's ``SFTTrainer``: a LoRA adapter, or every weight
(``method="full"``, the paper's §5.2).

The base is what the ``hf`` backend loads (``hf/default`` = the bundled SmolLM2 GGUF,
dequantised by transformers; ``hf/DIR``; ``hf/FILE.gguf``). Examples are prompt / completion
chat turns, rendered by the base model's chat template, with the loss on the completion only; a
base model without one (OPT, Llama-2 base) is trained on the prompts a chosen template writes
(``chat_template``: chatml, llama-2, plain, raw, a file), exactly as the hf backend renders them
when it answers. Checkpoints go to ``<out>/checkpoints``: a rerun with the same output resumes
from the last one. Heavy libraries are imported inside the functions so ``import veracity``
stays light.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from veracity.backends.llamacpp import bundled_gguf_path
from veracity.errors import ConfigError, DataError
from veracity.methods.fewl.mitigation.prompts import templated_examples
from veracity.paths import user_path
from veracity.registry import resolve

METHODS = ("lora", "full")


@dataclass(frozen=True)
class LoraSettings:
    """What shapes one fine-tuning run; recorded with its results."""

    epochs: float = 3.0
    max_steps: int = -1
    """Stop after this many optimiser steps (-1: run all epochs)."""
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    learning_rate: float = 2e-4
    batch_size: int = 4
    max_length: int = 256
    save_steps: int = 10
    seed: int = 0
    device: str | None = None
    """cpu, cuda, cuda:N; default cuda when available."""
    threads: int | None = None
    """torch's CPU threads (process-wide); 1 is much faster on an oversubscribed machine."""
    method: str = "lora"
    """lora: an adapter on the frozen base; full: every weight trained (the paper's SFT)."""
    chat_template: str | None = None
    """The prompt format (a name or file, as ``--chat-template``); None: the tokenizer's own."""

    def check(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"unknown fine-tuning method '{self.method}'; known: "
                              f"{', '.join(METHODS)}")
        if self.lora_r < 1 or self.batch_size < 1 or self.max_length < 16 or self.save_steps < 1:
            raise ConfigError("lora r, batch size and save steps must be >= 1, max length >= 16")
        if self.max_steps == 0 or self.max_steps < -1 or not self.epochs > 0:
            raise ConfigError("max steps must be positive (or -1) and epochs > 0")
        if not self.learning_rate > 0:
            raise ConfigError("the learning rate must be > 0")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("threads must be at least 1")


@dataclass(frozen=True)
class TrainResult:
    adapter: Path | None
    """The LoRA adapter (None after full fine-tuning)."""
    merged: Path | None
    """A whole model loadable as ``hf/DIR``: LoRA merged into the base (``merge``), or the
    fully fine-tuned model."""
    steps: int
    seconds: float
    resumed_from: str | None
    train_loss: float | None
    examples: int


def _libraries() -> tuple[Any, Any, Any, Any]:
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
        peft = importlib.import_module("peft")
        trl = importlib.import_module("trl")
        importlib.import_module("datasets")
    except ImportError as exc:
        raise ConfigError(f"fine-tuning needs veracity[train] ({exc.name} is missing): "
                          "pip install 'veracity[train]'") from None
    return torch, transformers, peft, trl


def base_location(spec: str) -> tuple[str, dict[str, Any]]:
    """Directory and ``from_pretrained`` keywords of an ``hf/...`` base (nothing downloaded)."""
    ref = resolve(spec)
    if ref.provider != "hf":
        raise ConfigError(f"the base model must be hf/PATH or hf/default, got '{spec}'")
    name = ref.name
    if name in ("", "default"):
        gguf = bundled_gguf_path("train")
        return str(gguf.parent), {"gguf_file": gguf.name, "local_files_only": True}
    path = user_path(name)
    if name.endswith(".gguf") and path.is_file():
        return str(path.parent), {"gguf_file": path.name, "local_files_only": True}
    if not (path / "config.json").is_file():
        raise ConfigError(f"{spec}: not a transformers model directory or GGUF file: {path}")
    return str(path), {"local_files_only": True}


def load_base(spec: str, device: str | None = None,
              chat_template: str | None = None) -> tuple[Any, Any, str]:
    """Tokenizer, float32 model and device of a base spec; a tokenizer without a chat template
    needs ``chat_template``."""
    torch, transformers, _, _ = _libraries()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is fetched, not even metadata
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    where, kwargs = base_location(spec)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device '{device}' requested but CUDA is not available")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(where, **kwargs)
        model = transformers.AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32,
                                                                  **kwargs)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{spec}: transformers could not load the model: {exc}") from exc
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"{spec}: the tokenizer has no chat template: give one with "
                          "--chat-template FILE|chatml|llama-2|plain, or --chat-template raw for "
                          "raw completion (a base model)")
    if "gguf_file" in kwargs:
        # GGUF weights are dequantised to float32 on load; only the marker says "quantised",
        # and it would make the trainer refuse and merged models unloadable
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model, device


def examples(pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Prompt / completion chat records (TRL's conversational prompt-completion format)."""
    out = [{"prompt": [{"role": "user", "content": prompt}],
            "completion": [{"role": "assistant", "content": answer}]}
           for prompt, answer in pairs if prompt.strip() and answer.strip()]
    if not out:
        raise DataError("no fine-tuning examples (every selected answer is empty)")
    return out


def last_checkpoint(folder: Path) -> str | None:
    """The newest ``checkpoint-N`` under ``folder`` that holds a trainer state, if any."""
    found = [p for p in folder.glob("checkpoint-*")
             if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()]
    return str(max(found, key=lambda p: int(p.name.split("-")[-1]))) if found else None


def train_lora(base: str, pairs: Sequence[tuple[str, str]], out: Path, settings: LoraSettings,
               merge: bool = False, progress: bool = True) -> TrainResult:
    """Fine-tune on (prompt, answer) pairs: a LoRA adapter saved to ``out/adapter`` (and the
    merged model to ``out/merged`` with ``merge``), or with ``method="full"`` every weight, the
    model saved to ``out/merged``. Resumes from ``out/checkpoints``."""
    settings.check()
    torch, transformers, peft, trl = _libraries()
    datasets = importlib.import_module("datasets")
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    transformers.set_seed(settings.seed)
    tokenizer, model, device = load_base(base, settings.device, settings.chat_template)
    records = (examples(pairs) if settings.chat_template is None
               else templated_examples(tokenizer, pairs, settings.chat_template))
    checkpoints = out / "checkpoints"
    config = trl.SFTConfig(
        output_dir=str(checkpoints), num_train_epochs=settings.epochs, max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size, learning_rate=settings.learning_rate,
        max_length=settings.max_length, completion_only_loss=True, packing=False,
        save_strategy="steps", save_steps=settings.save_steps, save_total_limit=2,
        logging_steps=1, report_to=[], seed=settings.seed, data_seed=settings.seed,
        use_cpu=device == "cpu", gradient_checkpointing=False, disable_tqdm=not progress,
        dataloader_num_workers=0, dataset_num_proc=None, bf16=False, fp16=False,
    )
    lora = peft.LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha,
                           lora_dropout=settings.lora_dropout, target_modules="all-linear",
                           task_type="CAUSAL_LM")
    trainer = trl.SFTTrainer(model=model, args=config,
                             train_dataset=datasets.Dataset.from_list(records),
                             processing_class=tokenizer,
                             peft_config=lora if settings.method == "lora" else None)
    resume = last_checkpoint(checkpoints)
    started = time.perf_counter()
    output = trainer.train(resume_from_checkpoint=resume)
    seconds = time.perf_counter() - started
    adapter: Path | None = None
    merged: Path | None = None
    if settings.method == "full":  # the trained model is already whole
        merged = out / "merged"
        trainer.model.save_pretrained(str(merged))
        tokenizer.save_pretrained(str(merged))
    else:
        adapter = out / "adapter"
        trainer.model.save_pretrained(str(adapter))
        tokenizer.save_pretrained(str(adapter))
        if merge:
            merged = out / "merged"
            trainer.model.merge_and_unload().save_pretrained(str(merged))
            tokenizer.save_pretrained(str(merged))
    loss = output.metrics.get("train_loss") if output is not None else None
    result = TrainResult(adapter, merged, int(trainer.state.global_step), seconds, resume,
                         None if loss is None else float(loss), len(records))
    (out / "training.json").write_text(json.dumps(
        {"base": base, "settings": asdict(settings), "steps": result.steps,
         "seconds": round(seconds, 2), "resumed_from": resume, "train_loss": result.train_loss,
         "examples": result.examples, "merged": merged is not None, "torch": torch.__version__,
         "log": trainer.state.log_history}, indent=2), encoding="utf-8")
    return result
