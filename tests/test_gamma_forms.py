"""The three γ forms, thresholds that say their form and convert, and truncated answers."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from veracity.backends.base import Capabilities, Outcome
from veracity.cli import main
from veracity.client import CachedEmbedder, LLMClient
from veracity.embed.hashing import HashEmbedder
from veracity.errors import ConfigError
from veracity.methods.gamma.core import (
    GammaSettings,
    Threshold,
    aggregate,
    convert_gamma,
    gamma_batch,
    gamma_from_embeddings,
    measure_gamma,
)
from veracity.methods.gamma.records import GammaRecord
from veracity.methods.gamma.validation.core import import_ratings
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.types import Generation, GenRequest, Item, Sampling


def test_conversion_between_the_angle_forms_by_hand() -> None:
    # paper-code 0.05: cos = 1 - 0.05² = 0.9975; sin = sqrt(1 - 0.9975²) = sqrt(0.00499375)
    assert convert_gamma(0.05, "paper-code", "sin") == pytest.approx(math.sqrt(0.00499375))
    assert convert_gamma(0.05, "paper-code", "sin") == pytest.approx(0.0706664, abs=1e-7)
    # sin 0.1: cos = sqrt(0.99) = 0.99498744; paper-code = sqrt(0.00501256) = 0.0707995
    assert convert_gamma(0.1, "sin", "paper-code") == pytest.approx(0.0707995, abs=1e-7)
    # the authors' tester buckets 0.1 / 0.2 (trust) are the same conversion
    assert convert_gamma(0.1, "paper-code", "sin") == pytest.approx(0.141067, abs=1e-6)
    for value in (0.0, 0.01, 0.3, 0.9):
        there = convert_gamma(value, "sin", "paper-code")
        assert convert_gamma(there, "paper-code", "sin") == pytest.approx(value, abs=1e-12)
    assert convert_gamma(0.3, "magnitude", "magnitude") == 0.3


def test_conversion_is_consistent_with_gamma_itself() -> None:
    centre, perturbed = [1.0, 0.0, 0.0], [[0.9, 0.3, 0.1], [0.95, -0.1, 0.2]]
    sin = gamma_from_embeddings(centre, perturbed, "sin")
    code = gamma_from_embeddings(centre, perturbed, "paper-code")
    assert convert_gamma(code, "paper-code", "sin") == pytest.approx(sin)


@pytest.mark.parametrize("source, target", [("magnitude", "sin"), ("paper-code", "magnitude")])
def test_magnitude_does_not_convert(source: Any, target: Any) -> None:
    with pytest.raises(ConfigError, match="embeddings' lengths"):
        convert_gamma(0.05, source, target)


def test_angles_past_90_degrees_have_no_sin_threshold() -> None:
    with pytest.raises(ConfigError, match="over 90 degrees"):
        convert_gamma(1.2, "paper-code", "sin")


def test_magnitude_form_by_hand() -> None:
    # v0 = (1, 0), perturbed (1, 0) and (0, 1): mean (0.5, 0.5), |v0 - mean| = sqrt(0.5)
    assert gamma_from_embeddings([1, 0], [[1, 0], [0, 1]], "magnitude") == pytest.approx(
        math.sqrt(0.5))
    # the same answers in the angle forms: cos(v0, b) = 1 / sqrt(2)
    assert gamma_from_embeddings([1, 0], [[1, 0], [0, 1]], "sin") == pytest.approx(math.sqrt(0.5))
    assert gamma_from_embeddings([1, 0], [[1, 0], [0, 1]], "paper-code") == pytest.approx(
        math.sqrt(1 - math.sqrt(0.5)))
    # identical answers: exactly 0, even where the mean of N copies rounds
    v = [0.1, 0.7, 0.3]
    assert gamma_from_embeddings(v, [v] * 10, "magnitude") == 0.0
    # unlike the angle, it sees length: parallel vectors of other norms
    assert gamma_from_embeddings([2, 0], [[1, 0], [1, 0]], "magnitude") == pytest.approx(1.0)
    assert gamma_from_embeddings([2, 0], [[1, 0], [1, 0]], "sin") == 0.0
    # a zero vector is undefined, as in the other forms
    assert math.isnan(float(gamma_batch([[0.0, 0.0]], [[[1.0, 0.0]]], "magnitude")[0]))


def test_thresholds_carry_their_form() -> None:
    assert Threshold.default("sin") == Threshold(0.05, "paper-code")
    assert Threshold.default("magnitude") == Threshold(0.05, "magnitude")
    settings = GammaSettings()
    assert settings.applied_threshold == pytest.approx(0.0706664, abs=1e-7)
    assert settings.describe()["threshold_given"] == {"value": 0.05, "form": "paper-code"}
    assert GammaSettings(form="paper-code").applied_threshold == 0.05
    assert GammaSettings(threshold_form="sin").applied_threshold == 0.05
    assert GammaSettings(form="magnitude").applied_threshold == 0.05
    with pytest.raises(ConfigError, match="cannot be converted"):
        GammaSettings(form="magnitude", threshold_form="sin")


def test_aggregate_converts_a_threshold_and_names_it() -> None:
    records = [GammaRecord("q", "?", "!", g, "sin") for g in (0.06, 0.08, 0.02, None)]
    paper = aggregate(records, Threshold(0.05, "paper-code"))
    # 0.05 paper-code = 0.0707 sin: 0.06 and 0.02 are below it
    assert paper.share_below_threshold == pytest.approx(2 / 3)
    assert paper.threshold == pytest.approx(0.0706664, abs=1e-7)
    assert paper.threshold_form == "sin"
    assert paper.to_json()["threshold_given"] == {"value": 0.05, "form": "paper-code"}
    assert aggregate(records, Threshold(0.05, "sin")).share_below_threshold == pytest.approx(1 / 3)
    with pytest.raises(ConfigError, match="mix"):
        aggregate([GammaRecord("q", "?", "!", 0.1, "sin"),
                   GammaRecord("q", "?", "!", 0.1, "magnitude")], Threshold(0.05))


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_cli_summary_names_the_threshold_form(tmp_path: Path) -> None:
    common = ["gamma", "--dataset", "builtin", "--limit", "6", "--model", "fake/unstable",
              "--embedder", "hash/default", "-n", "2"]
    out = _cli(*common, "--out", str(tmp_path / "a"))
    assert "γ < 0.07067 (sin; given 0.05 paper-code):" in out
    results = RunDir.open(tmp_path / "a").results
    assert results["settings"]["threshold_given"] == {"value": 0.05, "form": "paper-code"}
    out = _cli(*common, "--threshold-form", "sin", "--out", str(tmp_path / "b"))
    assert "γ < 0.05 (sin):" in out
    out = _cli(*common, "--form", "magnitude", "--out", str(tmp_path / "c"))
    assert "γ < 0.05 (magnitude):" in out and "form magnitude" in out
    records = list(RunDir.open(tmp_path / "c").samples())
    assert all(r["form"] == "magnitude" and r["gamma"] >= 0 for r in records)
    report = (tmp_path / "a" / "report.html").read_text(encoding="utf-8")
    assert "0.07067 sin (given 0.05 paper-code)" in report
    bad = CliRunner().invoke(main, [*common, "--form", "magnitude", "--threshold-form",
                                    "paper-code", "--out", str(tmp_path / "d")])
    assert bad.exit_code != 0 and "cannot be converted" in bad.output


def test_annotate_import_converts_to_the_runs_form(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _cli("gamma", "--dataset", "builtin", "--limit", "4", "--model", "fake/unstable",
         "--embedder", "hash/default", "-n", "2", "--out", str(run), "-q", "--json")
    records = list(RunDir.open(run).samples())
    sheet = tmp_path / "alice.csv"
    sheet.write_text("item_id,rating\n" + "".join(f"{r['id']},4\n" for r in records),
                     encoding="utf-8")
    paper = import_ratings(run, [sheet]).to_json()
    assert paper["threshold"] == pytest.approx(convert_gamma(0.05, "paper-code", "sin"))
    assert paper["threshold_form"] == "sin"
    assert paper["threshold_given"] == {"value": 0.05, "form": "paper-code"}
    cut = paper["threshold"]
    assert paper["n_below_threshold"] == sum(r["gamma"] < cut for r in records)
    own = import_ratings(run, [sheet], threshold_form="sin")
    assert own.analysis.threshold == 0.05 and own.threshold_given.form == "sin"
    out = _cli("annotate", "import", str(run), str(sheet))
    assert "R(γ < 0.07067 (sin; given 0.05 paper-code))" in out


class _Cut:
    """A backend whose answers all hit max_tokens except the ones it is told end."""

    capabilities = Capabilities(prefill=False, seed=True, max_concurrency=4)
    spec = "test/cut"

    def identity(self) -> dict[str, Any]:
        return {"mode": "cut"}

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        return [Generation(f"answer to {r.messages[-1].content[:12]}",
                           finish_reason="stop" if "short" in r.messages[-1].content else "length")
                for r in requests]

    def close(self) -> None:
        pass


def test_truncated_answers_are_marked_and_counted() -> None:
    items = [Item("a", "a long question"), Item("b", "a short one")]
    with Context() as ctx:
        client = LLMClient(_Cut(), None, ctx.progress)
        embedder = CachedEmbedder(HashEmbedder(), None)
        records = measure_gamma(items, client, embedder,
                                GammaSettings(n=3, sampling=Sampling(max_tokens=4)))
    assert [r.finish_reason for r in records] == ["length", "stop"]
    # perturbed prompts of the short question keep the word "short"
    assert [r.perturbed_truncated for r in records] == [3, 0]
    agg = aggregate(records, Threshold(0.05))
    assert agg.n_truncated == 1 and agg.n_perturbed_truncated == 3
    assert json.dumps(agg.to_json())
