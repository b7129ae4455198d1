"""A fake backend that raises Ctrl-C once, for the tests of interrupted runs that resume."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from veracity.backends import fake
from veracity.backends.base import Outcome
from veracity.types import GenRequest


class CtrlCOnce:
    """Patches the fake backend: ``sent`` gets ``key`` of every request it answers, and the
    first call once ``after`` requests were answered raises Ctrl-C (once; ``after`` can be set
    later to arm it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, key: Callable[[fake.FakeBackend,
                 GenRequest], object], after: int = 10**9) -> None:
        self.sent: list[object] = []
        self.after = after
        original = fake.FakeBackend.generate

        def counted(backend: fake.FakeBackend, requests: Sequence[GenRequest]) -> list[Outcome]:
            if len(self.sent) >= self.after:
                self.after = 10**9
                raise KeyboardInterrupt
            self.sent.extend(key(backend, r) for r in requests)
            return original(backend, requests)

        monkeypatch.setattr(fake.FakeBackend, "generate", counted)
