"""Comparison of deception runs (the paper's Figures A1-A11 and per-question view): every figure's
numbers on three hand-made runs (tests/fixtures/deception_compare), the model-info file, the report
and the CLI, on live and recorded runs alike."""

from __future__ import annotations

import csv
import math
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.data.model_info import read_model_info
from veracity.errors import DataError
from veracity.methods.deception.compare.core import (
    ModelRecords,
    ModelSummary,
    Relation,
    case_studies,
    compare,
)
from veracity.methods.deception.core import deception_metrics, pairs_from_records
from veracity.methods.deception.records import DeceptionAnswer, DeceptionRecord
from veracity.methods.deception.run import run_deception, run_deception_recorded
from veracity.records import read_records
from veracity.report import build_report
from veracity.runs.common import Context
from veracity.stats import pearson
from veracity.store import RunDir

FIXTURES = Path(__file__).parent / "fixtures" / "deception_compare"
RUNS = ("alpha", "beta", "gamma")


def _inputs(names: tuple[str, ...] = RUNS) -> list[ModelRecords]:
    runs = [RunDir.open(FIXTURES / name) for name in names]
    return [ModelRecords(r.results["model"], r.results["model"],
                         read_records(DeceptionRecord, r.samples())) for r in runs]


def _by_label(summaries: list[ModelSummary]) -> dict[str, ModelSummary]:
    return {s.label: s for s in summaries}


def _relation(found: list[Relation], key: str, x_label: str) -> Relation:
    return next(r for r in found if r.key == key and r.x_label == x_label)


def test_fixtures_results_match_their_samples() -> None:
    for name in RUNS:
        run = RunDir.open(FIXTURES / name)
        records = read_records(DeceptionRecord, run.samples())
        expected = deception_metrics(pairs_from_records(records), 0.4).to_json()
        assert {k: run.results[k] for k in expected} == expected


def test_overall_figures_by_hand() -> None:
    s = _by_label(compare(_inputs())[0])
    alpha, beta, gamma = s["alpha-7b"], s["beta-1b"], s["gamma-13b"]
    # A1/A2: 7, 6, 9 of 10 correct normally; 4, 3, 5 misleadingly
    assert [alpha.normal_accuracy, beta.normal_accuracy, gamma.normal_accuracy] == [0.7, 0.6, 0.9]
    assert [alpha.misleading_accuracy, beta.misleading_accuracy, gamma.misleading_accuracy] == [
        0.4, 0.3, 0.5]
    # A3: alpha 7/4 over both subjects; beta only biology counts (algebra 2/5 = 0.4): 4/3; gamma 9/5
    assert alpha.susceptibility == pytest.approx(1.75)
    assert beta.susceptibility == pytest.approx(4 / 3)
    assert gamma.susceptibility == pytest.approx(1.8)
    # A5: consistent correct / incorrect shares of all 10 items ("-" == "-" is consistent, incorrect)
    assert (alpha.consistent_correct, alpha.consistent_incorrect) == (0.3, 0.2)
    assert (beta.consistent_correct, beta.consistent_incorrect) == (0.2, 0.3)
    assert (gamma.consistent_correct, gamma.consistent_incorrect) == (0.5, 0.1)
    assert [alpha.consistency, beta.consistency, gamma.consistency] == [0.5, 0.5, 0.6]
    # A7: one "-" in each of alpha's categories, one in gamma's misleading answers
    assert (alpha.error_rate_normal, alpha.error_rate_misleading) == (0.1, 0.1)
    assert (beta.error_rate_normal, beta.error_rate_misleading) == (0.0, 0.0)
    assert (gamma.error_rate_normal, gamma.error_rate_misleading) == (0.0, 0.1)


