"""Draft-verified greedy decoding: the acceptance logic on a scripted model, then the real one."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local_models import has_local_models
from veracity.backends.llamacpp_draft import (
    EXPLORE,
    Decoded,
    DraftStats,
    Proposer,
    draft_decode,
    next_draft,
)

EOG = 0
OTHER = 99


class Scripted:
    """A model whose greedy continuation after the prompt is ``truth`` then end-of-generation;
    off that path it always says OTHER. Tracks its KV cache like llama.cpp's."""

    def __init__(self, truth: Sequence[int]) -> None:
        self.truth = list(truth)
        self.kv: list[int] = []
        self.evaluated = 0

    def choice(self, prefix: Sequence[int]) -> int:
        if list(prefix) != self.truth[: len(prefix)]:
            return OTHER
        return self.truth[len(prefix)] if len(prefix) < len(self.truth) else EOG

    def forward(self, tokens: list[int]) -> list[int]:
        out = []
        for token in tokens:
            self.kv.append(token)
            self.evaluated += 1
            out.append(self.choice(self.kv))
        return out

    def truncate(self, kept: int) -> None:
        self.kv = self.kv[:kept]

    def decode(self, draft: Sequence[int], max_tokens: int = 64, stop: Sequence[bytes] = (),
               max_batch: int = 32, more: Sequence[Sequence[int]] = (),
               proposer: Proposer | None = None) -> tuple[Decoded, DraftStats]:
        stats = DraftStats()
        done = draft_decode(self.choice([]), draft, self.forward, self.truncate,
                            is_eog=lambda t: t == EOG,
                            detokenize=lambda out: b" ".join(str(t).encode() for t in out),
                            stop=stop, max_tokens=max_tokens, max_batch=max_batch, stats=stats,
                            more=more, proposer=proposer)
        return done, stats


def test_a_draft_equal_to_the_answer_is_accepted_in_one_pass() -> None:
    model = Scripted([5, 6, 7, 8])
    done, stats = model.decode([5, 6, 7, 8, EOG])
    assert (done.tokens, done.finish_reason) == ([5, 6, 7, 8], "stop")
    assert (stats.forward_passes, stats.proposed, stats.accepted) == (1, 4, 4)


def test_a_draft_rejected_at_position_k_goes_on_from_the_models_token() -> None:
    model = Scripted([5, 6, 7, 8])
    done, stats = model.decode([5, 6, 1, 2, 3, EOG])  # wrong from the third token
    assert done.tokens == [5, 6, 7, 8] and done.finish_reason == "stop"
    assert stats.accepted == 1  # 6 accepted after 5; 1 rejected, the model said 7
    assert model.kv[:3] == [5, 6, 7]  # the rejected tokens left the KV cache


def test_decoding_drafts_again_when_the_answer_realigns_with_the_draft() -> None:
    truth = [5, 9, 7, 8, 10, 11, 12, 13, 14]
    model = Scripted(truth)
    done, stats = model.decode([5, 6, 7, 8, 10, 11, 12, 13, 14, EOG])
    assert done.tokens == truth
    # 9 differs; once "7 8 10" occurs in the draft, the rest is accepted in one pass
    assert stats.forward_passes == 5 and stats.accepted == 4


def test_stops_inside_the_draft_end_decoding_there() -> None:
    model = Scripted([5, 6, 7, 8])
    done, _ = model.decode([5, 6, 7, 8, EOG], stop=[b"6 7"])
    assert (done.text, done.finish_reason) == (b"5 ", "stop")
    done, _ = Scripted([5, 6, 7, 8]).decode([5, 6, 7, 8, EOG], max_tokens=3)
    assert (done.tokens, done.finish_reason) == ([5, 6, 7], "length")  # y0 longer than max


def test_an_empty_draft_is_plain_greedy_decoding() -> None:
    model = Scripted([5, 6, 7])
    done, stats = model.decode([])
    assert done.tokens == [5, 6, 7] and stats.proposed == 0 and stats.forward_passes == 3


def test_other_answers_are_drafted_from_where_the_draft_has_nothing() -> None:
    truth = [5, 9, 7, 8, 10, 11, 12]
    model = Scripted(truth)
    done, stats = model.decode([], more=[[3, 3, 3], [1, 9, 7, 8, 10, 11, 12, EOG]])
    assert done.tokens == truth
    # one token at a time until "9 7 8" occurs in the second answer, then the rest in one pass
    assert (stats.forward_passes, stats.proposed, stats.accepted) == (4, 4, 4)


