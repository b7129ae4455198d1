"""An HHEM-style similarity (the FEWL paper's C.3, Vectara's hallucination-evaluation model):
a model directory with its own code that scores pairs with its own ``predict`` and builds its
tokenizer from a "foundation" model. Made tiny, with random weights, inside the test
(tests/fixtures/tiny_pair_judge.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from data_paths import FIXTURES  # noqa: E402
from veracity.embed.cross import CrossEncoderScorer  # noqa: E402
from veracity.errors import ConfigError  # noqa: E402

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


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny judge the docs' examples use too, its config naming a hub name."""
    root = tmp_path_factory.mktemp("hhem")
    subprocess.run([sys.executable, str(FIXTURES / "tiny_pair_judge.py"), str(root), HUB_NAME],
                   check=True)
    return root / "HHEM-2.1-open", root / "flan-t5-base"


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
