"""run.json's ``config``: what a run was asked to do, as a frozen dataclass of its method.

The driver writes ``config.to_json()`` when the run directory is made and, at the end, the
config as finally known (values only known then, such as the options the backend resolved,
replaced in a copy of the first).
"""

from __future__ import annotations

from typing import Protocol

from veracity.jsontypes import JsonObject


class RunConfig(Protocol):
    """A method's run configuration: a frozen dataclass; run.json's ``config`` is its
    ``to_json()``."""

    def to_json(self) -> JsonObject: ...
