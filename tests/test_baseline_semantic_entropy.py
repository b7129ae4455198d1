"""Semantic entropy: the entropy forms on hand-computed clusters, greedy clustering batched by
round, answers in known meaning clusters on a scripted backend (discrete and
likelihood-weighted), the judge and NLI paths (a tiny random NLI model made here), the cache,
the CLI end to end (live and recorded)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

import veracity
from veracity.backends.fake import FakeBackend
from veracity.cache import Cache
from veracity.cli import main
from veracity.client import LLMClient
from veracity.errors import ConfigError
from veracity.methods.semantic_entropy.core import (
    SemanticEntropySettings,
    cluster_batches,
    discrete_entropy,
    likelihood_entropy,
)
from veracity.methods.semantic_entropy.fake import first_word_judge, samples
from veracity.methods.semantic_entropy.records import SemanticEntropyRecord
from veracity.methods.semantic_entropy.run import run_semantic_entropy
from veracity.runs.common import Context
from veracity.types import Item

LOG = math.log


def test_entropy_forms_on_hand_computed_clusters() -> None:
    assert discrete_entropy([0, 0, 0]) == 0.0
    assert discrete_entropy([0, 1, 2, 3]) == pytest.approx(LOG(4))
    assert discrete_entropy([0, 0, 1, 2]) == pytest.approx(-(0.5 * LOG(0.5) + 2 * 0.25 * LOG(0.25)))
    # weights exp(mean log p): 0.5 + 0.3 for cluster 0, 0.2 for cluster 1 -> p = 0.8, 0.2
    found = likelihood_entropy([0, 0, 1], [LOG(0.5), LOG(0.3), LOG(0.2)])
    assert found == pytest.approx(-(0.8 * LOG(0.8) + 0.2 * LOG(0.2)))


def test_greedy_clustering_compares_with_one_member_per_cluster_in_batched_rounds() -> None:
    calls: list[list[tuple[str, str, str]]] = []

    def same(batch: Sequence[tuple[str, str, str]]) -> list[bool]:
        calls.append(list(batch))
        return [a[0] == b[0] for _, a, b in batch]  # same meaning = same first letter

    found = cluster_batches(["q1", "q2"], [["apple", "avocado", "banana", "apple", "berry"],
                                           ["kiwi", "lime"]], same)
    assert found == [[0, 0, 1, 0, 1], [0, 1]]
    # one call per round after the first, across both questions; the round where "apple"
    # comes again asks nothing
    assert len(calls) == 3
    # round 1 asks both questions at once
    assert calls[0] == [("q1", "apple", "avocado"), ("q2", "kiwi", "lime")]
    assert ("q1", "apple", "apple") not in [p for c in calls for p in c]
    # each answer meets one member (the first) of each cluster so far
    assert calls[2] == [("q1", "apple", "berry"), ("q1", "banana", "berry")]


SCRIPT = {
    "Capital of France?": [("Paris", LOG(0.5)), ("Paris", LOG(0.5)), ("Lyon city", LOG(0.25)),
                           ("Nice beach", LOG(0.25))],
    "Two plus two?": [("four", LOG(0.9))] * 4,
}


def _run(ctx: Context, settings: SemanticEntropySettings,
         backend: FakeBackend) -> list[SemanticEntropyRecord]:
    ctx.clients[backend.spec] = LLMClient(backend, ctx.cache, ctx.progress)
    items = [Item("france", "Capital of France?"), Item("sum", "Two plus two?")]
    return list(run_semantic_entropy(items, backend.spec, "hash/default", settings, ctx, None,
                                     "script").records)


def test_known_meaning_clusters_give_the_hand_computed_entropy() -> None:
    backend = FakeBackend(responder=samples(SCRIPT), name="se-script")
    with Context(cache=None) as ctx:
        discrete = _run(ctx, SemanticEntropySettings(m=4, form="discrete"), backend)
        weighted = _run(ctx, SemanticEntropySettings(m=4), backend)
    france, sums = discrete
    assert france.clusters == (0, 0, 1, 2) and france.n_clusters == 3
    assert france.score == pytest.approx(-(0.5 * LOG(0.5) + 2 * 0.25 * LOG(0.25)))
    assert sums.score == 0.0 and sums.n_clusters == 1
    assert france.likelihood is None and france.form == "discrete"
    # weights exp(mean log p): 0.5 + 0.5, 0.25, 0.25 -> p(c) = 2/3, 1/6, 1/6
    assert weighted[0].form == "likelihood"
    assert weighted[0].score == pytest.approx(-(2 / 3 * LOG(2 / 3) + 2 / 6 * LOG(1 / 6)))
    assert weighted[0].sample_logprobs == pytest.approx((LOG(0.5), LOG(0.5), LOG(0.25), LOG(0.25)))


def test_judge_decides_meaning() -> None:
    script = {"Capital of France?": [("Paris", -0.1), ("Paris, France", -0.1),
                                     ("Lyon", -0.1), ("lyon it is", -0.1)],
              "Two plus two?": [("four", -0.1)] * 4}
    backend = FakeBackend(responder=samples(script), name="se-judged")
    judge = FakeBackend(responder=first_word_judge, name="se-judge")
    with Context(cache=None) as ctx:
        ctx.clients[judge.spec] = LLMClient(judge, None, ctx.progress)
        records = _run(ctx, SemanticEntropySettings(m=4, entailment=judge.spec,
                                                    form="discrete"), backend)
    # "Paris" and "Paris, France" share a first word only after punctuation: two clusters
    # by the judge's rule are Paris / Paris, / Lyon+lyon
    assert records[0].clusters == (0, 1, 2, 2)
    assert records[0].entailment == "judge (fake/se-judge)"


def _tiny_nli(path: Path, entail_bias: float) -> Path:
    """A randomly initialised BERT sequence classifier whose classifier ignores its input:
    the bias alone decides, so every pair is (or is not) an entailment by construction."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("sentence_transformers")
    words = "paris lyon nice beach city four capital of france two plus".split()
    path.mkdir()
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                               *words]) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt"))
    labels = {0: "contradiction", 1: "entailment", 2: "neutral"}
    config = transformers.BertConfig(vocab_size=5 + len(words), hidden_size=8,
                                     num_hidden_layers=1, num_attention_heads=1,
                                     intermediate_size=8, num_labels=3, id2label=labels,
                                     label2id={v: k for k, v in labels.items()})
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, entail_bias, 0.0]))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.slow
def test_nli_path_on_a_tiny_model_batched_and_cached(tmp_path: Path) -> None:
    always = _tiny_nli(tmp_path / "always", 6.0)
    never = _tiny_nli(tmp_path / "never", -6.0)
    backend = FakeBackend(responder=samples(SCRIPT), name="se-nli")
    cache = Cache(tmp_path / "cache.sqlite")
    with Context(cache=cache, close_cache=False) as ctx:
        one = _run(ctx, SemanticEntropySettings(m=4, entailment=f"nli/{always}",
                                                form="discrete"), backend)
        apart = _run(ctx, SemanticEntropySettings(m=4, entailment=f"hf/{never}",
                                                  form="discrete"), backend)
        first_calls = ctx.scorers[f"nli/{always}"].stats.model_calls
    assert one[0].clusters == (0, 0, 0, 0) and one[0].score == 0.0
    assert apart[0].clusters == (0, 0, 1, 2)  # identical answers join without asking
    assert apart[0].score == pytest.approx(-(0.5 * LOG(0.5) + 2 * 0.25 * LOG(0.25)))
    assert apart[0].entailment.startswith(f"bidirectional entailment (nli/{never}")
    assert first_calls > 0
    with Context(cache=cache, close_cache=False) as ctx:
        again = _run(ctx, SemanticEntropySettings(m=4, entailment=f"nli/{always}",
                                                  form="discrete"), backend)
        assert ctx.scorers[f"nli/{always}"].stats.model_calls == 0
    assert again == one
    cache.close()


