"""--sample K --sample-seed S: seeded, stable, recorded, combined with --limit, on every command."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from data_paths import full_or_fixture
from veracity.cli import main
from veracity.data.qa import load_items
from veracity.data.sample import Sample, Selection, select
from veracity.errors import ConfigError
from veracity.store import RunDir

FAKE = ["--model", "fake/unstable", "--embedder", "hash/default", "-n", "2"]


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_positions_are_the_first_k_of_a_seeded_permutation_in_dataset_order() -> None:
    # by hand: PCG64 with seed 0 permutes range(10) to 4 6 2 7 3 5 9 0 8 1 (numpy 2.x; numpy does
    # not promise the stream forever, which is why run.json keeps the chosen ids); the first
    # three, sorted, are the sample
    assert np.random.default_rng(0).permutation(10).tolist() == [4, 6, 2, 7, 3, 5, 9, 0, 8, 1]
    assert Sample(3, 0).positions(10) == [2, 4, 6]
    assert Sample(5, 0).positions(10) == [2, 3, 4, 6, 7]
    # another seed, another sample; a K beyond the population takes everything
    assert Sample(3, 1).positions(10) != [2, 4, 6]
    assert Sample(50, 0).positions(10) == list(range(10))


def test_smaller_samples_nest_in_larger_ones_with_the_same_seed() -> None:
    for seed in (0, 1, 123):
        small, large = Sample(20, seed).positions(817), Sample(100, seed).positions(817)
        assert len(small) == 20 and len(large) == 100 and set(small) <= set(large)


def test_limit_then_sample_and_the_record() -> None:
    items = [f"q{i}" for i in range(10)]
    chosen = Selection(limit=6, sample=Sample(3, 0)).apply(items)
    # the pool is q0..q5; PCG64(0) permutes range(6) starting with its sample positions
    first = sorted(np.random.default_rng(0).permutation(6)[:3].tolist())
    assert chosen == [f"q{i}" for i in first]
    assert set(chosen) <= set(items[:6])
    record = Selection(limit=6, sample=Sample(3, 0)).record(10, chosen)
    assert record == {"limit": 6, "n_available": 10, "n_selected": 3, "sample": 3,
                      "sample_seed": 0, "sample_from": 6, "ids": chosen}
    assert Selection(limit=4).record(10, items[:4]) == {"limit": 4, "n_available": 10,
                                                        "n_selected": 4}
    assert select(items, limit=2) == ["q0", "q1"]
    assert select(items) == items


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_bad_samples_are_config_errors(bad: object) -> None:
    with pytest.raises(ConfigError):
        Sample(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="seed"):
        Sample(3, -1)


def test_gamma_sample_is_recorded_and_stable(tmp_path: Path) -> None:
    builtin = load_items("builtin")
    out = tmp_path / "run"
    run("gamma", "--dataset", "builtin", "--sample", "5", "--sample-seed", "7", *FAKE,
        "--out", str(out), "-q", "--json")
    config = RunDir.open(out).info["config"]
    selection = config["selection"]
    expected = [builtin[i].id for i in Sample(5, 7).positions(len(builtin))]
    assert selection == {"limit": None, "n_available": len(builtin), "n_selected": 5,
                         "sample": 5, "sample_seed": 7, "sample_from": len(builtin),
                         "ids": expected}
    assert [r["id"] for r in RunDir.open(out).samples()] == expected
    # the same command draws the same sample, and --limit narrows the pool first
    out2 = tmp_path / "run2"
    run("gamma", "--dataset", "builtin", "--sample", "5", "--sample-seed", "7", *FAKE,
        "--out", str(out2), "-q", "--json")
    assert RunDir.open(out2).info["config"]["selection"]["ids"] == expected
    out3 = tmp_path / "run3"
    run("gamma", "--dataset", "builtin", "--limit", "10", "--sample", "3", *FAKE,
        "--out", str(out3), "-q", "--json")
    ids = RunDir.open(out3).info["config"]["selection"]["ids"]
    assert len(ids) == 3 and set(ids) <= {item.id for item in builtin[:10]}


def test_gamma_sample_refused_without_a_dataset() -> None:
    result = CliRunner().invoke(main, ["gamma", "What is 2+2?", "--sample", "2", *FAKE])
    assert result.exit_code != 0 and "--dataset" in result.output
    result = CliRunner().invoke(main, ["gamma", "--dataset", "builtin", "--sample-seed", "3",
                                       *FAKE])
    assert result.exit_code != 0 and "--sample-seed only applies with --sample" in result.output


def test_isotropy_sample(tmp_path: Path) -> None:
    out = tmp_path / "iso"
    run("isotropy", "--dataset", "builtin", "--sample", "4", "--sample-seed", "2", *FAKE,
        "--out", str(out), "--json")
    selection = RunDir.open(out).info["config"]["selection"]
    assert selection["n_selected"] == 4 and selection["sample_seed"] == 2
    assert RunDir.open(out).results["aggregate"]["n_items"] == 4


def test_deception_sample(tmp_path: Path) -> None:
    db = f"db-mmlu:{full_or_fixture('db-mmlu/DB-MMLU Dataset', 'db-mmlu-mini')}"
    out = tmp_path / "dec"
    run("deception", "run", "-m", "fake/deceive", "--dataset", db, "--subjects",
        "anatomy,virology", "--limit-per-subject", "4", "--sample", "3", "--sample-seed", "1",
        "--greedy", "--no-cache", "--out", str(out), "--json")
    info = RunDir.open(out).info["config"]
    assert info["selection"]["n_available"] == 8 and info["selection"]["n_selected"] == 3
    assert info["n_items"] == 3
    assert [r["id"] for r in RunDir.open(out).samples()] == info["selection"]["ids"]


def test_fewl_sample(tmp_path: Path) -> None:
    from veracity.cli import main

    out = tmp_path / "fewl"
    args = ["run", "--dataset", "builtin", "--limit", "12", "--sample", "5", "--answers",
            "fake/stable", "--reference", "fake/pairs", "--reference-samples", "2", "--pairs",
            "2", "--neighbours", "2", "--similarity", "hash/default", "--out", str(out),
            "--no-cache"]
    result = CliRunner().invoke(main, ["fewl", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    selection = RunDir.open(out).info["config"]["selection"]
    assert selection["sample_from"] == 12 and selection["n_selected"] == 5
    assert sorted(r["id"] for r in RunDir.open(out).samples()) == sorted(selection["ids"])


def test_validate_and_annotate_export_sample(tmp_path: Path) -> None:
    out = tmp_path / "g"
    run("gamma", "--dataset", "builtin", "--limit", "12", "--model", "fake/echo", "--embedder",
        "hash/default", "-n", "2", "--out", str(out), "-q", "--json")
    result = json.loads(run("validate", "gamma", str(out), "--baseline-samples", "0",
                            "--resamples", "100", "--sample", "6", "--sample-seed", "4",
                            "--json"))
    assert result["n_items"] == 6
    assert result["selection"]["sample"] == 6 and result["selection"]["n_available"] == 12
    sheet = tmp_path / "sheet.csv"
    run("annotate", "export", str(out), "--out", str(sheet), "--sample", "5", "--sample-seed", "4")
    with sheet.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    ids = [r["item_id"] for r in rows]
    every = [r["id"] for r in RunDir.open(out).samples()]
    assert ids == [every[i] for i in Sample(5, 4).positions(12)]
    recorded = json.loads((out / "rating_sheet.json").read_text(encoding="utf-8"))
    assert recorded["selection"]["ids"] == ids and recorded["rubric"] == "auto"
    assert "rating_sheet.json" in RunDir.open(out).info["files"]
