"""--scorer-option: a cross-encoder that ships its own model code (like the paper's C.3
hallucination-evaluation model) loads only with trust_remote_code, which is off by default,
recorded, and owned by the run's Context. The model is built here with random weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from data_paths import FIXTURES
from veracity.errors import ConfigError
from veracity.methods.fewl.similarity import CrossEncoderSimilarity, load_similarity
from veracity.registry import parse_options
from veracity.runs.common import Context
from veracity.store import RunDir

pytest.importorskip("sentence_transformers", reason="needs pip install 'veracity[embed]'")

_CONFIGURATION = """from transformers import BertConfig


class TinyConfig(BertConfig):
    model_type = "tiny-veracity-bert"
"""
_MODELING = """from transformers import BertForSequenceClassification

from .configuration_tiny import TinyConfig


class TinyModel(BertForSequenceClassification):
    config_class = TinyConfig
"""


@pytest.fixture
def custom_code_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A one-layer BERT cross-encoder (random weights) whose config points at model code in
    its own directory, as hub models with custom code do."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer, dynamic_module_utils

    # the code transformers copies out of the directory goes to this test's folder
    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    for name in [n for n in sys.modules if n.startswith("transformers_modules")]:
        monkeypatch.delitem(sys.modules, name)  # another test's, imported from its own folder
    # and no other test's copy on the import path, found before this one's
    monkeypatch.setattr(sys, "path", [p for p in sys.path
                                      if not (Path(p) / "transformers_modules").is_dir()])
    path = tmp_path / "tiny-cross-encoder"
    path.mkdir()
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "sat", "ran", "is"]
    (path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    BertTokenizer(str(path / "vocab.txt")).save_pretrained(path)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    config.num_labels = 1  # one output: the score itself
    BertForSequenceClassification(config).save_pretrained(path)
    (path / "configuration_tiny.py").write_text(_CONFIGURATION, encoding="utf-8")
    (path / "modeling_tiny.py").write_text(_MODELING, encoding="utf-8")
    stored = json.loads((path / "config.json").read_text(encoding="utf-8"))
    stored.update(model_type="tiny-veracity-bert", architectures=["TinyModel"], auto_map={
        "AutoConfig": "configuration_tiny.TinyConfig",
        "AutoModelForSequenceClassification": "modeling_tiny.TinyModel"})
    (path / "config.json").write_text(json.dumps(stored), encoding="utf-8")
    return path


def test_custom_code_needs_the_option_and_the_context_owns_the_scorer(
        custom_code_model: Path) -> None:
    spec = f"cross-encoder/{custom_code_model}"
    texts = ["a cat sat", "a dog ran", "the dog is a cat"]
    with Context() as ctx:
        refused = load_similarity(spec, ctx.embedder, scorer_for=ctx.scorer)
        with pytest.raises(ConfigError, match="trust_remote_code=true"):
            refused.table(texts)(np.array([0]), np.array([1]))
    with Context(scorer_options=parse_options(["trust_remote_code=true"], "scorer")) as ctx:
        sim = load_similarity(spec, ctx.embedder, scorer_for=ctx.scorer)
        assert isinstance(sim, CrossEncoderSimilarity)
        values = sim.table(texts)(np.array([0, 1, 2]), np.array([1, 0, 2]))
        assert ((values >= 0) & (values <= 1)).all() and values[2] == 1.0
        assert values[0] == pytest.approx(values[1])  # symmetric by default
        scorer = ctx.scorers[spec]
        assert type(scorer.scorer._model.model).__name__ == "TinyModel"  # type: ignore[attr-defined]
        stats = ctx.stats()[f"scorer:{spec}"]
        assert stats["model_calls"] == 2 and stats["identity"]["trust_remote_code"] is True
        record = ctx.options_record()["scorers"]["cross-encoder"]
        assert record == {"batch_size": 32, "trust_remote_code": True}
    assert ctx.scorers == {} and scorer.scorer._model is None  # type: ignore[attr-defined]


def test_bad_scorer_options_are_clear() -> None:
    with pytest.raises(ConfigError, match="trust_remote_code=maybe"):
        parse_options(["trust_remote_code=maybe"], "scorer")
    with pytest.raises(ConfigError, match="unknown scorer option 'n_ctx'"):
        parse_options(["n_ctx=4"], "scorer")


def test_validate_with_the_scorer_option_records_it(custom_code_model: Path,
                                                    tmp_path: Path) -> None:
    from veracity.cli import main

    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["fewl",
        "validate", "--dataset", f"halueval:{FIXTURES / 'formats' / 'halueval.json'}",
        "--reference", "fake/pairs", "--pairs", "2", "--neighbours", "1",
        "--question-embedder", "hash/default", "--similarity", f"cross-encoder/{custom_code_model}",
        "--scorer-option", "trust_remote_code=true", "--cache", str(tmp_path / "c.sqlite"),
        "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    run = RunDir.open(out)
    options = run.info["config"]["model_options"]["scorers"]["cross-encoder"]
    assert options["trust_remote_code"] is True
    stats = run.info["stats"][f"scorer:cross-encoder/{custom_code_model}"]
    assert stats["model_calls"] > 0
    assert "FEWL" in result.output


def test_models_lists_the_scorer_options() -> None:
    from veracity.cli import main

    result = CliRunner().invoke(main, ["models"])
    assert result.exit_code == 0, result.output
    assert "--scorer-option trust_remote_code=FLAG" in result.output
    assert "(default False)" in result.output
