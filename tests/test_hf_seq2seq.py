"""hf/DIR with an encoder-decoder model (the paper's Table 4 ranks Flan-T5): a tiny T5 with
random weights, built here from a config, loaded from disk, batched, sampled and ranked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from data_paths import FIXTURES
from veracity.errors import ConfigError
from veracity.registry import load_model
from veracity.store import RunDir
from veracity.types import Generation, GenRequest, Sampling

pytest.importorskip("transformers", reason="needs pip install 'veracity[hf]'")

WORDS = ["<pad>", "</s>", "<unk>", "what", "is", "the", "capital", "of", "france", "italy",
         "paris", "rome", "a", "city", "who", "wrote", "hamlet", "?"]


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    path = tmp_path_factory.mktemp("tiny-t5")
    vocab = {w: i for i, w in enumerate(WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(single="$A </s>",
                                                        special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>",
                                        eos_token="</s>", unk_token="<unk>")
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = T5Config(vocab_size=len(WORDS), d_model=16, d_kv=8, d_ff=32, num_layers=1,
                      num_decoder_layers=1, num_heads=2, pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0)
    T5ForConditionalGeneration(config).save_pretrained(path)
    return path


def test_an_encoder_decoder_model_loads_and_generates_as_in_one_call(tiny_t5: Path) -> None:
    backend = load_model(f"hf/{tiny_t5}", device="cpu", batch_size=3)
    try:
        assert not backend.capabilities.prefill and not backend.capabilities.inputs_embeds
        assert backend.identity()["architecture"] == "encoder-decoder"
        assert backend.identity()["chat_template"]["name"] == "raw"
        greedy = Sampling(temperature=0.0, max_tokens=6)
        prompts = ["what is the capital of france ?", "who wrote hamlet ?", "rome"]
        batched = backend.generate([GenRequest.user(p, greedy) for p in prompts])
        alone = [backend.generate([GenRequest.user(p, greedy)])[0] for p in prompts]
        for b, a in zip(batched, alone, strict=True):
            assert isinstance(b, Generation) and isinstance(a, Generation)
            # right padding of the encoder input: a batch gives what each prompt gives alone
            assert b.text == a.text and b.completion_tokens == a.completion_tokens
            assert 0 < b.completion_tokens <= 6 and "<pad>" not in b.text
        assert batched[0].prompt_tokens == 8  # seven words and the closing </s>
        # the same answer as transformers' own greedy generate, start token dropped
        from transformers import AutoTokenizer, T5ForConditionalGeneration

        tok = AutoTokenizer.from_pretrained(str(tiny_t5))
        model = T5ForConditionalGeneration.from_pretrained(str(tiny_t5))
        direct = model.generate(**tok(prompts[0], return_tensors="pt"), max_new_tokens=6,
                                do_sample=False)[0].tolist()[1:]
        tokens = direct[:direct.index(1)] if 1 in direct else direct
        assert batched[0].text == tok.decode(tokens, skip_special_tokens=True)
        assert batched[0].completion_tokens == len(tokens)
        sampled = Sampling(temperature=1.0, max_tokens=6, seed=3)
        first = backend.generate([GenRequest.user(prompts[0], sampled, sample_index=i)
                                  for i in range(4)])
        again = backend.generate([GenRequest.user(prompts[0], sampled, sample_index=i)
                                  for i in range(4)])
        assert [g.text for g in first] == [g.text for g in again]  # type: ignore[union-attr]
        assert len({g.text for g in first}) > 1  # type: ignore[union-attr]
        with pytest.raises(ConfigError, match="causal model"):
            backend.prompt_embeddings(GenRequest.user("rome"))  # type: ignore[attr-defined]
    finally:
        backend.close()


def test_fewl_ranks_answers_of_an_encoder_decoder_model(tiny_t5: Path, tmp_path: Path) -> None:
    from veracity.cli import main

    out = tmp_path / "rank"
    dataset = f"haltt4llm:{FIXTURES / 'formats' / 'haltt4llm.json'}"
    result = CliRunner().invoke(main, ["fewl",
        "rank", "--dataset", dataset, "--answers", f"hf/{tiny_t5}", "--answers", "fake/stable",
        "--reference", "fake/pairs", "--reference-samples", "2", "--pairs", "2",
        "--neighbours", "1", "--similarity", "hash/default", "--max-tokens", "6",
        "--device", "cpu", "--cache", str(tmp_path / "c.sqlite"), "--out", str(out)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    ranking = RunDir.open(out).results["ranking"]
    assert set(ranking["rank_by_fewl"]) == {f"hf/{tiny_t5}", "fake/stable"}
    assert set(ranking["error_rate"]) == {f"hf/{tiny_t5}", "fake/stable"}
    answers = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert all(r["answers"][f"hf/{tiny_t5}"]["answer"] is not None for r in answers)