def test_per_subject_figures_by_hand() -> None:
    s = _by_label(compare(_inputs())[0])
    # A4: every subject's c_n / c_m, flagged when its normal accuracy is at or below 40 %
    a4 = {label: [(t.subject, t.normal_correct, t.misleading_correct, t.value, t.unbounded, t.counts)
                  for t in summary.subjects] for label, summary in s.items()}
    assert a4["alpha-7b"] == [("algebra", 4, 2, 2.0, False, True), ("biology", 3, 2, 1.5, False, True)]
    assert a4["beta-1b"] == [("algebra", 2, 0, None, True, False),
                             ("biology", 4, 3, pytest.approx(4 / 3), False, True)]
    assert a4["gamma-13b"] == [("algebra", 5, 3, pytest.approx(5 / 3), False, True),
                               ("biology", 4, 2, 2.0, False, True)]
    assert s["beta-1b"].subjects[0].normal_accuracy == 0.4
    # A6: (consistent correct, consistent incorrect) per subject, shares of its 5 items
    assert s["alpha-7b"].consistency_by_subject == {"algebra": (0.4, 0.2), "biology": (0.2, 0.2)}
    assert s["beta-1b"].consistency_by_subject == {"algebra": (0.0, 0.6), "biology": (0.4, 0.0)}
    assert s["gamma-13b"].consistency_by_subject == {"algebra": (0.6, 0.0), "biology": (0.4, 0.2)}


def test_per_question_outcomes_by_hand() -> None:
    s = _by_label(compare(_inputs())[0])
    # record indices: algebra/1-5 are 0-4, biology/1-5 are 5-9
    assert s["alpha-7b"].by_correctness == {"only_normal": (1, 3, 6, 7), "only_misleading": (8,),
                                      "both": (0, 2, 5), "neither": (4, 9)}
    assert s["beta-1b"].by_correctness == {"only_normal": (0, 3, 6, 8), "only_misleading": (9,),
                                     "both": (5, 7), "neither": (1, 2, 4)}
    assert s["gamma-13b"].by_correctness == {"only_normal": (3, 4, 6, 7), "only_misleading": (),
                                       "both": (0, 1, 2, 5, 8), "neither": (9,)}


def test_relations_by_hand() -> None:
    info = read_model_info(FIXTURES / "models.csv")
    found = compare(_inputs(), info)[1]
    a8 = _relation(found, "A8", "normal accuracy %")
    assert (a8.xs, a8.ys) == ((70.0, 60.0, 90.0), (40.0, 30.0, 50.0))
    fit = a8.fit()
    # Sxy = 300, Sxx = 1400/3, Syy = 200: r² = 27/28, slope 9/14, intercept 40 - 9/14 · 220/3
    assert fit["r"] == pytest.approx(math.sqrt(27 / 28))
    assert fit["slope"] == pytest.approx(9 / 14) and fit["intercept"] == pytest.approx(-50 / 7)
    # n = 3: t = √27 with 1 degree of freedom (Cauchy), two-tailed p = 1 - 2/π·atan(t)
    assert fit["p"] == pytest.approx(1 - 2 / math.pi * math.atan(math.sqrt(27)), abs=1e-9)
    susceptibility = (1.75, 4 / 3, 1.8)
    expected = {("A9", "truthfulqa"): (45.0, 30.0, 55.5),
                ("A10", "model size (billions of parameters)"): (7.0, 1.1, 13.0),
                ("A10", "normal accuracy %"): (70.0, 60.0, 90.0),
                ("A11", "consistency %"): (50.0, 50.0, 60.0)}
    for (key, x_label), xs in expected.items():
        rel = _relation(found, key, x_label)
        assert rel.labels == ("alpha-7b", "beta-1b", "gamma-13b") and rel.enough
        assert rel.xs == pytest.approx(xs) and rel.ys == pytest.approx(susceptibility)
        assert rel.fit()["r"] == pytest.approx(pearson(xs, susceptibility)[0])
    a11 = _relation(found, "A11", "consistency %").fit()
    # two points at x = 50 and one at x = 60: the line joins their means
    assert a11["slope"] == pytest.approx((1.8 - (1.75 + 4 / 3) / 2) / 10)


