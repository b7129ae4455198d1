"""Exception hierarchy: every error veracity raises on purpose is a VeracityError."""

from __future__ import annotations

from enum import Enum


class ErrorKind(str, Enum):
    """Why an item has no usable output; stored as its value in run records."""

    REJECTED = "rejected"
    """The model's server refused this one request for good (prompt too long, bad parameter)."""
    SERVER = "server"
    """The server failed (5xx, timeout, dropped connection, malformed reply) through every retry."""
    EMPTY = "empty"
    """A well-formed reply that holds no answer text (content null, a refusal, no text part)."""
    UNPARSEABLE = "unparseable"
    """The model answered, but not in the form the method needs (an invalid DB-MMLU answer)."""
    TRUNCATED = "truncated"
    """The model's answer was cut off by the token limit before it could be read."""
    UNDEFINED = "undefined"
    """The model answered, but the score is undefined for that answer (gamma of an empty one)."""

    @property
    def label(self) -> str:
        """How a message names this kind."""
        return _LABELS[self]

    @property
    def blames_model(self) -> bool:
        """Whether the model's own answer is at fault, so a method may count it as wrong."""
        return self in (ErrorKind.REJECTED, ErrorKind.UNPARSEABLE, ErrorKind.UNDEFINED,
                        ErrorKind.TRUNCATED)


_LABELS = {
    ErrorKind.REJECTED: "model rejected the request",
    ErrorKind.SERVER: "server fault",
    ErrorKind.EMPTY: "empty reply",
    ErrorKind.UNPARSEABLE: "invalid answer",
    ErrorKind.TRUNCATED: "answer cut off by the token limit",
    ErrorKind.UNDEFINED: "score undefined",
}


class VeracityError(Exception):
    """Base class for every error raised by veracity."""


class ConfigError(VeracityError):
    """A setting, model spec or option is invalid."""


class UnknownSpecError(ConfigError):
    """A model or embedder spec names no registered provider."""


class CapabilityError(ConfigError):
    """A method needs a capability (e.g. prefill) that the backend lacks."""


class DataError(VeracityError):
    """A dataset or recorded-results file is missing or malformed."""


class InvalidValueError(DataError, ValueError):
    """A value a scoring function cannot take (an answer letter, a ratings table); also a
    ValueError, so callers that check values with ``except ValueError`` keep working."""


class BackendError(VeracityError):
    """A model backend failed to produce an output."""

    kind = ErrorKind.SERVER


class RetryableError(BackendError):
    """A transient failure (rate limit, server error, timeout); may be retried."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(BackendError):
    """A failure of one request that retrying cannot fix (bad request, prompt too long)."""

    kind = ErrorKind.REJECTED


class EmptyReplyError(PermanentError):
    """The server answered, but with no text to score (content null, a refusal)."""

    kind = ErrorKind.EMPTY


class AccessError(PermanentError):
    """The server refuses every request (rejected key, unknown model): the run stops."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a model stage; the message says what was kept and how to resume."""


class StorageError(VeracityError):
    """A file could not be written (out of space, a file size limit, a read-only file system);
    the message names the file and what was being written."""
