"""Issue 10, input side: bad text, output folders, clear errors, validated readers, bounds.

Each test reproduces one reported defect (a traceback, a deleted file, garbage accepted) on
the fake backends; every error must be a one-line message, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from veracity.cli import main
from veracity.data.mc import load_mc
from veracity.data.qa import load_items
from veracity.errors import ConfigError, DataError
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.recorded import read_recorded
from veracity.methods.gamma.run import run_gamma
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.types import Item

FAKE = ["--model", "fake/echo", "--embedder", "hash/default", "-n", "2", "--no-cache", "-q"]


def refused(*args: str) -> str:
    """The command fails with a clean one-line error (exit 1 or 2), no traceback."""
    result: Result = CliRunner().invoke(main, list(args))
    assert result.exit_code in (1, 2), (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert "Error" in result.output
    return result.output


def lines(path: Path, *records: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# --- 1: bad text ---------------------------------------------------------------------------


def test_lone_surrogate_in_a_dataset_names_the_line_and_field(tmp_path: Path) -> None:
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "ok?"}\n{"question": "What is \\ud800 2+2?"}\n', encoding="utf-8")
    out = refused("gamma", "--dataset", f"jsonl:{data}", *FAKE)
    assert "q.jsonl, line 2, field question" in out and "surrogate" in out


def test_prompt_argument_with_a_non_utf8_byte_is_a_clear_error(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "veracity", "gamma", b"What is \xff 2+2?", *FAKE]
    done = subprocess.run(command, capture_output=True, cwd=tmp_path, timeout=120)
    stderr = done.stderr.decode("utf-8")
    assert done.returncode == 1 and "Traceback" not in stderr
    assert "prompt 1: character 9 is the byte 0xff, which is not UTF-8" in stderr


def test_run_writers_keep_any_text_readable_and_harmless(tmp_path: Path) -> None:
    texts = ["half an emoji \ud83d", "\x1b]0;title\x07", "c1 \x9b31m", "rtl \u202eabc", "ok ✓"]
    run = RunDir.create(tmp_path / "run", "gamma", {"note": texts[0]})
    run.write_samples([{"prompt": t, "answer": t} for t in texts])
    raw = (tmp_path / "run" / "samples.jsonl").read_bytes()
    raw.decode("utf-8")  # strict: valid UTF-8
    for bad in (b"\x1b", b"\xc2\x9b", "\u202e".encode()):
        assert bad not in raw
    assert [r["prompt"] for r in run.samples()] == texts  # read back exactly
    assert run.info["config"] == {"note": texts[0]}


def test_a_run_whose_model_answers_hold_lone_surrogates_finishes(tmp_path: Path) -> None:
    from veracity.backends.fake import FakeBackend
    from veracity.client import LLMClient
    from veracity.report import build_report

    ctx = Context(cache=None)  # --no-cache: the run files are the first writers
    ctx.clients["fake/odd"] = LLMClient(
        FakeBackend(responder=lambda r: "half \ud83d and \x9b", name="odd"), None)
    outcome = run_gamma([Item("a", "What?")], "fake/odd", "hash/default", GammaSettings(n=2), ctx,
                        tmp_path / "run")
    assert outcome.run is not None
    [record] = outcome.run.samples()
    assert record["answer"] == "half \ufffd and \x9b"  # the lone surrogate replaced, and counted
    assert record["replaced_chars"] == 3  # the answer and both perturbed answers
    report = build_report([outcome.run.path], tmp_path / "run" / "report.html").read_text("utf-8")
    assert "\x9b" not in report and "half \ufffd and" in report


# --- 5: --out into a used folder -------------------------------------------------------------


def test_a_folder_with_someone_elses_run_json_is_refused_and_kept(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    (folder / "answers").mkdir(parents=True)
    files = {"run.json": '{"name": "my build", "steps": 3}', "report.html": "<p>mine</p>",
             "results.json": "{}", "finetune.jsonl": "{}\n", "answers/mine.jsonl": "{}\n"}
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    out = refused("gamma", "What is 2+2?", *FAKE, "--out", str(folder))
    assert "not a veracity run" in out
    (folder / "run.json").unlink()
    del files["run.json"]
    assert "but no run.json" in refused("gamma", "What?", *FAKE, "--out", str(folder))
    for name, text in files.items():
        assert (folder / name).read_text(encoding="utf-8") == text


def test_a_rerun_replaces_only_the_files_its_run_json_lists(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    args = ["fewl", "run", "--dataset", "builtin", "--limit", "3", "--answers", "fake/stable",
            "--reference", "fake/pairs", "--pairs", "2", "--neighbours", "1", "--similarity",
            "hash/default", "--no-cache", "-q", "--out", str(folder)]
    assert CliRunner().invoke(main, args).exit_code == 0
    listed = json.loads((folder / "run.json").read_text())["files"]
    assert "answers/fake-stable.jsonl" in listed and "pairs.jsonl" in listed
    (folder / "answers" / "mine.jsonl").write_text("{}\n")  # the user's own files
    (folder / "notes.txt").write_text("keep me")
    (folder / "pairs.jsonl").write_text("stale")
    assert CliRunner().invoke(main, ["gamma", "What?", *FAKE, "--out", str(folder)]).exit_code == 0
    assert (folder / "answers" / "mine.jsonl").read_text() == "{}\n"
    assert (folder / "notes.txt").read_text() == "keep me"
    assert not (folder / "pairs.jsonl").exists() and not (folder / "answers/fake-stable.jsonl").exists()
    assert json.loads((folder / "run.json").read_text())["method"] == "gamma"


def test_a_hand_edited_file_list_never_reaches_outside_the_run(tmp_path: Path) -> None:
    folder, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep")
    (tmp_path / "victim.txt").write_text("keep")
    assert CliRunner().invoke(main, ["gamma", "What?", *FAKE, "--out", str(folder)]).exit_code == 0
    (folder / "link").symlink_to(outside)
    info = json.loads((folder / "run.json").read_text())
    info["files"] += ["../victim.txt", str(tmp_path / "victim.txt"), "link/victim.txt"]
    (folder / "run.json").write_text(json.dumps(info))
    assert CliRunner().invoke(main, ["gamma", "What?", *FAKE, "--out", str(folder)]).exit_code == 0
    assert (outside / "victim.txt").read_text() == (tmp_path / "victim.txt").read_text() == "keep"


# --- 6: clear errors, before any model call ------------------------------------------------


def test_out_naming_a_file_or_a_path_under_one_fails_before_any_model_call(tmp_path: Path,
                                                                           ctx: Context) -> None:
    blocker = tmp_path / "taken.txt"
    blocker.write_text("x")
    for out in (blocker, blocker / "run"):
        assert "is a file" in refused("gamma", "What?", *FAKE, "--out", str(out))
        with pytest.raises(ConfigError, match="is a file"):
            run_gamma([Item("a", "What?")], "fake/echo", "hash/default", GammaSettings(n=2), ctx,
                      out)
        assert ctx.model_calls() == 0
    assert "is a file" in refused("deception", "make-dataset", "-m", "fake/misleader", "--input",
                                  "mc-jsonl:x.jsonl", "--out", str(blocker / "ds"))
    assert "is a file" in refused("report", str(tmp_path), "--out", str(blocker / "r.html"))


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_timeout_must_be_a_positive_finite_number(value: str) -> None:
    out = refused("gamma", "What?", *FAKE, "--timeout", value)
    assert "--timeout" in out


def test_unknown_user_in_a_path_is_a_clear_error() -> None:
    assert "cannot expand '~'" in refused("gamma", "--dataset", "jsonl:~nouser-veracity/q.jsonl",
                                          *FAKE)
    assert "cannot expand '~'" in refused("deception", "run", "--dataset",
                                          "db-mmlu:~nouser-veracity/db", "-m", "fake/deceive")
    assert "cannot expand '~'" in refused("gamma", "What?", "-m", "llamacpp/~nouser-veracity/m.gguf",
                                          "-e", "hash/default", "--no-cache")
    assert "cannot expand '~'" in refused("gamma", "What?", "-m", "fake/echo", "-e", "hash/default",
                                          "--cache", "~nouser-veracity/c.sqlite")


def test_a_cache_that_cannot_be_opened_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    (tmp_path / "notdb.sqlite").write_text("not a database", encoding="utf-8")
    base = ("gamma", "What?", "-m", "fake/echo", "-e", "hash/default", "--cache")
    assert "afile is a file" in refused(*base, str(tmp_path / "afile" / "c.sqlite"))
    assert "cannot open it" in refused(*base, str(tmp_path / "notdb.sqlite"))
    assert "is a directory" in refused(*base, str(tmp_path))


@pytest.mark.parametrize("line", ["[" * 100_000 + "]" * 100_000, '{"question": ' + "9" * 5000 + "}",
                                  '{"question": NaN}', '{"question": 1e999}'])
def test_hostile_json_is_a_data_error(tmp_path: Path, line: str) -> None:
    data = tmp_path / "q.jsonl"
    data.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="q.jsonl, line 1"):
        load_items(f"jsonl:{data}")
    assert "q.jsonl, line 1" in refused("gamma", "--dataset", f"jsonl:{data}", *FAKE)


@pytest.mark.parametrize("answers", [None, 3, "Shakespeare", [1, 2], [None]])
def test_webquestions_answers_must_be_a_list_of_strings(tmp_path: Path, answers: object) -> None:
    data = tmp_path / "wq.json"
    data.write_text(json.dumps([{"qText": "Who wrote Hamlet?", "answers": ["x"]},
                                {"qText": "Who?", "answers": answers}]), encoding="utf-8")
    with pytest.raises(DataError, match="record 2, field 'answers'"):
        load_items(f"webquestions:{data}")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("perturbed_prompts", 3, "field 'perturbed_prompts'"),
    ("perturbed_prompts", ["only one"], "1 prompts for 2 perturbed answers"),
    ("perturbed_prompts", {"a": "b"}, "field 'perturbed_prompts'"),
    ("prompt", 7, "field 'prompt'"), ("prompt", None, "field 'prompt'"),
    ("prompt", {"q": 1}, "field 'prompt'"), ("prompt", True, "field 'prompt'"),
    ("perturbed_answers", ["a", 2], "field 'perturbed_answers'"),
    ("id", [1], "field 'id'"),
])
def test_recorded_files_are_validated(tmp_path: Path, field: str, value: object,
                                      message: str) -> None:
    record = {"prompt": "2+2?", "answer": "4", "perturbed_answers": ["4", "4"], field: value}
    path = lines(tmp_path / "rec.jsonl", {"prompt": "ok", "answer": "4", "perturbed_answers": ["4"]},
                 record)
    with pytest.raises(DataError, match=f"rec.jsonl, line 2.*{message}"):
        read_recorded(path)
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"prompt": NaN, "answer": "4", "perturbed_answers": ["4"]}\n')
    with pytest.raises(DataError, match="nan.jsonl, line 1"):
        read_recorded(nan)


def test_make_dataset_with_a_300_character_subject(tmp_path: Path) -> None:
    subject = "s" * 300
    source = lines(tmp_path / "mc.jsonl", *({"question": f"Which is {k}?", "options": ["1", "2", "3", "4"],
                                             "answer": k, "subject": subject} for k in range(3)))
    args = ["deception", "make-dataset", "-m", "fake/misleader", "--input", f"mc-jsonl:{source}",
            "--out", str(tmp_path / "ds"), "--no-cache", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    [written] = json.loads(result.output)["files"]
    assert len(written) < 120 and (tmp_path / "ds" / written).is_file()
    assert len(load_mc(f"db-mmlu:{tmp_path / 'ds'}")) == 3
    assert CliRunner().invoke(main, args).exit_code == 0  # a rerun is not blocked


@pytest.mark.parametrize(("name", "text"), [
    ("run.json", "[1, 2]"), ("run.json", '{"schema_version": 1, "method": "gamma", "files": 3}'),
    ("run.json", '{"schema_version": 1, "method": "nope"}'), ("run.json", "{"),
    ("results.json", "[]"), ("results.json", '{"aggregate": 3}'), ("results.json", "{}"),
    ("samples.jsonl", "[1]\n"), ("samples.jsonl", '{"gamma": "x"}\n'),
])
def test_hand_broken_run_folders_give_report_a_clear_error(tmp_path: Path, name: str,
                                                           text: str) -> None:
    run = tmp_path / "run"
    assert CliRunner().invoke(main, ["gamma", "What?", *FAKE, "--out", str(run)]).exit_code == 0
    (run / name).write_text(text, encoding="utf-8")
    out = refused("report", str(run), "--out", str(tmp_path / "r.html"))
    assert str(run) in out


# --- 7: garbage accepted silently --------------------------------------------------------------


@pytest.mark.parametrize(("record", "message"), [
    ({"options": [None, None, None, None]}, "empty or missing option A"),
    ({"options": ["a", "b", "", "d"]}, "empty or missing option C"),
    ({"options": {"A": 1, "B": 2, "C": 3, "D": 4}}, "option A must be a string"),
    ({"subject": ["x"]}, "field 'subject'"), ({"misleading_start": 5}, "field 'misleading_start'"),
    ({"question": 42}, "question must be a string"), ({"answer": "E"}, "answer must be one of"),
])
def test_multiple_choice_jsonl_is_validated(tmp_path: Path, record: dict[str, object],
                                            message: str) -> None:
    path = lines(tmp_path / "mc.jsonl", {"question": "Q?", "options": ["a", "b", "c", "d"],
                                         "answer": "A", **record})
    with pytest.raises(DataError, match=f"mc.jsonl, line 1.*{message}"):
        load_mc(f"mc-jsonl:{path}")


def test_db_mmlu_row_with_empty_options_is_refused(tmp_path: Path) -> None:
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "anatomy.csv").write_text('Q?,"Surely",,,,,A\n', encoding="utf-8")
    with pytest.raises(DataError, match="anatomy.csv, row 1: empty or missing option A"):
        load_mc(f"db-mmlu:{tmp_path / 'db'}")


def test_jsonl_dataset_references_and_ids_are_validated(tmp_path: Path) -> None:
    path = lines(tmp_path / "q.jsonl", {"question": "Q?", "answers": [1, None]})
    with pytest.raises(DataError, match="line 1, field 'answers'"):
        load_items(f"jsonl:{path}")
    path = lines(tmp_path / "q.jsonl", {"question": "Q?", "id": {"a": 1}})
    with pytest.raises(DataError, match="line 1, field 'id'"):
        load_items(f"jsonl:{path}")


# --- 8: bounds ---------------------------------------------------------------------------------


def test_n_is_bounded_with_an_explicit_override() -> None:
    assert "--allow-large-n" in refused("gamma", "What?", *FAKE[:4], "-n", "5000")
    assert "more than veracity allows" in refused("gamma", "What?", *FAKE[:4], "-n", "300000")
    assert "more than veracity allows" in refused("gamma", "What?", *FAKE[:4], "-n", "50000000",
                                                  "--allow-large-n")
    assert GammaSettings(n=5000, allow_large_n=True).n == 5000
    with pytest.raises(ConfigError, match="allow-large-n"):
        GammaSettings(n=5000)
    assert "--allow-large-n" in refused("attack", "--prompt", "x", "-n", "500", *FAKE[:4])


@pytest.mark.parametrize("args", [
    ["gamma", "What?", "--threshold", "nan"], ["gamma", "What?", "--threshold", "-1"],
    ["gamma", "What?", "--threshold", "inf"],
    ["deception", "run", "--dataset", "mc-jsonl:x", "--temperature", "nan"],
    ["deception", "run", "--dataset", "mc-jsonl:x", "--top-p", "nan"],
    ["fewl", "run", "--dataset", "builtin", "--answers", "fake/echo", "--tau", "nan"],
    ["isotropy", "--dataset", "builtin", "--cone", "nan"],
    ["gamma", "What?", "--radius", "nan"], ["gamma", "What?", "--seed", "-1"],
])
def test_nan_and_nonsense_options_are_refused(args: list[str]) -> None:
    assert "Invalid value" in refused(*args)


def test_settings_refuse_nan_in_the_library() -> None:
    with pytest.raises(ConfigError, match="threshold"):
        GammaSettings(threshold=float("nan"))
    with pytest.raises(ConfigError, match="sampling"):
        from veracity.types import Sampling
        Sampling(temperature=float("nan"))


@pytest.mark.parametrize("reply", ["[" + "1" * 5000 + "]", '[{"id": "²", "mistake": "m"}]',
                                   "[" * 100_000, '{"Answer": ' + "[" * 100_000])
def test_hostile_model_replies_are_invalid_answers_not_crashes(reply: str) -> None:
    from veracity.methods.deception.core import parse_response
    from veracity.methods.deception.dataset import parse_batch

    valid, errors = parse_batch(reply, 2)
    assert not valid and set(errors) == {1, 2}
    for lenient in (False, True):
        assert parse_response("", reply, lenient).answer == "-"
