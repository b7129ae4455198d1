"""hf/ batched decoding on a tiny random-weight Llama built here: one left-padded batch gives
sequential decoding's answers wherever no greedy choice is near a tie, its agreement is
counted, batches are bounded by memory, and the client hands a batching backend whole batches."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import veracity.calls as calls
from veracity.backends.hf_batch import agreement, bytes_per_row, parse_batch
from veracity.errors import ConfigError
from veracity.registry import load_model
from veracity.types import Generation, GenRequest, Sampling

pytest.importorskip("transformers", reason="needs pip install 'veracity[hf]'")

WORDS = ["<pad>", "<s>", "</s>", "<unk>", "what", "is", "the", "capital", "of", "france",
         "italy", "paris", "rome", "a", "city", "who", "wrote", "hamlet", "?", "river", "long",
         "blue", "moon", "iron", "salt", "seven", "name", "largest", "planet", "and", "why"]
PROMPTS = ["what is the capital of france ?", "who wrote hamlet ?", "rome",
           "name the largest planet and why ?", "what is a city ?", "the long blue river",
           "iron salt seven moon", "what is the capital of italy ?", "paris", "who ?",
           "name a city of france and a city of italy and why", "the moon is blue"]
STEPS = 6


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny-llama")
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", unk_token="<unk>").save_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def _load(path: Path, **options: Any) -> Any:
    return load_model(f"hf/{path}", device="cpu", chat_template="raw", threads=1, **options)


def _margins(backend: Any, prompt: str) -> float:
    """The smallest gap between the best and second-best logit along the prompt's greedy
    answer, decoded alone (no padding)."""
    import torch

    ids = backend._tokens(backend.render(GenRequest.user(prompt).messages))
    with torch.inference_mode():
        out = backend.model.generate(torch.tensor([ids]), max_new_tokens=STEPS, do_sample=False,
                                     output_scores=True, return_dict_in_generate=True,
                                     pad_token_id=0, eos_token_id=2)
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    return min(gaps)


def test_one_padded_batch_gives_sequential_answers_without_near_ties(tiny_llama: Path) -> None:
    greedy = Sampling(max_tokens=STEPS)
    batched = _load(tiny_llama)  # batch=auto
    sequential = _load(tiny_llama, batch="1")
    try:
        requests = [GenRequest.user(p, greedy) for p in PROMPTS]
        together = batched.generate(requests)
        alone = sequential.generate(requests)
        assert all(isinstance(g, Generation) for g in [*together, *alone])
        texts = [g.text for g in together]  # type: ignore[union-attr]
        seq_texts = [g.text for g in alone]  # type: ignore[union-attr]
        clear = [k for k, p in enumerate(PROMPTS) if _margins(sequential, p) > 1e-3]
        assert len(clear) >= len(PROMPTS) // 2  # the comparison covers most prompts
        for k in clear:
            assert texts[k] == seq_texts[k], PROMPTS[k]
        measured = agreement(texts, seq_texts)
        assert measured.total == len(PROMPTS) and measured.identical >= len(clear)
        # one batch of every prompt, padded; sequential: one prompt per pass, never padded
        path = batched.compute_path()["batch"]
        assert (path["setting"], path["batches"], path["largest"]) == ("auto", 1, len(PROMPTS))
        assert path["padding"] > 0 and 0 < path["padding_share"] < 1
        alone_path = sequential.compute_path()["batch"]
        assert (alone_path["batches"], alone_path["largest"], alone_path["padding"]) == (
            len(PROMPTS), 1, 0)
        # sequential decoding is another cache identity; auto keeps the batched one
        assert sequential.identity()["batch"] == "sequential"
        assert "batch" not in batched.identity()
        assert batched.capabilities.batch == batched.batch_size >= len(PROMPTS)
    finally:
        batched.close()
        sequential.close()


def test_auto_batches_stay_within_the_memory_budget(tiny_llama: Path) -> None:
    backend = _load(tiny_llama)
    try:
        widest = max(len(backend._tokens(backend.render(GenRequest.user(p).messages)))
                     for p in PROMPTS)
        per_row = bytes_per_row(backend.model.config, 4, widest, STEPS)
        backend.batch_stats.memory_budget_bytes = 3 * per_row
        outcomes = backend.generate([GenRequest.user(p, Sampling(max_tokens=STEPS))
                                     for p in PROMPTS])
        assert all(isinstance(g, Generation) for g in outcomes)
        stats = backend.compute_path()["batch"]
        assert stats["largest"] <= 3 and stats["rows"] == len(PROMPTS)
        assert stats["batches"] >= len(PROMPTS) // 3
    finally:
        backend.close()


def test_samples_of_one_prompt_decode_as_one_batch(tiny_llama: Path) -> None:
    backend = _load(tiny_llama)
    try:
        sampled = Sampling(temperature=1.0, max_tokens=STEPS, seed=7)
        outs = backend.generate([GenRequest.user(PROMPTS[0], sampled, sample_index=i)
                                 for i in range(5)])
        assert all(isinstance(g, Generation) for g in outs)
        stats = backend.compute_path()["batch"]
        assert (stats["batches"], stats["largest"], stats["padding"]) == (1, 5, 0)
    finally:
        backend.close()


def test_batch_options_are_checked(tiny_llama: Path) -> None:
    assert parse_batch("auto") is None and parse_batch("3") == 3
    for bad in ("0", "-2", "many"):
        with pytest.raises(ConfigError, match="batch="):
            parse_batch(bad)
    with pytest.raises(ConfigError, match="not both"):
        _load(tiny_llama, batch="2", batch_size=2)


def test_a_batching_backend_gets_whole_batches_however_slow(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """Every call counts as slow: chunks halve, but never below the backend's batch."""
    monkeypatch.setattr(calls, "_CHUNK_SECONDS", 0.0)
    sizes: list[int] = []

    def call(chunk: Any) -> list[int]:
        sizes.append(len(chunk))
        return list(chunk)

    list(calls.chunked(call, list(range(50)), threading.Event(), 16, 64, smallest=11))
    assert sizes == [16, 11, 11, 11, 1]
    sizes.clear()
    list(calls.chunked(call, list(range(5)), threading.Event(), 4, 64))
    assert sizes == [4, 1]
