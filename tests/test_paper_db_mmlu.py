"""The DB-MMLU paper's Table 1 built in (--model-info paper) and, with its Table 3, every
correlation the text states (§5.1-5.3, Figures A8-A11), pinned."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.data.model_info import SIZE_COLUMN, paper_model_info
from veracity.methods.deception.compare.core import relations
from veracity.methods.deception.compare.paper import STATED, TABLE1, TABLE3, stated, table3_summaries
from veracity.stats import t_two_tailed_p


def test_table1_is_built_in_with_the_papers_values() -> None:
    info = paper_model_info()
    assert len(TABLE1) == 10 and list(TABLE1) == list(TABLE3)
    assert info.columns == (SIZE_COLUMN, "mmlu", "truthfulqa")
    assert "Open LLM Leaderboard" in str(info.path)  # Table 1's footnote: where the scores are from
    assert info.value("Gemma-1.1-2b-it", SIZE_COLUMN) == 2.51
    assert info.value("Phi-3-medium-4k-instruct", "mmlu") == 77.83
    assert info.value("Solar-10.7B-Instruct", "truthfulqa") == 71.43
    # Aya-23-8B and StarChat2-15B-v0.1 have no leaderboard scores ("-"), only a size
    for model, size in (("Aya-23-8B", 8.03), ("StarChat2-15B-v0.1", 16.0)):
        assert info.value(model, SIZE_COLUMN) == size
        assert info.value(model, "mmlu") is None and info.value(model, "truthfulqa") is None


def test_a_runs_model_spec_finds_its_row() -> None:
    info = paper_model_info()
    assert info.row("llamacpp/models/Phi-3-mini-4k-instruct-Q8_0.gguf") == "Phi-3-mini-4k-instruct"
    assert info.row("hf/microsoft/phi-2") == "Phi-2"
    assert info.row("hf/mistralai/Mistral-7B-Instruct-v0.2") == "Mistral-7b-instruct-v0.2"
    assert info.row("fake/unstable") is None
    info.check_models(["fake/unstable"])  # a built-in table is not checked against the runs


def _by_key(key: str, x_label: str) -> tuple[float, float, int]:
    found = [rel for rel in relations(table3_summaries(), paper_model_info())
             if rel.key == key and rel.x_label == x_label]
    assert len(found) == 1, (key, x_label)
    fit = found[0].fit()
    return fit["r"], fit["p"], found[0].n


def test_a8_normal_against_misleading_accuracy() -> None:
    r, _, n = _by_key("A8", "normal accuracy %")
    assert n == 10 and round(r, 2) == 0.81 and r == pytest.approx(0.8089, abs=1e-4)


def test_a9_susceptibility_against_truthfulqa_on_eight_models() -> None:
    r, _, n = _by_key("A9", "truthfulqa")
    assert n == 8  # Aya-23-8B and StarChat2-15B-v0.1 have no TruthfulQA score
    assert round(r, 2) == -0.91 and r == pytest.approx(-0.9078, abs=1e-4)


def test_a10_size_and_normal_accuracy_with_their_p_values() -> None:
    r_size, p_size, n = _by_key("A10", "model size (billions of parameters)")
    r_normal, p_normal, _ = _by_key("A10", "normal accuracy %")
    assert n == 10
    assert round(r_size, 2) == -0.45 and round(p_size, 2) == 0.19
    assert round(r_normal, 2) == -0.54 and round(p_normal, 2) == 0.11
    # the paper's 0.192 and 0.107 are the p of the rounded r (its footnote: t = r√(n−2)/√(1−r²))
    for r, printed in ((-0.45, 0.192), (-0.54, 0.107)):
        t = r * math.sqrt(8) / math.sqrt(1 - r * r)
        assert round(t_two_tailed_p(t, 8), 3) == printed
    assert p_size == pytest.approx(0.1891, abs=1e-4) and p_normal == pytest.approx(0.1096, abs=1e-4)


def test_a11_susceptibility_against_consistency() -> None:
    r, _, n = _by_key("A11", "consistency %")
    assert n == 10 and round(r, 2) == -0.82
    assert stated("A11", "consistency %") is not None
    assert stated("A11", "consistency %").r is None  # type: ignore[union-attr]  # no number in the text


def test_every_stated_value_is_what_table3_gives() -> None:
    for (key, x_label), said in STATED.items():
        r, p, _ = _by_key(key, x_label)
        if said.r is not None:
            assert round(r, 2) == said.r, (key, x_label)
        if said.p is not None:
            assert abs(p - said.p) < 0.005, (key, x_label)


def test_report_with_paper_model_info_states_each_relation_in_words(tmp_path: Path) -> None:
    fixtures = Path(__file__).parent / "fixtures" / "deception_compare"
    runs = []
    for name, model in (("alpha", "llamacpp/Phi-2-Q8_0.gguf"), ("beta", "hf/Gemma-1.1-2b-it"),
                        ("gamma", "Solar-10.7B-Instruct")):
        shutil.copytree(fixtures / name, tmp_path / name)
        results = tmp_path / name / "results.json"
        results.write_text(json.dumps(json.loads(results.read_text()) | {"model": model}))
        runs.append(tmp_path / name)
    out = CliRunner().invoke(main, ["report", *map(str, runs), "--model-info", "paper", "--out",
                                    str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "A8: misleading accuracy % vs normal accuracy %: Pearson r = " in html
    assert "the paper states r = +0.81 (§5.1)" in html
    assert "A9: susceptibility vs truthfulqa: Pearson r = " in html
    assert "the paper states r = -0.91 (§5.2, n = 8)" in html
    assert "the paper states r = -0.45, p = 0.192 (§5.2)" in html
    assert "the paper&#x27;s text states no r (§5.3 names the correlation only)" in html
    # §5.1: the normal accuracy beside Table 1's 5-shot MMLU, per model
    assert "Normal accuracy beside 5-shot MMLU (§5.1)" in html
    assert "58.11" in html and "37.65" in html and "66.21" in html


def test_t_prime_is_read_as_the_questions_of_s_prime() -> None:
    from veracity.methods.deception.core import subject_weighted_susceptibility

    # (t_s, c_n^s, c_m^s): ratios 2 and 3 over 10 and 30 questions
    counts = [(10, 8, 4), (30, 9, 3)]
    # T′ = Σ t_s = 40: a question-weighted mean of the ratios, 10/40·2 + 30/40·3
    assert subject_weighted_susceptibility(counts) == (pytest.approx(2.75), False)
    # the literal "T′ = |S′|" (2 subjects) would give 10/2·2 + 30/2·3 = 55, growing with the
    # subjects' sizes; equal ratios show the difference: our reading returns the ratio itself
    assert subject_weighted_susceptibility([(10, 4, 2), (30, 6, 3)]) == (pytest.approx(2.0), False)
    assert sum(t / 2 * n / m for t, n, m in counts) == pytest.approx(55.0)


def test_result_variability_mean_and_sd_by_hand() -> None:
    from veracity.methods.deception.records import DeceptionSummary
    from veracity.methods.deception.repeats import spreads

    def run(normal: float, misleading: float, susceptibility: float | None) -> DeceptionSummary:
        return DeceptionSummary(10, normal, misleading, susceptibility, susceptibility is None,
                                0.4, None, None, None, None)

    found = spreads([run(0.5, 0.2, 2.5), run(0.6, 0.3, None), run(0.7, 0.1, 3.5)])
    assert found["normal_accuracy"].mean == pytest.approx(0.6)
    assert found["normal_accuracy"].sd == pytest.approx(0.1)  # sample sd of .5, .6, .7
    assert found["susceptibility"].values == (2.5, None, 3.5)  # ∞ is left out
    assert found["susceptibility"].mean == pytest.approx(3.0)
    assert found["susceptibility"].sd == pytest.approx(math.sqrt(0.5))
    assert found["consistency"].sd == 0.0 and found["error_rate_normal"].mean is None


def test_deception_run_repeats_at_the_papers_temperature(tmp_path: Path) -> None:
    from data_paths import FIXTURES

    dataset = f"db-mmlu:{FIXTURES / 'db-mmlu-mini'}"
    out = tmp_path / "run"
    args = ["deception", "run", "--model", "fake/deceive", "--dataset", dataset,
            "--limit-per-subject", "2", "--out", str(out), "--cache", str(tmp_path / "c.db")]
    result = CliRunner().invoke(main, [*args, "--repeats", "3"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "over 3 repeats (seeds 0-2), mean ± sd:" in result.output
    record = json.loads((out / "repeats.json").read_text())
    assert record["seeds"] == [0, 1, 2] and (tmp_path / "run-repeat-2" / "results.json").exists()
    first = json.loads((out / "results.json").read_text())
    assert record["metrics"]["normal_accuracy"]["values"][0] == first["normal_accuracy"]
    assert record["metrics"]["normal_accuracy"]["n"] == 3
    greedy = CliRunner().invoke(main, [*args[:-4], "--out", str(tmp_path / "g"), "--greedy",
                                       "--repeats", "2"])
    assert greedy.exit_code != 0 and "--greedy" in greedy.output
