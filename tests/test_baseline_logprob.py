"""The log-probability baseline and the token log-probabilities under it: maths on
hand-computed numbers, the cache key and round trip, the wire format of OpenAI-compatible
servers, a scripted backend whose wrong answers alone are unlikely (AUROC 1.0), the clear
early error of a backend without log-probabilities, the CLI end to end (live and recorded)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import veracity
from veracity.backends.base import Capabilities
from veracity.backends.fake import FakeBackend
from veracity.backends.openai_wire import RequestShape, request_body
from veracity.backends.reply import read_reply
from veracity.cache import Cache, cache_key
from veracity.cli import main
from veracity.client import LLMClient, request_key
from veracity.correctness import Labelled, label_answers
from veracity.errors import CapabilityError, PermanentError, RetryableError
from veracity.methods.logprob.core import (
    LogprobSettings,
    logprob_scores,
    mean_entropy,
    mean_logprob,
    min_prob,
    perplexity,
    topk_entropy,
)
from veracity.methods.logprob.fake import scripted
from veracity.methods.logprob.records import LogprobRecord
from veracity.methods.logprob.run import run_logprob, score_greedy
from veracity.runs.common import Context
from veracity.stats import auroc
from veracity.types import Generation, GenRequest, Item, Sampling, TokenLogprob

LOG = math.log


def test_signals_on_hand_computed_token_probabilities() -> None:
    logprobs = [LOG(0.5), LOG(0.25), 0.0]
    assert mean_logprob(logprobs) == pytest.approx(LOG(0.125) / 3)
    assert min_prob(logprobs) == pytest.approx(0.25)
    assert perplexity(logprobs) == pytest.approx(2.0)  # 0.125 ** (-1/3)


def test_entropy_over_the_top_alternatives_renormalised() -> None:
    assert topk_entropy([LOG(0.5), LOG(0.25), LOG(0.25)]) == pytest.approx(1.5 * LOG(2))
    # 0.5 and 0.3 returned: renormalised to 5/8 and 3/8
    assert topk_entropy([LOG(0.5), LOG(0.3)]) == pytest.approx(
        -(5 / 8 * LOG(5 / 8) + 3 / 8 * LOG(3 / 8)))
    assert topk_entropy([0.0]) == 0.0
    # the chosen token joins its alternatives when they do not hold it
    chosen_missing = TokenLogprob("c", LOG(0.25), (("a", LOG(0.5)), ("b", LOG(0.25))))
    certain = TokenLogprob("x", 0.0, (("x", 0.0),))
    assert mean_entropy([chosen_missing, certain]) == pytest.approx(1.5 * LOG(2) / 2)
    assert mean_entropy([TokenLogprob("x", 0.0)]) is None  # no alternatives returned


def test_scores_of_an_answer_and_uncertainty_direction() -> None:
    found = logprob_scores([TokenLogprob("a", LOG(0.5), (("a", LOG(0.5)), ("b", LOG(0.5)))),
                            TokenLogprob("b", LOG(0.125), (("b", LOG(0.125)),))])
    assert found is not None and found.n_tokens == 2
    assert found.mean_logprob == pytest.approx(LOG(0.25))
    assert found.perplexity == pytest.approx(4.0)
    assert found.mean_entropy == pytest.approx(LOG(2) / 2)
    assert found.uncertainty("mean_logprob") == pytest.approx(-LOG(0.25))
    assert found.uncertainty("perplexity") == pytest.approx(4.0)
    assert logprob_scores([]) is None


def test_cache_key_changes_only_when_log_probabilities_are_asked() -> None:
    plain = GenRequest.user("q", Sampling(max_tokens=8))
    identity = {"mode": "fake/stable"}
    sampling = asdict(plain.sampling)
    for name in ("seed", "top_p", "top_k", "temperature"):
        sampling.pop(name)
    written_before = cache_key({"kind": "generation", "backend": "fake/stable",
                                "identity": identity, "messages": [["user", "q"]],
                                "prefill": "", "sampling": sampling, "sample_index": 0})
    assert request_key("fake/stable", identity, plain) == written_before
    keys = {request_key("fake/stable", identity, GenRequest.user("q", Sampling(max_tokens=8),
                                                                 logprobs=k)) for k in (0, 5)}
    assert len(keys) == 2 and written_before not in keys


def test_log_probabilities_are_cached_with_the_generation(tmp_path: Path) -> None:
    request = GenRequest.user("Capital of France?", Sampling(max_tokens=8), logprobs=3)
    cache = Cache(tmp_path / "c.sqlite")
    first = LLMClient(FakeBackend("stable"), cache).generate([request])[0]
    assert first.logprobs is not None and len(first.logprobs) == len(first.text.split())
    assert all(len(t.top) == 3 for t in first.logprobs)
    again = LLMClient(FakeBackend("stable"), cache)
    assert again.generate([request])[0] == first
    assert again.stats.model_calls == 0
    plain = again.generate([GenRequest.user("Capital of France?", Sampling(max_tokens=8))])[0]
    assert plain.logprobs is None and plain.text == first.text and again.stats.model_calls == 1
    cache.close()


def test_openai_request_asks_for_log_probabilities() -> None:
    shape = RequestShape("m", "none", {}, None, "", "")
    _, body = request_body(shape, GenRequest.user("q", logprobs=4))
    assert body["logprobs"] is True and body["top_logprobs"] == 4
    _, body = request_body(shape, GenRequest.user("q"))
    assert "logprobs" not in body and "top_logprobs" not in body


def _malformed(data: dict[str, Any], what: str) -> RetryableError:
    return RetryableError(what)


def test_openai_replies_with_log_probabilities_are_read() -> None:
    chat = {"choices": [{"message": {"content": "Paris"}, "finish_reason": "stop",
                         "logprobs": {"content": [
                             {"token": "Par", "logprob": -0.1,
                              "top_logprobs": [{"token": "Par", "logprob": -0.1},
                                               {"token": "Lyon", "logprob": -2.5}]},
                             {"token": "is", "logprob": -0.2, "top_logprobs": []}]}}]}
    found = read_reply(chat, True, _malformed, logprobs=True).logprobs
    assert found == (TokenLogprob("Par", -0.1, (("Par", -0.1), ("Lyon", -2.5))),
                     TokenLogprob("is", -0.2))
    legacy = {"choices": [{"text": "Paris", "logprobs": {
        "tokens": ["Par", "is"], "token_logprobs": [-0.1, -0.2],
        "top_logprobs": [{"Lyon": -2.5, "Par": -0.1}, {"is": -0.2}]}}]}
    found = read_reply(legacy, False, _malformed, logprobs=True).logprobs
    assert found is not None and found[0].top == (("Par", -0.1), ("Lyon", -2.5))
    with pytest.raises(PermanentError, match="no token log-probabilities"):
        read_reply({"choices": [{"message": {"content": "Paris"}}]}, True, _malformed,
                   logprobs=True)


def _questions() -> tuple[list[Item], dict[str, tuple[str, float]]]:
    items, script = [], {}
    for k in range(8):
        question = f"Question number {k}?"
        right = k % 2 == 0
        # wrong answers alone have unlikely tokens; lengths vary so length cannot tell
        script[question] = (("right answer" + " indeed" * (k % 3)) if right
                            else ("wrong answer" + " indeed" * ((k + 1) % 3)),
                            LOG(0.9) if right else LOG(0.2))
        items.append(Item(f"q{k}", question, ("right",)))
    return items, script


def test_wrong_answers_alone_unlikely_give_auroc_one() -> None:
    items, script = _questions()
    backend = FakeBackend(responder=scripted(script), name="logprob-script")
    with Context(cache=None) as ctx:
        outcome = run_logprob(items, backend_spec(ctx, backend), LogprobSettings(top_k=2), ctx,
                              None, "script")
        verdicts = label_answers([Labelled(r.prompt, r.answer, r.references)
                                  for r in outcome.records])
    incorrect = [not v.correct for v in verdicts]
    assert sum(incorrect) == 4
    records = outcome.records
    assert auroc([-float(r.score) for r in records], incorrect) == 1.0  # type: ignore[arg-type]
    assert all(r.min_prob == pytest.approx(0.9 if "right" in r.answer else 0.2) for r in records)
    assert all(r.mean_entropy is not None for r in records)
    assert outcome.summary.n_scored == 8


def backend_spec(ctx: Context, backend: FakeBackend) -> str:
    """Put a backend object into a context under its spec."""
    ctx.clients[backend.spec] = LLMClient(backend, ctx.cache, ctx.progress)
    return backend.spec


class NoLogprobs(FakeBackend):
    capabilities = Capabilities(prefill=True, seed=True, max_concurrency=8)


def test_backend_without_log_probabilities_fails_before_any_call(tmp_path: Path) -> None:
    backend = NoLogprobs("stable")
    with Context(cache=None) as ctx, pytest.raises(CapabilityError, match="'logprobs'"):
        run_logprob([Item("q", "Q?")], backend_spec(ctx, backend), LogprobSettings(), ctx,
                    tmp_path / "run", "prompts")
    assert backend.history == [] and not (tmp_path / "run").exists()


def test_scoring_given_greedy_answers_makes_no_call() -> None:
    items = [Item("a", "A?"), Item("b", "B?"), Item("c", "C?")]
    greedy = [Generation("Paris", logprobs=(TokenLogprob("Paris", LOG(0.5)),)),
              Generation("no log-probabilities"), PermanentError("rejected")]
    records = score_greedy(items, greedy, LogprobSettings(signal="min_prob"))
    assert records[0].score == pytest.approx(0.5) and records[0].mean_entropy is None
    assert records[1].score is None and "no token log-probabilities" in str(records[1].error)
    assert records[2].score is None and "rejected" in str(records[2].error)
    again = LogprobRecord.from_json(json.loads(json.dumps(records[0].to_json())))
    assert again == records[0]


def test_cli_live_and_recorded_end_to_end(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "live"
    result = runner.invoke(main, ["logprob", "--dataset", "builtin", "--limit", "3", "-m",
                                  "fake/stable", "--no-cache", "-q", "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["score"] < 0 for r in records)
    assert json.loads((out / "run.json").read_text())["method"] == "logprob"
    assert "logprob-items" in (out / "report.html").read_text()
    recorded = tmp_path / "answers.jsonl"
    recorded.write_text(json.dumps({
        "prompt": "Capital of France?", "answer": "Paris", "references": ["Paris"],
        "logprobs": [{"token": "Par", "logprob": LOG(0.5), "top_logprobs": []},
                     {"token": "is", "logprob": LOG(0.5), "top_logprobs": []}]}) + "\n")
    result = runner.invoke(main, ["logprob", "--recorded", str(recorded), "--signal",
                                  "perplexity", "--json", "--no-cache", "-q",
                                  "--out", str(tmp_path / "rec")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["score"] == pytest.approx(2.0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "p", "answer": "a", "logprobs": [{"token": "a"}]}))
    result = runner.invoke(main, ["logprob", "--recorded", str(bad), "--no-cache", "-q"])
    assert result.exit_code != 0 and "line 1" in result.output


def test_public_api() -> None:
    result = veracity.logprob(["Capital of France?"], "fake/stable", top_k=0, cache=False)
    assert result.records[0].mean_entropy is None and result.records[0].score is not None


@pytest.mark.real
def test_bundled_model_log_probabilities_are_those_its_greedy_answer_was_chosen_by() -> None:
    pytest.importorskip("llama_cpp")
    with Context(cache=None) as ctx:
        client = ctx.client("llamacpp/default")
        question = "What is the capital of France?"
        asked = GenRequest.user(question, Sampling(max_tokens=12), logprobs=3)
        generation, plain = client.generate([asked, GenRequest.user(question,
                                                                    Sampling(max_tokens=12))])
    assert generation.text == plain.text  # asking for them changes no answer
    assert generation.logprobs
    assert "".join(t.token for t in generation.logprobs) == generation.text
    for token in generation.logprobs:  # greedy: each chosen token is the likeliest
        assert token.logprob == pytest.approx(token.top[0][1], abs=1e-6)


def _tiny_causal_lm(path: Path) -> Path:
    """A randomly initialised one-layer GPT-2 over a word-level vocabulary, made here."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    torch = pytest.importorskip("torch")
    words = ["<pad>", "<eos>", "<unk>", *"the capital of france is paris lyon a city big".split()]
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(
        {w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=model, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=len(words), n_positions=64, n_embd=16, n_layer=1, n_head=2,
        eos_token_id=1, pad_token_id=0, bos_token_id=1))
    lm.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.slow
