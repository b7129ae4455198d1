"""An HHEM-style similarity (the FEWL paper's C.3, Vectara's hallucination-evaluation model):
a model directory with its own code that scores pairs with its own ``predict`` and builds its
tokenizer from a "foundation" model. Made tiny, with random weights, inside the test."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from veracity.embed.cross import CrossEncoderScorer  # noqa: E402
from veracity.errors import ConfigError  # noqa: E402

CONFIGURATION = '''
from transformers import PretrainedConfig


class PairConfig(PretrainedConfig):
    model_type = "tiny-pair-judge"

    def __init__(self, foundation="example/foundation", prompt="{text1} || {text2}",
                 width=8, **kwargs):
        super().__init__(**kwargs)
        self.foundation, self.prompt, self.width = foundation, prompt, width
'''

MODELING = '''
import torch
from transformers import AutoTokenizer, PreTrainedModel

from .configuration_pair import PairConfig


class PairJudge(PreTrainedModel):
    """Scores (premise, hypothesis) pairs; its tokenizer comes from config.foundation."""

    config_class = PairConfig

    def __init__(self, config):
        super().__init__(config)
        self.tokenizer = AutoTokenizer.from_pretrained(config.foundation)
        self.embed = torch.nn.Embedding(len(self.tokenizer), config.width)
        self.head = torch.nn.Linear(config.width, 2)
        self.post_init()

    def predict(self, pairs):
        texts = [self.config.prompt.format(text1=a, text2=b) for a, b in pairs]
        batch = self.tokenizer(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            mask = batch["attention_mask"].unsqueeze(-1).float()
            pooled = (self.embed(batch["input_ids"]) * mask).sum(1) / mask.sum(1)
            return torch.softmax(self.head(pooled), dim=-1)[:, 1]
'''

HUB_NAME = "example/foundation-t5"


@pytest.fixture(autouse=True)
def _own_modules_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model code transformers copies out goes to this test's folder, under a
    ``transformers_modules`` package of its own: another test's package, still imported from
    its own folder, would hide this one's code."""
    from transformers import dynamic_module_utils

    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    for name in [n for n in sys.modules if n.startswith("transformers_modules")]:
        monkeypatch.delitem(sys.modules, name)
    # and no other test's copy on the import path, found before this one's
    monkeypatch.setattr(sys, "path", [p for p in sys.path
                                      if not (Path(p) / "transformers_modules").is_dir()])


def _foundation(root: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "||", "the", "sky", "is", "blue", "green", "grass"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]",
                                   unk_token="[UNK]")
    path = root / "foundation"
    fast.save_pretrained(path)
    return path


def _model(root: Path, foundation: Path) -> Path:
    path = root / "pair-judge"
    path.mkdir()
    (path / "configuration_pair.py").write_text(CONFIGURATION, encoding="utf-8")
    (path / "modeling_pair.py").write_text(MODELING, encoding="utf-8")
    (path / "__init__.py").write_text("", encoding="utf-8")
    sys.path.insert(0, str(root))
    try:
        spec = importlib.util.spec_from_file_location("pair_judge_build.modeling_pair",
                                                      path / "modeling_pair.py",
                                                      submodule_search_locations=None)
        package = importlib.util.spec_from_file_location("pair_judge_build", path / "__init__.py",
                                                         submodule_search_locations=[str(path)])
        assert spec is not None and package is not None
        sys.modules["pair_judge_build"] = importlib.util.module_from_spec(package)
        module = importlib.util.module_from_spec(spec)
        sys.modules["pair_judge_build.modeling_pair"] = module
        assert spec.loader is not None
        spec.loader.exec_module(module)
        config_module = sys.modules["pair_judge_build.configuration_pair"]
        import torch

        torch.manual_seed(0)
        model = module.PairJudge(config_module.PairConfig(foundation=str(foundation)))
        model.save_pretrained(path)
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n.startswith("pair_judge_build")]:
            del sys.modules[name]
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    config |= {"foundation": HUB_NAME, "architectures": ["PairJudge"], "auto_map": {
        "AutoConfig": "configuration_pair.PairConfig",
        "AutoModelForSequenceClassification": "modeling_pair.PairJudge"}}
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hhem")
    foundation = _foundation(root)
    return _model(root, foundation), foundation


def test_the_model_code_must_be_allowed(built: tuple[Path, Path]) -> None:
    model, foundation = built
    scorer = CrossEncoderScorer(model, foundation=str(foundation))
    with pytest.raises(ConfigError, match="trust_remote_code=true"):
        scorer.score([("the sky is blue", "the sky is green")])


def test_the_foundation_is_never_fetched(built: tuple[Path, Path]) -> None:
    model, _ = built
    scorer = CrossEncoderScorer(model, trust_remote_code=True)
    with pytest.raises(ConfigError, match=f"'{HUB_NAME}'.*foundation=DIR"):
        scorer.score([("the sky is blue", "the sky is green")])


@pytest.mark.slow
def test_hhem_style_scores_come_from_the_models_own_predict(built: tuple[Path, Path]) -> None:
    model, foundation = built
    scorer = CrossEncoderScorer(model, trust_remote_code=True, foundation=str(foundation),
                                batch_size=2)
    pairs = [("the sky is blue", "the sky is green"), ("grass is green", "grass is green"),
             ("the sky", "blue")]
    scores = scorer.score(pairs)
    assert scores.shape == (3,) and np.all((scores >= 0) & (scores <= 1))
    assert scorer.identity()["foundation"] == str(foundation)
    # the same numbers as the model's predict, batch by batch
    from transformers import AutoModelForSequenceClassification

    direct = AutoModelForSequenceClassification.from_pretrained(
        str(model), trust_remote_code=True, foundation=str(foundation))
    expected = direct.predict(pairs).numpy()
    assert scores == pytest.approx(expected.astype(np.float64), abs=1e-6)
