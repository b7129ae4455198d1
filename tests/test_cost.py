"""Cost of offline runs: --estimate prints the calls and tokens before making any (and matches
the calls a run then makes); --prices gives tokens and USD per 1,000 scored answers."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from veracity.cli import main
from veracity.prices import read_prices

COMMON = ["--dataset", "builtin", "--model", "fake/unstable", "--embedder", "hash/default",
          "-n", "3", "--limit", "5", "--max-tokens", "20"]


def test_estimate_makes_no_call_and_matches_the_run(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."fake/unstable"]\ninput = 1.0\noutput = 2.0\n')
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["gamma", *COMMON, "--estimate", "--prices", str(prices),
                                       "--out", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    # 5 questions × (1 answer + 3 perturbed); completion ≤ 20 tokens a call
    assert "model calls: 20 at most (5 answers + 15 perturbed" in result.output
    assert "completion tokens: ≤ 400 (--max-tokens 20 a call)" in result.output
    prompt_tokens = int(result.output.split("prompt tokens: ≈ ")[1].split(" ")[0])
    cost = (prompt_tokens * 1.0 + 400 * 2.0) / 1e6
    assert f"cost: ≤ USD {cost:.4f}" in result.output
    assert not out.exists()  # nothing was run
    ran = CliRunner().invoke(main, ["gamma", *COMMON, "--prices", str(prices), "--out", str(out),
                                    "--no-cache"])
    assert ran.exit_code == 0, ran.output
    assert "20 model calls, 0 cache hits" in ran.output
    assert "tokens per scored answer:" in ran.output and "per 1,000 scored answers" in ran.output


def test_estimate_is_refused_for_recorded_runs(tmp_path: Path) -> None:
    recorded = tmp_path / "r.jsonl"
    recorded.write_text('{"prompt": "Q?", "answer": "A", "perturbed_answers": ["A"]}\n')
    result = CliRunner().invoke(main, ["gamma", "--recorded", str(recorded), "--embedder",
                                       "hash/default", "--estimate"])
    assert result.exit_code == 1 and "--recorded makes no call" in result.output


def test_prices_by_model_and_default(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[default]\ninput = 0.5\n[models."big"]\ninput = 2.0\noutput = 8.0\n')
    prices = read_prices(path)
    assert prices.cost("big", 1_000_000, 500_000) == 2.0 + 4.0
    assert prices.cost("small", 2_000_000, 1_000_000) == 1.0  # default output 0
    assert read_prices(tmp_path / "p.toml").price("x") is not None
