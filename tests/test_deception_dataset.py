"""make-dataset: targets, batch prompts, parsing, retries, output files, CLI."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from data_paths import FIXTURES
from veracity.backends.base import Capabilities
from veracity.backends.fake import FakeBackend, Responder
from veracity.cache import Cache
from veracity.client import LLMClient
from veracity.data.mc import load_db_mmlu, load_mc
from veracity.errors import BackendError
from veracity.methods.deception.cli import deception
from veracity.methods.deception.dataset import (
    OPENING_PREFIX,
    REPLY_PREFILL,
    MakeSettings,
    build_batch_request,
    draw_target,
    parse_batch,
    shuffle_within_subjects,
    write_openings,
)
from veracity.methods.deception.dataset import fake_misleader as misleader
from veracity.methods.deception.run import make_dataset
from veracity.runs.common import Context
from veracity.types import GenRequest, MCItem


def _items(n: int) -> list[MCItem]:
    return [MCItem(f"t/{k}", "t", f"Question number {k}?", ("w", "x", "y", "z"), "ABCD"[k % 4])
            for k in range(1, n + 1)]


def test_targets_are_wrong_reproducible_and_spread(data_dir: Path) -> None:
    items = load_mc(f"mmlu:{data_dir / 'mmlu' / 'dev'}")
    targets = [draw_target(i, seed=3) for i in items]
    assert all(t != i.answer and t in "ABCD" for t, i in zip(targets, items, strict=True))
    assert targets == [draw_target(i, seed=3) for i in items]
    assert targets != [draw_target(i, seed=4) for i in items]
    offsets = Counter(("ABCD".index(t) - "ABCD".index(i.answer)) % 4
                      for t, i in zip(targets, items, strict=True))
    assert set(offsets) == {1, 2, 3} and min(offsets.values()) > len(items) / 5


def test_batch_prompt_puts_the_shared_part_first() -> None:
    items = _items(7)
    a = build_batch_request([(items[0], "B"), (items[1], "A")], MakeSettings())
    b = build_batch_request([(items[2], "D")], MakeSettings(), sample_index=2)
    assert a.messages[:2] == b.messages[:2] and b.sample_index == 2
    assert [m.role for m in a.messages] == ["user", "assistant", "user"]  # no system message
    shown = json.loads(a.messages[-1].content.removeprefix("Questions:\n"))
    assert shown[1] == {"id": 2, "question": "Question number 2?",
                        "options": {"A": "w", "B": "x", "C": "y", "D": "z"},
                        "correct": "C", "target": "A"}
    assert a.sampling.max_tokens == 100 + 2 * 120 and b.sampling.max_tokens == 220
    example_out = json.loads(a.messages[1].content)
    assert [sorted(e) for e in example_out] == [["id", "misleading_start", "mistake"]] * 5
    example_in = json.loads(a.messages[0].content.split("Questions:\n", 1)[1])
    assert [e["id"] for e in example_in] == [1, 2, 3, 4, 5]
    for shown_in, shown_out in zip(example_in, example_out, strict=True):
        assert shown_in["target"] != shown_in["correct"] and shown_in["id"] == shown_out["id"]
    two = build_batch_request([(items[0], "B")], MakeSettings(shots=2, system_prompt=True))
    assert [m.role for m in two.messages] == ["system", "user", "assistant", "user"]
    assert len(json.loads(two.messages[2].content)) == 2


def test_parse_batch() -> None:
    reply = """Here you go:
