"""Typed records: the JSON shape read and written unchanged, errors as typed values, and
runs written before error kinds existed still read and reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veracity.errors import DataError, ErrorKind
from veracity.methods.deception.records import DeceptionRecord
from veracity.methods.fewl.mitigation.records import FinetunePair, IclPair, MitigationRecord
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.records import FewlRecord
from veracity.methods.fewl.run import AnswerSource, FewlSettings
from veracity.methods.gamma.attack.core import AttackSettings
from veracity.methods.gamma.attack.records import AttackStep
from veracity.methods.gamma.attack.run import run_attack
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.isotropy.records import IsotropyRecord
from veracity.methods.gamma.isotropy.run import run_isotropy
from veracity.methods.gamma.records import GammaRecord
from veracity.methods.gamma.run import run_gamma
from veracity.records import RecordError, read_records
from veracity.report import build_report
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.types import Item

FIXTURES = Path(__file__).parent / "fixtures" / "deception_compare"
ITEMS = [Item("a", "Who wrote Hamlet?"), Item("b", "What is 2+2?"), Item("c", "Why is the sky blue?")]


def test_recorded_deception_samples_read_and_write_back_unchanged() -> None:
    for name in ("alpha", "beta"):  # recorded answers: answer and reasoning only
        stored = list(RunDir.open(FIXTURES / name).samples())
        typed = read_records(DeceptionRecord, stored)
        assert [r.to_json() for r in typed] == stored
        assert all(r.normal.attempts is None and r.normal.error is None for r in typed)
    # a live run from before error kinds: every stored value kept, the new keys at their defaults
    stored = list(RunDir.open(FIXTURES / "gamma").samples())
    for record, row in zip(read_records(DeceptionRecord, stored), stored, strict=True):
        written = record.to_json()
        for side in ("normal", "misleading"):
            assert row[side].items() <= written[side].items()
            assert (written[side]["error_kind"], written[side]["replaced_chars"]) == (None, 0)
        assert record.scored and record.normal.attempts == 1


def test_live_gamma_and_fewl_samples_round_trip(tmp_path: Path) -> None:
    ctx = Context()
    gamma = run_gamma(ITEMS, "fake/unstable", "hash/default", GammaSettings(n=3), ctx,
                      tmp_path / "g")
    assert gamma.run is not None
    stored = list(gamma.run.samples())
    assert json.loads(json.dumps(gamma.records_json())) == stored
    assert read_records(GammaRecord, stored) == list(gamma.records)
    settings = FewlSettings(references=("fake/pairs",), pairs=PairSettings(r=3), neighbours=1,
                            similarity="hash/default")
    fewl = run_fewl(ITEMS, [AnswerSource("s", model="fake/stable")], settings, ctx,
                    tmp_path / "f")
    assert fewl.run is not None
    stored = list(fewl.run.samples())
    assert [r.to_json() for r in read_records(FewlRecord, stored)] == stored
    assert "lambda" in stored[0] and fewl.records[0].weights == tuple(stored[0]["lambda"])
    ctx.close()


def test_attack_and_isotropy_steps_round_trip(tmp_path: Path) -> None:
    with Context() as ctx:
        attack = run_attack("Who wrote Hamlet?", "fake/slope", "hash/default",
                            AttackSettings(steps=2, n=3), ctx, tmp_path / "a")
        isotropy = run_isotropy(ITEMS, "fake/unstable", "hash/default", GammaSettings(n=3), ctx,
                                out=tmp_path / "i")
    for outcome, kind in ((attack, AttackStep), (isotropy, IsotropyRecord)):
        assert outcome.run is not None
        stored = list(outcome.run.samples())
        typed = read_records(kind, stored)
        assert typed == list(outcome.records) and [r.to_json() for r in typed] == stored
    steps = attack.records
    assert [s.step for s in steps] == [0, 1, 2] and steps[0].chosen is None
    assert all(len(s.candidates) == 3 and s.chosen is not None for s in steps[1:])
    assert steps[2].candidates[steps[2].chosen or 0].prompt == steps[2].prompt
    assert steps[0].similarity_to_start == pytest.approx(1.0)
    assert all(len(r.prompt_angles) == 3 for r in isotropy.records)


JUDGED = {"outcome": "candidate", "first_reply": "A", "second_reply": "B", "first": "A",
          "second": "B", "asked": True}
ICL_LINE = {"id": "q1", "question": "Who wrote Hamlet?",
            "answers": {"fewl": "Shakespeare", "zero-shot": "Marlowe"},
            "correct": {"fewl": True, "zero-shot": False}, "examples": {"fewl": ["t1", "t2"]},
            "judged": [{"candidate": "fewl", "base": "zero-shot", **JUDGED}]}
FINETUNE_LINE = {"id": "q2", "question": "What is 2+2?", "base_name": "base",
                 "base_answer": "5", "base_correct": None,
                 "rules": {"fewl": {"answer": "4", "correct": True, **JUDGED}},
                 "note": "a key of a later release"}


def test_mitigation_pairs_of_both_layouts_read_and_write_back_unchanged() -> None:
    icl, tuned = read_records(MitigationRecord, [ICL_LINE, FINETUNE_LINE])
    assert isinstance(icl, IclPair) and isinstance(tuned, FinetunePair)
    assert icl.examples == {"fewl": ("t1", "t2")} and icl.judged[0].judged.outcome == "candidate"
    assert tuned.rules["fewl"].answer == "4" and tuned.rules["fewl"].judged.first == "A"
    assert tuned.extra == {"note": "a key of a later release"}
    assert [icl.to_json(), tuned.to_json()] == [ICL_LINE, FINETUNE_LINE]
    with pytest.raises(DataError, match="mitigation record"):
        MitigationRecord.from_json(["not", "an", "object"])


@pytest.mark.parametrize(("message", "kind", "expected", "no_answer"), [
    (None, None, None, False),
    ("model error: HTTP 400: prompt too long", None, ErrorKind.REJECTED, True),  # before kinds
    ("empty answer: gamma is undefined", None, ErrorKind.UNDEFINED, False),
    ("server fault: HTTP 503", "server", ErrorKind.SERVER, True),
    ("empty reply: no text", "empty", ErrorKind.EMPTY, True),
    ("invalid answer: not JSON", "unparseable", ErrorKind.UNPARSEABLE, False),
])
def test_errors_are_typed_values(message: str | None, kind: str | None,
                                 expected: ErrorKind | None, no_answer: bool) -> None:
    error = RecordError.from_json(message, kind)
    if expected is None:
        assert error is None
        return
    assert error is not None and error.kind is expected and error.message == message
    assert error.no_answer is no_answer


def test_a_gamma_run_from_before_error_kinds_still_reports(tmp_path: Path) -> None:
    run = run_gamma(ITEMS, "fake/unstable", "hash/default", GammaSettings(n=2), Context(),
                    tmp_path / "old").run
    assert run is not None
    old = list(run.samples())
    old[0] |= {"gamma": None, "error": "model error: HTTP 400: prompt too long"}
    for record in old:
        del record["error_kind"], record["perturbed_cosines"], record["replaced_chars"]
    run.write_samples(old)
    [first, *_] = read_records(GammaRecord, run.samples())
    assert first.error == RecordError(ErrorKind.REJECTED, "model error: HTTP 400: prompt too long")
    assert first.perturbed_cosines is None and first.replaced_chars is None
    html = build_report([run.path], tmp_path / "r.html").read_text(encoding="utf-8")
    assert "model error: HTTP 400: prompt too long" in html