def test_transformers_log_probabilities_are_those_of_the_chosen_tokens(tmp_path: Path) -> None:
    from veracity.registry import load_model

    backend = load_model(f"hf/{_tiny_causal_lm(tmp_path / 'lm')}", chat_template="raw",
                         threads=1)
    try:
        greedy = GenRequest.user("the capital of france is", Sampling(max_tokens=6), logprobs=3)
        sampled = GenRequest.user("the capital of france is",
                                  Sampling(temperature=1.0, max_tokens=6, seed=3), logprobs=2)
        plain = GenRequest.user("the capital of france is", Sampling(max_tokens=6))
        found, drawn, text = backend.generate([greedy, sampled, plain])
    finally:
        backend.close()
    assert isinstance(found, Generation) and isinstance(drawn, Generation)
    assert isinstance(text, Generation) and text.logprobs is None
    assert found.text == text.text  # asking for them changes no answer
    assert found.logprobs and len(found.logprobs) == found.completion_tokens
    for token in found.logprobs:  # greedy: the chosen token is the likeliest
        assert len(token.top) == 3 and token.logprob == pytest.approx(token.top[0][1])
    assert drawn.logprobs and all(len(t.top) == 2 and t.logprob <= 0 for t in drawn.logprobs)
    total = sum(math.exp(lp) for _, lp in found.logprobs[0].top)
    assert total <= 1.0 + 1e-9