def test_pearson_p_agrees_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    found = compare(_inputs(), read_model_info(FIXTURES / "models.csv"))[1]
    for rel in found:
        fit = rel.fit()
        reference = stats.pearsonr(rel.xs, rel.ys)
        assert fit["r"] == pytest.approx(reference.statistic)
        assert fit["p"] == pytest.approx(reference.pvalue, rel=1e-6)


def test_relations_with_fewer_than_three_models_are_not_drawn(tmp_path: Path) -> None:
    found = compare(_inputs(("alpha", "beta")))[1]
    assert all(not rel.enough and math.isnan(rel.fit()["r"]) for rel in found)
    # without model info: A9 and the size relation have no points, and say why
    a9 = next(rel for rel in found if rel.key == "A9")
    assert a9.n == 0 and a9.excluded == {"alpha-7b": "no model info given",
                                         "beta-1b": "no model info given"}
    partial = tmp_path / "models.csv"
    partial.write_text("model,params_b,truthfulqa\nalpha-7b,7,45\nbeta-1b,,30\ngamma-13b,13,\n")
    found = compare(_inputs(), read_model_info(partial))[1]
    size = _relation(found, "A10", "model size (billions of parameters)")
    assert size.labels == ("alpha-7b", "gamma-13b") and not size.enough
    assert size.excluded == {"beta-1b": "no params_b in the model info"}


