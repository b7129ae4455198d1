"""Gateway keys: ``Authorization: Bearer KEY`` checked in constant time."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

TAG_ROUNDS = 100_000


class KeyCheck:
    """Which gateway key (by position, never by value) a request presented, if any."""

    def __init__(self, keys: Sequence[str], open_access: bool = False) -> None:
        self._keys = [k.encode("utf-8") for k in keys]
        self.open_access = open_access

    def tags(self, salt: bytes) -> tuple[str, ...]:
        """Per key, a tag that names its owner on disk: PBKDF2 of the key with ``salt``, slow
        to guess from (a key is never written; its position changes when keys are rotated)."""
        return tuple(hashlib.pbkdf2_hmac("sha256", key, salt, TAG_ROUNDS).hex()[:32] for key in self._keys)

    def owner(self, authorization: str | None) -> int | None:
        """Index of the matching key; -1 when access is open; None when refused.

        Every key is compared, so timing does not reveal which one (or how much of one) matched.
        """
        if self.open_access:
            return -1
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return None
        candidate = presented.strip().encode("utf-8")
        found = None
        for index, key in enumerate(self._keys):
            if hmac.compare_digest(candidate, key) and found is None:
                found = index
        return found