def test_settings_refuse_what_cannot_work() -> None:
    with pytest.raises(ConfigError, match="M >= 2"):
        SemanticEntropySettings(m=1)
    with pytest.raises(ConfigError, match="temperature > 0"):
        SemanticEntropySettings(temperature=0.0)


def test_cli_live_and_recorded_end_to_end(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "live"
    result = runner.invoke(main, ["semantic-entropy", "--dataset", "builtin", "--limit", "2",
                                  "-m", "fake/unstable", "-e", "hash/default", "-M", "3",
                                  "--no-cache", "-q", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(len(r["samples"]) == 3 for r in rows)
    assert "semantic-entropy-items" in (out / "report.html").read_text()
    recorded = tmp_path / "samples.jsonl"
    recorded.write_text(json.dumps({"prompt": "Capital of France?", "answer": "Paris",
                                    "samples": ["Paris", "Paris", "Lyon", "Nice"],
                                    "sample_logprobs": [LOG(0.5), LOG(0.5), LOG(0.25),
                                                        LOG(0.25)]}) + "\n")
    result = runner.invoke(main, ["semantic-entropy", "--recorded", str(recorded), "-e",
                                  "hash/default", "--json", "--no-cache", "-q",
                                  "--out", str(tmp_path / "rec")])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)[0]
    assert found["clusters"] == [0, 0, 1, 2] and found["form"] == "likelihood"
    assert found["score"] == pytest.approx(-(2 / 3 * LOG(2 / 3) + 2 / 6 * LOG(1 / 6)))
    assert found["discrete"] == pytest.approx(-(0.5 * LOG(0.5) + 2 * 0.25 * LOG(0.25)))


def test_public_api() -> None:
    result = veracity.semantic_entropy(["Q?"], "fake/constant", "hash/default", m=3,
                                       cache=False)
    assert result.records[0].score == 0.0


def test_no_score_without_a_greedy_answer() -> None:
    from veracity.errors import PermanentError
    from veracity.methods.semantic_entropy.run import score_greedy

    backend = FakeBackend(responder=samples(SCRIPT), name="se-no-greedy")
    with Context(cache=None) as ctx:
        ctx.clients[backend.spec] = LLMClient(backend, None, ctx.progress)
        records = score_greedy([Item("france", "Capital of France?")], [PermanentError("no")],
                               SemanticEntropySettings(m=4), ctx, backend.spec, "hash/default")
    assert records[0].score is None and records[0].error == "no greedy answer to judge"