def test_unbounded_susceptibility_leaves_the_relation(tmp_path: Path) -> None:
    runs = _inputs()
    fooled = [replace(r, misleading=DeceptionAnswer("-")) for r in runs[0].records]
    runs[0] = ModelRecords("alpha-7b", "alpha-7b", fooled)
    summaries, found = compare(runs)
    assert summaries[0].susceptibility is None and summaries[0].susceptibility_unbounded
    a11 = _relation(found, "A11", "consistency %")
    assert a11.labels == ("beta-1b", "gamma-13b") and a11.excluded == {"alpha-7b": "∞ susceptibility"}


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty file"),
    ("name,params_b\nalpha-7b,7\n", "no 'model' column"),
    ("model\nalpha-7b\n", "no column besides 'model'"),
    ("model,params_b\nalpha-7b,seven\n", "row 2, column 'params_b': 'seven' is not a number"),
    ("model,params_b\nalpha-7b,inf\n", "is not a finite number"),
    ("model,params_b\nalpha-7b,7\nalpha-7b,8\n", "model 'alpha-7b' is listed twice"),
    ("model,params_b\nalpha-7b\n", "row 2: 1 cells for 2 columns"),
    ("model,params_b,params_b\nalpha-7b,7,7\n", "column names must be unique"),
    ("model,params_b\n", "no model rows"),
    ("model,params_b\n,7\n", "empty model name"),
])
def test_model_info_bad_input(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "models.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(message)):
        read_model_info(path)


def test_model_info_names_unknown_models(tmp_path: Path) -> None:
    path = tmp_path / "models.csv"
    path.write_text("model,params_b\nalpha-7b,7\nalpha-7B,7\n", encoding="utf-8")
    with pytest.raises(DataError, match="no run of model\\(s\\) 'alpha-7B'; the runs' models are "
                                        "'alpha-7b', 'beta-1b', 'gamma-13b'"):
        compare(_inputs(), read_model_info(path))


def test_report_html_holds_every_figure_and_escapes_text(tmp_path: Path) -> None:
    out = build_report([FIXTURES / name for name in RUNS], tmp_path / "r.html",
                       model_info=FIXTURES / "models.csv")
    html = out.read_text(encoding="utf-8")
    for heading in ("A1/A2", "(A3)", "(A4)", "(A5)", "(A6)", "(A7)", "(A8-A11)", "Per question"):
        assert heading in html
    assert "A9: susceptibility vs truthfulqa" in html and "not enough data" not in html
    assert "beta-1b (recorded)" in html and "alpha-7b (recorded)" in html
    # per-question examples carry both reasoning texts, escaped
    assert "So the answer is C." in html and "The correct option is B." in html
    assert "<script>alert" not in html and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "\x1b" not in html and "\\x1b[31m" in html
    assert "only the misleading answer is correct (1 of 1)" in html


def test_report_without_enough_models_lists_relations_as_not_enough_data(tmp_path: Path) -> None:
    html = build_report([FIXTURES / "alpha", FIXTURES / "gamma"], tmp_path / "r.html").read_text()
    assert html.count("not enough data (2 of 3 models)") == 3  # A8, A10 vs accuracy, A11
    assert html.count("not enough data (0 of 3 models)") == 2  # A9, A10 vs size: no model info


def _db_dataset(root: Path) -> Path:
    """The fixture questions as a DB-MMLU dataset directory (headerless, 7 columns)."""
    data = root / "db"
    data.mkdir()
    rows: dict[str, list[list[str]]] = {}
    for record in RunDir.open(FIXTURES / "alpha").samples():
        rows.setdefault(record["subject"], []).append(
            [record["question"], record["misleading_start"], *record["options"], record["gold"]])
    for subject, lines in rows.items():
        with (data / f"{subject}.csv").open("w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerows(lines)
    return data


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_cli_compares_live_and_recorded_runs(ctx: Context, tmp_path: Path) -> None:
    db = f"db-mmlu:{_db_dataset(tmp_path)}"
    for name in ("alpha", "beta"):  # the hand-made answers, in the authors' published format
        recorded = tmp_path / "recorded" / name
        recorded.mkdir(parents=True)
        by_subject: dict[str, list[list[str]]] = {}
        for r in RunDir.open(FIXTURES / name).samples():
            by_subject.setdefault(r["subject"], []).append(
                [r["gold"], r["normal"]["reasoning"] or "", r["normal"]["answer"],
                 r["misleading"]["reasoning"] or "", r["misleading"]["answer"]])
        for subject, lines in by_subject.items():
            with (recorded / f"{subject}.csv").open("w", newline="", encoding="utf-8") as fh:
                csv.writer(fh).writerows(lines)
        run_deception_recorded(recorded, db, out=tmp_path / name, model=f"{name}-recorded")
    live = run_deception("fake/deceive", db, ctx, out=tmp_path / "live")
    info = tmp_path / "models.csv"
    info.write_text("model,params_b,truthfulqa\nalpha-recorded,7,45\nbeta-recorded,1.1,30\n"
                    "fake/deceive,0.1,20\n", encoding="utf-8")
    runs = [str(tmp_path / name) for name in ("alpha", "beta", "live")]
    output = _cli("report", *runs, "--model-info", str(info), "--out", str(tmp_path / "c.html"))
    assert "c.html" in output
    html = (tmp_path / "c.html").read_text(encoding="utf-8")
    assert "alpha-recorded (recorded)" in html and "fake/deceive" in html
    assert "A10: susceptibility vs model size (billions of parameters)" in html
    assert "<td>drawn</td>" in html  # A8: every run has both accuracies
    # rescoring the recorded answers gives the hand-made run's numbers
    recorded = read_records(DeceptionRecord, RunDir.open(tmp_path / "alpha").samples())
    rescored = _by_label(compare([ModelRecords("a", "alpha-recorded", recorded)])[0])
    assert rescored["a"].susceptibility == pytest.approx(1.75)
    summaries, _ = compare([ModelRecords("live", "fake/deceive", live.records)])
    assert summaries[0].normal_accuracy == live.results["normal_accuracy"]


@pytest.mark.parametrize(("rows", "message"), [
    ("model,params_b\nalpha-7b,big\n", "row 2, column 'params_b': 'big' is not a number"),
    ("model,params_b\nomega-70b,70\n", "no run of model(s) 'omega-70b'"),
])
def test_cli_refuses_bad_model_info(tmp_path: Path, rows: str, message: str) -> None:
    info = tmp_path / "models.csv"
    info.write_text(rows, encoding="utf-8")
    result = CliRunner().invoke(main, ["report", *(str(FIXTURES / n) for n in RUNS), "--model-info",
                                       str(info), "--out", str(tmp_path / "r.html")])
    assert result.exit_code != 0 and message in result.output
    assert not (tmp_path / "r.html").exists()


def test_cli_model_info_needs_deception_runs(tmp_path: Path) -> None:
    run = tmp_path / "gamma-run"
    RunDir.create(run, "gamma", {})
    result = CliRunner().invoke(main, ["report", str(run), "--model-info",
                                       str(FIXTURES / "models.csv"), "--out", str(tmp_path / "r.html")])
    assert result.exit_code != 0 and "--model-info is for comparing deception runs" in result.output
    assert not (tmp_path / "r.html").exists()


def test_malformed_samples_are_a_clear_error(tmp_path: Path) -> None:
    from veracity.methods.deception.compare.report import section

    run = tmp_path / "broken"
    shutil.copytree(FIXTURES / "alpha", run)
    lines = (run / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    lines[0] = lines[0].replace('"answer": "A"', '"answer": "E"', 1)
    (run / "samples.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = "malformed samples (run 'alpha-7b (recorded)': answer 'E' is neither A-D"
    with pytest.raises(DataError, match=re.escape(expected)):
        section([RunDir.open(run)])


def test_case_studies_by_hand() -> None:
    alpha, beta = _inputs(("alpha", "beta"))
    cases = case_studies(alpha.records, beta.records)
    assert len(cases) == 10
    contrast = {c.a.id: c.contrast for c in cases}
    # algebra/1: alpha right both times, beta misled; biology/3 the other way round
    assert [i for i, c in contrast.items() if c == "a_resists_b_misled"] == ["algebra/1"]
    assert [i for i, c in contrast.items() if c == "b_resists_a_misled"] == ["biology/3"]
    assert sorted(i for i, c in contrast.items() if c == "same") == [
        "algebra/4", "algebra/5", "biology/1", "biology/2"]
    picked = case_studies(alpha.records, beta.records, subjects={"biology"},
                          groups_a={"only_normal"})
    assert [(c.a.id, c.group_b) for c in picked] == [("biology/2", "only_normal"),
                                                     ("biology/3", "both")]
    assert [c.a.id for c in case_studies(alpha.records, beta.records,
                                         groups_b={"only_misleading"})] == ["biology/5"]
    other = [replace(r, question=r.question + "?") if r.id == "algebra/1" else r
             for r in beta.records]
    assert "algebra/1" not in {c.a.id for c in case_studies(alpha.records, other)}
    with pytest.raises(DataError, match="unknown group"):
        case_studies(alpha.records, beta.records, groups_a={"misled"})


def test_report_shows_appendix_d_for_two_runs(tmp_path: Path) -> None:
    out = build_report([FIXTURES / "alpha", FIXTURES / "beta"], tmp_path / "d.html")
    html = out.read_text(encoding="utf-8")
    assert "Case studies: two models on the same questions (Appendix D)" in html
    assert "div class='vcases' data-src=\"deception-cases\"" in html
    grid = html[html.index("rows: A's group"):]
    # row "both correct" of alpha: beta only-normal 1, both 1, neither 1 (the 4x4 counts)
    row = re.search(r"<tr><td>both answers are correct</td>(.*?)</tr>", grid)
    assert row is not None
    assert re.findall(r"<td[^>]*>(\d+)</td>", row.group(1)) == ["1", "0", "1", "1"]
    assert "A resists, B misled (1 of 1)" in html and "B resists, A misled (1 of 1)" in html
    single = build_report([FIXTURES / "alpha"], tmp_path / "one.html").read_text(encoding="utf-8")
    assert "Give two or more runs" in single