def test_next_draft_follows_the_draft_or_its_last_match() -> None:
    assert next_draft([1, 2], [1, 2, 3, 4], 1) == [3]
    assert next_draft([7, 2, 3, 4], [1, 2, 3, 4, 5, 2, 3, 4, 6], 5) == [6]  # the latest match
    assert next_draft([1], [2, 3], 5) == []


tokens = st.lists(st.integers(min_value=1, max_value=6), max_size=12)


SHARED = Proposer()
"""Learns across the examples, as a backend's does across requests."""


@settings(max_examples=300, deadline=None)
@given(truth=tokens, draft=tokens, max_tokens=st.integers(1, 16), max_batch=st.integers(1, 8),
       eog_in_draft=st.booleans(), more=st.lists(tokens, max_size=3), adaptive=st.booleans())
def test_whatever_the_draft_the_answer_is_the_greedy_one(
    truth: list[int], draft: list[int], max_tokens: int, max_batch: int, eog_in_draft: bool,
    more: list[list[int]], adaptive: bool,
) -> None:
    model = Scripted(truth)
    done, stats = model.decode(draft + ([EOG] if eog_in_draft else []), max_tokens, (), max_batch,
                               more, SHARED if adaptive else None)
    expected = truth[:max_tokens]
    reason = "length" if len(truth) >= max_tokens else "stop"
    assert (done.tokens, done.finish_reason) == (expected, reason)
    assert stats.accepted <= stats.proposed
    # no rejected token left in the cache (past the answer's end it no longer matters)
    assert model.kv[: len(done.tokens)] == done.tokens[: len(model.kv)]


def test_a_pass_costs_what_was_timed_between_the_sizes_timed_and_a_prior_past_them() -> None:
    proposer = Proposer()
    assert proposer.pass_cost(5) == 3.0  # nothing timed: half a pass a row
    proposer.timed(1, 0.010)
    proposer.timed(5, 0.030)
    assert proposer.pass_cost(5) == pytest.approx(3.0)
    assert proposer.pass_cost(3) == pytest.approx(2.0)  # halfway between 1 and 5 rows
    assert proposer.pass_cost(9) == pytest.approx(5.0)  # 3.0, then 0.5 a row past 5 rows
    proposer.timed(1, 0.030)  # moving averages: 0.010 + 0.05 * 0.020
    assert proposer.seconds[1] == pytest.approx(0.011)
    assert proposer.row_costs() == {1: 1.0, 5: pytest.approx(2.727, abs=1e-3)}


def test_the_length_proposed_is_the_one_with_the_largest_expected_saving() -> None:
    proposer = Proposer()
    proposer.timed(1, 0.010)
    proposer.timed(2, 0.015)  # a row costs half a pass (and past two rows, the prior's half)
    # the rest of the request's own draft: 7 in 10 accepted before any is seen; proposing a
    # first token saves 0.7 - 0.5 = 0.2 passes, a second 0.49 - 0.5 < 0
    assert proposer.length("rest", 10) == 1
    proposer.timed(33, 0.010 + 0.002 * 32)  # a fifth of a pass a row, up to 33 rows
    proposer.seconds[2] = 0.012
    # reach 0.7, 0.49, 0.343, 0.240, 0.168; savings 0.5, 0.79, 0.933, 0.973, 0.941: four
    assert proposer.length("rest", 10) == 4
    assert proposer.length("rest", 3) == 3


def test_a_kind_that_never_pays_is_tried_again_now_and_then() -> None:
    proposer = Proposer()
    proposer.timed(1, 0.010)
    proposer.timed(2, 0.015)
    # realigned drafts: one in two before any is seen, 0.5 - 0.5 saves nothing
    assert [proposer.length("realigned", 8) for _ in range(EXPLORE)] == [0] * (EXPLORE - 1) + [1]
    for _ in range(40):  # then accepted all the time: worth proposing long drafts
        proposer.learn("realigned", 8, 8)
    assert proposer.length("realigned", 8) == 8


def test_learning_counts_each_depth_only_when_it_was_tested() -> None:
    proposer = Proposer()
    proposer.learn("rest", 5, 2)  # depths 0 and 1 accepted, 2 rejected, 3 and 4 never seen
    assert proposer.tested["rest"][:5] == [1, 1, 1, 0, 0]
    assert proposer.passed["rest"][:5] == [1, 1, 0, 0, 0]


