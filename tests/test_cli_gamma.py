"""``veracity gamma`` / ``report`` / ``models`` / ``cache`` end to end on the fake backend."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.errors import ErrorKind
from veracity.perturb import BALLS
from veracity.records import RecordError
from veracity.store import RunDir
from veracity.types import GenRequest

FAKE = ["--model", "fake/unstable", "--embedder", "hash/default"]


def calls_hits(output: str) -> tuple[int, int]:
    match = re.search(r"(\d+) model calls, (\d+) cache hits", output)
    assert match, output
    return int(match.group(1)), int(match.group(2))


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def fails(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code != 0
    return result.output


def test_prompts_json_has_the_promised_fields() -> None:
    out = run("gamma", "What is 2+2?", "Who wrote Hamlet?", *FAKE, "-n", "4", "--json")
    records = json.loads(out)
    assert [r["prompt"] for r in records] == ["What is 2+2?", "Who wrote Hamlet?"]
    for r in records:
        for key in ("prompt", "answer", "gamma", "form", "n", "model", "embedder",
                    "perturbed_prompts", "perturbed_answers"):
            assert key in r
        assert r["n"] == 4 and len(r["perturbed_prompts"]) == 4 and len(r["perturbed_answers"]) == 4
        assert r["form"] == "sin" and r["model"] == "fake/unstable" and 0 < r["gamma"] <= 1


def test_stable_model_scores_zero_and_paper_code_form() -> None:
    out = run("gamma", "What is 2+2?", "--model", "fake/stable", "--embedder", "hash/default",
              "--form", "paper-code", "--json")
    [record] = json.loads(out)
    assert record["gamma"] == 0.0 and record["form"] == "paper-code"


def test_dataset_run_writes_run_dir_and_rerun_makes_no_calls(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    first = run("gamma", "--dataset", "builtin", "--limit", "6", *FAKE, "--out", str(out_dir))
    calls, hits = calls_hits(first)
    # 6 x 11 requests; a rare repeated random suffix is sent once
    assert 60 <= calls <= 66 and hits == 0
    for name in ("run.json", "samples.jsonl", "results.json", "report.html"):
        assert (out_dir / name).is_file()
    info = json.loads((out_dir / "run.json").read_text())
    assert info["method"] == "gamma" and info["config"]["settings"]["n"] == 10
    assert "numpy" in info["versions"]
    results = json.loads((out_dir / "results.json").read_text())
    assert results["aggregate"]["n_items"] == 6
    second = run("gamma", "--dataset", "builtin", "--limit", "6", *FAKE, "--out", str(out_dir))
    assert calls_hits(second) == (0, 66)


def test_interrupted_run_resumes_from_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from veracity.backends import fake

    calls = {"n": 0}
    original = fake.FakeBackend.generate

    def flaky(self: fake.FakeBackend, requests: list) -> list:  # type: ignore[type-arg]
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(self, requests)

    monkeypatch.setattr(fake.FakeBackend, "generate", flaky)
    result = CliRunner().invoke(
        main, ["gamma", "--dataset", "builtin", "--limit", "10", *FAKE, "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 130 and "rerun the same command to resume" in result.output
    monkeypatch.setattr(fake.FakeBackend, "generate", original)
    out = run("gamma", "--dataset", "builtin", "--limit", "10", *FAKE, "--out", str(tmp_path / "r"))
    # the fake has max_concurrency 8: its first call (8 requests) was cached as it returned
    calls, hits = calls_hits(out)
    assert 8 <= hits < 16 and 0 < calls <= 110 - 8  # (a duplicate prompt counts twice)
    again = run("gamma", "--dataset", "builtin", "--limit", "10", *FAKE, "--out", str(tmp_path / "r"))
    assert calls_hits(again)[0] == 0


def test_recorded_scoring_needs_no_model(tmp_path: Path) -> None:
    recorded = tmp_path / "rec.jsonl"
    rows = [
        {"prompt": "2+2?", "answer": "4", "perturbed_answers": ["4"] * 10},
        {"prompt": "Mary?", "answer": "a b c", "perturbed_answers": ["x y z", "a b c"]},
    ]
    recorded.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    records = json.loads(run("gamma", "--recorded", str(recorded), "--embedder", "hash/default",
                             "--json"))
    assert records[0]["gamma"] == 0.0 and records[1]["gamma"] > 0
    out = tmp_path / "run"
    summary = run("gamma", "--recorded", str(recorded), "--embedder", "hash/default",
                  "--out", str(out))
    assert "N 2-10" in summary and (out / "report.html").is_file()
    settings = json.loads((out / "results.json").read_text())["settings"]
    assert settings["recorded"] is True and "max_tokens" not in settings
    refused = fails("gamma", "--recorded", str(recorded), "-m", "fake/echo", "--seed", "3")
    assert "--model, --seed do not apply" in refused


def test_report_compares_runs_and_escapes_output(tmp_path: Path) -> None:
    for model in ("fake/echo", "fake/stable"):
        run("gamma", "--dataset", "builtin", "--limit", "3", "--model", model,
            "--embedder", "hash/default", "--out", str(tmp_path / model.replace("/", "-")))
    page = tmp_path / "cmp.html"
    run("report", str(tmp_path / "fake-echo"), str(tmp_path / "fake-stable"), "--out", str(page))
    html = page.read_text()
    assert "fake/echo × builtin" in html and "fake/stable × builtin" in html
    assert "data:image/png;base64," in html
    assert "\x00" not in html and "\x01" not in html  # control characters shown escaped


def test_markup_in_answers_is_escaped(tmp_path: Path) -> None:
    run("gamma", "<script>alert(1)</script>", "--model", "fake/echo", "--embedder", "hash/default",
        "--out", str(tmp_path / "x"))
    html = (tmp_path / "x" / "report.html").read_text()
    assert html.count("<script>") == 1  # the report's own; the answer is data for it
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in html


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["gamma", "   ", *FAKE], "empty prompt"),
        (["gamma", "--dataset", "jsonl:/nonexistent/q.jsonl", *FAKE], "not found"),
        (["gamma", "hi", "--model", "nosuch/model"], "unknown model spec 'nosuch/model'. Known:"),
        (["gamma", "hi", "--model", "fake/echo", "--embedder", "zzz/1"], "unknown embedder spec"),
        (["gamma", *FAKE], "exactly one"),
        (["gamma", "hi", "--model", "fake/empty", "--embedder", "hash/default"], ""),
    ],
)
def test_bad_input_gives_clear_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, args)
    if message:
        assert result.exit_code != 0 and message in result.output
    else:  # an empty answer is reported, not a crash
        assert result.exit_code == 0 and "none could be scored" in result.output


def test_malformed_dataset_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question": "ok?"}\n{"question": \n')
    assert f"{bad}, line 2: invalid JSON" in fails("gamma", "--dataset", f"jsonl:{bad}", *FAKE)
    missing = tmp_path / "m.jsonl"
    missing.write_text('{"q": "x"}\n')
    assert "no 'question' field" in fails("gamma", "--dataset", f"jsonl:{missing}", *FAKE)
    out = run("gamma", "--dataset", f"jsonl:{missing}", "--question-field", "q", *FAKE, "--json")
    assert json.loads(out)[0]["prompt"] == "x"


@pytest.mark.parametrize("kind", ["jsonl", "csv", "truthfulqa", "webquestions"])
def test_a_file_that_is_not_utf8_is_named(tmp_path: Path, kind: str) -> None:
    bad = tmp_path / "utf16.txt"
    bad.write_bytes("question\nWhat is 2+2?\n".encode("utf-16"))
    result = CliRunner().invoke(main, ["gamma", "--dataset", f"{kind}:{bad}", *FAKE])
    assert result.exit_code != 0 and f"{bad}: not UTF-8 text" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_an_unclosed_quote_in_a_csv_is_an_error_not_one_huge_question(tmp_path: Path) -> None:
    bad = tmp_path / "q.csv"
    bad.write_text('question\n"What is 2+2?\nWho wrote Hamlet?\nWhat is 3+3?\n')
    assert f"{bad}, line" in fails("gamma", "--dataset", f"csv:{bad}", *FAKE)


def test_models_and_cache_commands() -> None:
    out = run("models")
    assert "llamacpp/default" in out and "st/default" in out and "hash/" in out
    run("gamma", "hi", *FAKE)
    info = run("cache", "info")
    assert "generation" in info and "fake/unstable" in info
    assert "deleted" in run("cache", "clear", "--yes")
    assert "(empty)" in run("cache", "info")


def test_ball_accepts_utf8_ranges_registered_balls_and_rejects_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [record] = json.loads(run("gamma", "What is 2+2?", *FAKE, "-n", "3", "--ball", "utf8:945-969",
                              "--json"))
    assert record["ball"] == "utf8:945-969"
    assert all("α" <= p[-1] <= "ω" for p in record["perturbed_prompts"])
    monkeypatch.setitem(BALLS, "shout", lambda q, n, rng: [q.upper() + "!" * (i + 1) for i in range(n)])
    [record] = json.loads(run("gamma", "What is 2+2?", *FAKE, "-n", "2", "--ball", "shout", "--json"))
    assert record["perturbed_prompts"] == ["WHAT IS 2+2?!", "WHAT IS 2+2?!!"]
    out = fails("gamma", "What is 2+2?", *FAKE, "--ball", "nope")
    assert "unknown ball 'nope'" in out and "embedding" in out


def test_run_json_records_when_the_work_began_not_when_it_was_saved(tmp_path: Path) -> None:
    from veracity.data.qa import load_items
    from veracity.methods.gamma.core import GammaSettings
    from veracity.methods.gamma.run import run_gamma
    from veracity.runs.common import Context

    ctx = Context(started="2026-01-02T03:04:05+0000")
    outcome = run_gamma(load_items("builtin", limit=2), "fake/unstable", "hash/default",
                        GammaSettings(n=2), ctx, tmp_path / "run", "builtin")
    assert outcome.run is not None
    info = json.loads((outcome.run.path / "run.json").read_text())
    assert info["started"] == "2026-01-02T03:04:05+0000"
    assert info["finished"] > info["started"]


def test_an_item_the_model_rejects_is_reported_and_the_others_are_scored(tmp_path: Path) -> None:
    from veracity.backends.fake import FakeBackend, unstable
    from veracity.client import LLMClient
    from veracity.data.qa import load_items
    from veracity.methods.gamma.core import GammaSettings
    from veracity.methods.gamma.run import run_gamma
    from veracity.runs.common import Context

    def responder(request: GenRequest) -> str:
        text = request.messages[-1].content
        return "!error HTTP 400: prompt too long" if "Hamlet" in text else unstable(request)

    ctx = Context()
    ctx.clients["fake/picky"] = LLMClient(FakeBackend(responder=responder))
    items = [i for i in load_items("builtin") if "Hamlet" in i.question][:1]
    items += load_items("builtin", limit=2)
    outcome = run_gamma(items, "fake/picky", "hash/default", GammaSettings(n=3), ctx,
                        tmp_path / "run")
    bad, *good = outcome.records
    assert bad.gamma is None and bad.error == RecordError(
        ErrorKind.REJECTED, "model rejected the request: HTTP 400: prompt too long")
    assert bad.to_json()["error_kind"] == "rejected"
    assert all(r.gamma is not None and r.error is None for r in good)
    assert outcome.results["aggregate"]["n_scored"] == 2


def test_a_new_run_in_a_used_directory_drops_what_was_derived_from_the_old_one(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    run("gamma", "--dataset", "builtin", "--limit", "3", *FAKE, "--out", str(out))
    RunDir.open(out).write_json("validation.json", {})  # listed in run.json: the run's own
    (out / "notes.txt").write_text("mine")
    (out / "ratings.json").write_text("{}")  # not listed: someone else's, kept and not shown
    run("gamma", "Who wrote Hamlet?", *FAKE, "--out", str(out))
    assert not (out / "validation.json").exists() and (out / "notes.txt").read_text() == "mine"
    assert (out / "ratings.json").read_text() == "{}"
    assert "Human ratings" not in (out / "report.html").read_text()
    assert len((out / "samples.jsonl").read_text().splitlines()) == 1


def test_dollar_signs_in_names_are_plain_text_in_figures(tmp_path: Path) -> None:
    recorded = tmp_path / "rec.jsonl"
    row = {"prompt": "2+2?", "answer": "4", "perturbed_answers": ["4", "four"],
           "model": "m $\\bad{$ x"}
    recorded.write_text(json.dumps(row) + "\n")
    out = tmp_path / "run"
    run("gamma", "--recorded", str(recorded), "--embedder", "hash/default", "--out", str(out))
    assert "m $\\bad{$ x" in (out / "report.html").read_text()