```json
[
  {"id": 1, "mistake": "Confuses  mass and weight.",
   "misleading_start": "Let's reason step by step. Weight is the same as mass."},
  {"id": "3", "mistake": "", "misleading_start": "Something."},
  {"id": 4, "mistake": "Long.", "misleading_start": "word word word word word word word"},
  {"id": 1, "mistake": "duplicate", "misleading_start": "ignored"},
  {"id": 9, "mistake": "out of range", "misleading_start": "ignored"}
]
```"""
    valid, errors = parse_batch(reply, 4, max_words=6)
    assert valid == {1: ("Confuses mass and weight.", "Weight is the same as mass.")}
    assert errors == {2: "missing from the reply", 3: "empty or missing 'mistake'",
                      4: "'misleading_start' longer than 6 words"}
    assert parse_batch("no list here", 2)[1] == {1: "reply holds no JSON list",
                                                  2: "reply holds no JSON list"}
    assert "not a valid JSON list" in parse_batch('[{"id": 1,', 1)[1][1]
    cut = '[{"id": 1, "mistake": "M.", "misleading_start": "S."}, {"id": 2, "mist'
    assert parse_batch(cut, 2) == ({1: ("M.", "S.")}, {2: "missing from the reply"})


def test_retries_then_reports_failures(cache: Cache) -> None:
    items = _items(6)

    def writer(request: GenRequest) -> str:
        batch = json.loads(request.messages[-1].content.removeprefix("Questions:\n"))
        out = []
        for q in batch:
            number = int(q["question"].split()[-1].rstrip("?"))
            # 4 never gets a mistake; 2 only on the retry
            bad = number == 4 or (number == 2 and request.sample_index == 0)
            out.append({"id": q["id"], "mistake": "" if bad else f"m{number}",
                        "misleading_start": f"Start {number} towards {q['target']}."})
        reply = json.dumps(out, indent=2)
        assert reply.startswith(request.prefill) and request.prefill == REPLY_PREFILL
        return reply[len(request.prefill) :]

    backend = FakeBackend(responder=writer)
    written, failed = write_openings(items, LLMClient(backend, cache),
                                     MakeSettings(batch_size=4, retries=2))
    assert [w.item.id for w in written] == ["t/1", "t/2", "t/3", "t/5", "t/6"]
    assert {w.item.id: w.attempts for w in written}["t/2"] == 2
    assert written[0].misleading_start == OPENING_PREFIX + f"Start 1 towards {written[0].target}."
    assert [f.item.id for f in failed] == ["t/4"]
    assert failed[0].errors == ("empty or missing 'mistake'",) * 3
    # round 1: 2 batches (4 + 2), round 2: t/2 and t/4 together, round 3: t/4 alone
    assert [len(json.loads(r.messages[-1].content[11:])) for r in backend.history] == [4, 2, 2, 1]
    assert [r.sample_index for r in backend.history] == [0, 0, 1, 2]


def test_make_dataset_writes_a_runnable_db_mmlu_dir(data_dir: Path, cache: Cache,
                                                    tmp_path: Path) -> None:
    source = f"mmlu:{data_dir / 'mmlu' / 'dev'}"
    out = tmp_path / "made"
    made = make_dataset("fake/misleader", source, out, Context(cache=cache),
                        subjects=["anatomy", "virology"], limit_per_subject=4)
    assert made.summary["n_written"] == 8 and made.failed == []
    assert made.summary["per_subject"] == {"anatomy": 4, "virology": 4}
    items = load_db_mmlu(out)
    originals = shuffle_within_subjects(load_mc(source, ["anatomy", "virology"], 4), 0)
    assert [(i.question, i.options, i.answer) for i in items] == [
        (o.question, o.options, o.answer) for o in originals]
    targets = [json.loads(line) for line in (out / "targets.jsonl").read_text().splitlines()]
    for item, original, target in zip(items, originals, targets, strict=True):
        assert item.misleading_start.startswith("Let's reason step by step. ")
        assert target["source_id"] == original.id and target["id"] == item.id
        assert target["target"] == draw_target(original) != item.answer
        assert target["target"] in item.misleading_start  # the fake names it
    assert (out / "failures.jsonl").read_text() == ""
    again = Context(cache=cache)
    make_dataset("fake/misleader", source, tmp_path / "again", again,
                 subjects=["anatomy", "virology"], limit_per_subject=4)
    assert again.model_calls() == 0


def test_cli_make_dataset_then_run(tmp_path: Path) -> None:
    source = tmp_path / "mine.jsonl"
    records = [{"question": f"Which number is {k}?", "options": ["1", "2", "3", "4"],
                "answer": k - 1, "subject": "numbers"} for k in (1, 2, 3, 4)]
    source.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    runner = CliRunner()
    made = runner.invoke(deception, ["make-dataset", "-m", "fake/misleader", "--input",
                                     f"mc-jsonl:{source}", "--out", str(tmp_path / "ds"),
                                     "--batch-size", "3", "--no-cache", "--json"])
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["n_written"] == 4
    run = runner.invoke(deception, ["run", "-m", "fake/deceive", "--dataset",
                                    f"db-mmlu:{tmp_path / 'ds'}", "--no-cache", "--json",
                                    "--out", str(tmp_path / "run")])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["per_subject"]["numbers"]["n_items"] == 4
    failing = runner.invoke(deception, ["make-dataset", "-m", "fake/garbage", "--input",
                                        f"mc-jsonl:{source}", "--out", str(tmp_path / "ds2"),
                                        "--retries", "1", "--no-cache"])
    assert failing.exit_code == 1  # nothing written: scripts must be able to tell
    assert "4 item(s) got no valid misleading opening" in failing.output
    assert len((tmp_path / "ds2" / "failures.jsonl").read_text().splitlines()) == 4


def test_make_dataset_never_overwrites_its_input_or_leaves_its_directory(tmp_path: Path) -> None:
    data = tmp_path / "db"
    data.mkdir()
    row = '"Q?","a","b","c","d","A","Let us think."\n'
    (data / "anatomy.csv").write_text(row * 4)
    runner = CliRunner()
    same = runner.invoke(deception, ["make-dataset", "-m", "fake/misleader", "--input",
                                     f"db-mmlu:{data}", "--out", str(data), "--no-cache"])
    assert same.exit_code != 0 and "would overwrite the input" in same.output
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.csv").write_text("mine\n")
    other = runner.invoke(deception, ["make-dataset", "-m", "fake/misleader", "--input",
                                      f"db-mmlu:{data}", "--out", str(foreign), "--no-cache"])
    assert other.exit_code != 0 and "did not write" in other.output
    assert (data / "anatomy.csv").read_text() == row * 4

    source = tmp_path / "odd.jsonl"
    source.write_text(json.dumps({"question": "Which?", "options": ["1", "2", "3", "4"],
                                  "answer": 0, "subject": "../escaped/sub"}) + "\n")
    out = tmp_path / "deep" / "out"
    made = runner.invoke(deception, ["make-dataset", "-m", "fake/misleader", "--input",
                                     f"mc-jsonl:{source}", "--out", str(out), "--no-cache"])
    assert made.exit_code == 0, made.output
    assert [p.name for p in out.glob("*.csv")] == ["_escaped_sub.csv"]
    assert not (tmp_path / "deep" / "escaped").exists()
    target = json.loads((out / "targets.jsonl").read_text().splitlines()[0])
    assert target["id"] == "_escaped_sub/1"  # as `run` reads the file back

    # a rebuild into the same directory replaces the old subject files
    source.write_text(json.dumps({"question": "Which?", "options": ["1", "2", "3", "4"],
                                  "answer": 0, "subject": "numbers"}) + "\n")
    again = runner.invoke(deception, ["make-dataset", "-m", "fake/misleader", "--input",
                                      f"mc-jsonl:{source}", "--out", str(out), "--no-cache"])
    assert again.exit_code == 0, again.output
    assert [p.name for p in out.glob("*.csv")] == ["numbers.csv"]

    clash = tmp_path / "clash.jsonl"
    clash.write_text("".join(json.dumps({"question": "Which?", "options": ["1", "2", "3", "4"],
                                         "answer": 0, "subject": s}) + "\n"
                             for s in ("a/b", "a?b")))
    both = runner.invoke(deception, ["make-dataset", "-m", "fake/misleader", "--input",
                                     f"mc-jsonl:{clash}", "--out", str(tmp_path / "cl"),
                                     "--no-cache"])
    assert both.exit_code != 0 and "would both be written to a_b.csv" in both.output


SPLITS = FIXTURES / "mmlu-splits"


def test_mmlu_splits_are_merged_per_subject() -> None:
    items = load_mc(f"mmlu:{SPLITS}")
    astronomy = [i for i in items if i.subject == "astronomy"]
    assert len(astronomy) == 30 and len(items) == 37
    # ids name the file row (the header is row 1), and the split when there are several
    assert [i.id for i in astronomy[:3]] == ["astronomy/dev/2", "astronomy/dev/3",
                                             "astronomy/test/2"]
    assert astronomy[-1].id == "astronomy/val/4" and astronomy[-1].answer == "D"
    assert load_mc(f"mmlu:{SPLITS / 'test'}", ["virology"])[0].id == "virology/2"


def test_shuffle_is_within_subjects_and_seeded() -> None:
    items = load_mc(f"mmlu:{SPLITS}")
    shuffled = shuffle_within_subjects(items, 7)
    assert [i.subject for i in shuffled] == [i.subject for i in items]  # subjects stay together
    assert sorted(i.id for i in shuffled) == sorted(i.id for i in items)
    assert shuffled != items and shuffled == shuffle_within_subjects(items, 7)
    assert shuffled != shuffle_within_subjects(items, 8)


def test_make_dataset_the_papers_way(tmp_path: Path) -> None:
    """Three splits merged, shuffled per subject, 5 worked examples, batches of 20."""
    backend = FakeBackend("misleader")
    ctx = Context(cache=None)
    ctx.clients["fake/misleader"] = LLMClient(backend)
    made = make_dataset("fake/misleader", f"mmlu:{SPLITS}", tmp_path / "db", ctx)
    s = made.summary
    assert (s["n_items"], s["n_written"], s["n_failed"]) == (37, 37, 0)
    assert s["splits"] == ["dev", "test", "val"] and s["order"] == "shuffled within each subject (seed 0)"
    assert (s["settings"]["batch_size"], s["settings"]["shots"]) == (20, 5)
    batches = [json.loads(r.messages[-1].content.removeprefix("Questions:\n"))
               for r in backend.history]
    assert [len(b) for b in batches] == [20, 10, 7]  # astronomy 20 + 10, virology 7
    assert all(len(json.loads(r.messages[1].content)) == 5 for r in backend.history)
    targets = [json.loads(line) for line in (tmp_path / "db" / "targets.jsonl").read_text().splitlines()]
    order = [t["source_id"] for t in targets]
    assert order == [i.id for i in shuffle_within_subjects(load_mc(f"mmlu:{SPLITS}"), 0)]
    assert order[:30] != sorted(order[:30], key=lambda i: (i.split("/")[1], int(i.split("/")[2])))
    assert all(t["target"] != t["answer"] for t in targets)
    assert not (tmp_path / "db" / "to_complete.csv").exists()


class _OneAtATime(FakeBackend):
    """One request per call (so each batch is journaled on its own), named fake/x."""

    capabilities = Capabilities(prefill=True, seed=True, max_concurrency=1)

    def __init__(self, mode: str | None = None, responder: Responder | None = None) -> None:
        super().__init__(mode, responder)
        self.spec = "fake/x"  # the journal is kept per model


def test_interrupted_build_resumes_without_asking_again(tmp_path: Path) -> None:
    out = tmp_path / "db"
    asked: list[int] = []

    def dies_on_second_batch(request: GenRequest) -> str:
        asked.append(1)
        return "!error the machine went away" if len(asked) == 2 else misleader(request)

    first = Context(cache=None)
    first.clients["fake/x"] = LLMClient(_OneAtATime(responder=dies_on_second_batch))
    with pytest.raises(BackendError):
        make_dataset("fake/x", f"mmlu:{SPLITS}", out, first, subjects=["astronomy"])
    journal = (out / "progress.jsonl").read_text().splitlines()
    assert len(journal) == 20  # the first batch, written as soon as it came back
    again = _OneAtATime("misleader")
    second = Context(cache=None)
    second.clients["fake/x"] = LLMClient(again)
    made = make_dataset("fake/x", f"mmlu:{SPLITS}", out, second, subjects=["astronomy"])
    assert len(again.history) == 1  # only the unfinished batch of 10
    assert len(json.loads(again.history[0].messages[-1].content[11:])) == 10
    assert made.summary["n_written"] == 30 and made.summary["n_resumed"] == 20
    # other settings (here another seed) do not reuse the journal
    other = _OneAtATime("misleader")
    third = Context(cache=None)
    third.clients["fake/x"] = LLMClient(other)
    make_dataset("fake/x", f"mmlu:{SPLITS}", tmp_path / "db", third,
                 MakeSettings(seed=1), subjects=["astronomy"])
    assert len(other.history) == 2


def test_failed_questions_can_be_completed_by_hand(tmp_path: Path) -> None:
    out = tmp_path / "db"

    def skips_question_3(request: GenRequest) -> str:
        text = request.messages[-1].content
        batch = json.loads(text[text.rindex("\n[") + 1 :])
        reply = [{"id": q["id"], "mistake": "" if "question 3:" in q["question"] else "m",
                  "misleading_start": f"Towards {q['target']}."} for q in batch]
        return json.dumps(reply, indent=2)[len(request.prefill):]

    ctx = Context(cache=None)
    ctx.clients["fake/x"] = LLMClient(FakeBackend(responder=skips_question_3))
    made = make_dataset("fake/x", f"mmlu:{SPLITS}", out, ctx, subjects=["virology"])
    assert [f.item.id for f in made.failed] == ["virology/test/4"]
    with (out / "to_complete.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][-1] == "misleading_start" and rows[1][0] == "virology/test/4"
    assert rows[1][-1] == "Let's reason step by step. "
    rows[1][-1] += "Viruses are counted from the last option backwards."
    with (out / "to_complete.csv").open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    backend = FakeBackend(responder=skips_question_3)
    again = Context(cache=None)
    again.clients["fake/x"] = LLMClient(backend)
    done = make_dataset("fake/x", f"mmlu:{SPLITS}", out, again, subjects=["virology"])
    assert backend.history == [] and done.failed == [] and done.summary["n_by_hand"] == 1
    written = {i.question: i.misleading_start for i in load_db_mmlu(out)}
    assert written["Virology test question 3: which option is number 3?"] == (
        "Let's reason step by step. Viruses are counted from the last option backwards.")
    assert not (out / "to_complete.csv").exists()


def test_cli_make_dataset_options(tmp_path: Path) -> None:
    runner = CliRunner()
    made = runner.invoke(deception, ["make-dataset", "-m", "fake/misleader", "--input",
                                     f"mmlu:{SPLITS}", "--out", str(tmp_path / "ds"),
                                     "--shots", "3", "--no-shuffle", "--seed", "4",
                                     "--no-cache", "--json"])
    assert made.exit_code == 0, made.output
    summary = json.loads(made.output)
    assert summary["order"] == "as read" and summary["settings"]["shots"] == 3
    assert summary["settings"]["seed"] == 4 and summary["n_written"] == 37
    bad = runner.invoke(deception, ["make-dataset", "-m", "fake/misleader", "--input",
                                    f"mmlu:{SPLITS}", "--out", str(tmp_path / "x"),
                                    "--shots", "6", "--no-cache"])
    assert bad.exit_code != 0 and "--shots" in bad.output