def test_adaptive_proposals_stop_paying_for_drafts_that_fail() -> None:
    # realigned drafts from another answer that always go wrong right after the match
    truth = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    other = [[1, 2, 3, 30, 31, 32, 4, 5, 6, 40, 41, 42, 7, 8, 9, 50, 51, 52]]
    fixed = sum(Scripted(truth).decode([], more=other)[1].proposed for _ in range(20))
    proposer = Proposer()
    adaptive = 0
    for _ in range(20):
        done, stats = Scripted(truth).decode([], more=other, proposer=proposer)
        assert done.tokens == truth
        adaptive += stats.proposed
    assert adaptive < fixed / 3, (adaptive, fixed)


pytestmark_real = pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")


@pytest.mark.real
@pytestmark_real
def test_draft_and_sequential_decoding_agree_on_the_bundled_model() -> None:
    """With flash attention (what decode=draft uses) both decoders compute every token by the
    same kernels: where the load-time check finds batching exact, the answers are identical,
    and reusing any shared prompt prefix changes nothing either."""
    from veracity.registry import load_model
    from veracity.types import GenRequest, Sampling

    sampling = Sampling(max_tokens=48)
    prompts = ["What is the capital of France?", "What is the capital of France? \x01\x02",
               "Who wrote Hamlet?", "Who wrote Hamlet? ~~", "Name a prime number."]
    sequential_backend = load_model("llamacpp/default", attention="flash")
    fresh_backend = load_model("llamacpp/default", attention="flash", reuse_prefix=False)
    try:
        assert sequential_backend.identity()["attention"] == "flash"
        centre = sequential_backend.generate([GenRequest.user(prompts[0], sampling)])[0]
        expected = sequential_backend.generate([GenRequest.user(p, sampling) for p in prompts])
        fresh = fresh_backend.generate([GenRequest.user(p, sampling) for p in prompts])
        exact = sequential_backend.batch_invariant  # type: ignore[attr-defined]
    finally:
        sequential_backend.close()
        fresh_backend.close()
    draft_backend = load_model("llamacpp/default", decode="draft")
    try:
        assert draft_backend.identity()["decode"] == "draft"
        assert draft_backend.identity()["attention"] == "flash"
        got = draft_backend.generate([GenRequest.user(p, sampling, draft=centre.text)  # type: ignore[union-attr]
                                      for p in prompts])
        stats = draft_backend.draft_stats  # type: ignore[attr-defined]
    finally:
        draft_backend.close()
    texts = [[o.text for o in outs] for outs in (expected, fresh, got)]  # type: ignore[union-attr]
    if exact:
        assert texts[0] == texts[1] == texts[2]
    else:  # a CPU or build where batches round differently: near-ties may flip
        assert sum(a == b for a, b in zip(texts[0], texts[2], strict=True)) >= 4, texts
    assert stats.accepted > 0


@pytest.mark.real
@pytestmark_real
def test_flash_attention_is_part_of_the_identity_and_checked_at_load() -> None:
    from veracity.registry import load_model

    standard = load_model("llamacpp/default", attention="standard")
    try:
        assert "attention" not in standard.identity()  # the standard kernel keeps its old cache
        assert "batch_invariant" not in standard.compute_path()
    finally:
        standard.close()
    flash = load_model("llamacpp/default", attention="flash")
    try:
        assert flash.identity()["attention"] == "flash"
        assert flash.compute_path()["batch_invariant"] in (True, False)
    finally:
        flash.close()


def test_cache_keys_differ_between_decoders_only_with_a_draft() -> None:
    from veracity.client import request_key
    from veracity.types import GenRequest

    plain = GenRequest.user("q")
    drafted = GenRequest.user("q", draft="an answer")
    assert request_key("m", {}, plain) == request_key("m", {}, drafted)  # draft ignored
    assert request_key("m", {"decode": "draft"}, drafted) != request_key("m", {}, drafted)
    assert request_key("m", {"decode": "draft"}, drafted) != request_key(
        "m", {"decode": "draft"}, GenRequest.user("q", draft="another"))


def test_stops_wait_while_the_text_ends_inside_a_multibyte_character() -> None:
    """As create_completion: no stop or max_tokens check on a token that leaves a character
    half written, so the answer finishes the character."""
    e_acute = "é".encode()  # two bytes: token 5 writes the first, token 6 the second
    pieces = {5: e_acute[:1], 6: e_acute[1:], 7: b"xyz"}
    model = Scripted([7, 5, 6, 7])
    stats = DraftStats()
    done = draft_decode(model.choice([]), [7, 5, 6, 7, EOG], model.forward, model.truncate,
                        is_eog=lambda t: t == EOG,
                        detokenize=lambda out: b"".join(pieces[t] for t in out),
                        stop=(), max_tokens=2, max_batch=8, stats=stats)
    assert done.tokens == [7, 5, 6] and done.text.decode() == "xyzé"
    assert done.finish_reason == "length"
