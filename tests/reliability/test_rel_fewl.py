"""FEWL never scores a server fault as the model's (empty) answer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from veracity.backends.base import Outcome
from veracity.backends.fake import FakeBackend
from veracity.client import LLMClient
from veracity.errors import BackendError, RetryableError
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.run import AnswerSource, FewlSettings
from veracity.runs.common import Context
from veracity.types import GenRequest, Item


class Faulty(FakeBackend):
    """Answers, except that one question meets a server fault that outlasted the retries."""

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        out = super().generate(requests)
        return [RetryableError("HTTP 503 after 6 attempts") if "river" in r.messages[-1].content
                else o for r, o in zip(requests, out, strict=True)]


def test_a_server_fault_on_an_answer_stops_fewl_keeping_the_others(
    ctx: Context, tmp_path: Path
) -> None:
    ctx.clients["fake/faulty"] = LLMClient(Faulty("stable"), ctx.cache)
    items = [Item("q1", "What is 2+2?"), Item("q2", "Name a river."), Item("q3", "Name a sea.")]
    settings = FewlSettings(references=("fake/pairs",), similarity="hash/default", neighbours=2)
    with pytest.raises(BackendError, match="1 of 3 requests got no answer.*server fault: HTTP 503"):
        run_fewl(items, [AnswerSource("s", model="fake/faulty")], settings, ctx, tmp_path / "r")
    assert ctx.cache is not None and [n for _, _, n in ctx.cache.stats().rows] == [2]
