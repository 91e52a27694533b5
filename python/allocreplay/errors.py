"""The exceptions allocreplay raises, one class per kind of problem.

All derive from :class:`AllocReplayError`; each maps one variant of the Rust core's ``Error``
enum, except :class:`CaptureError` (``allocreplay capture``, pure Python). Exceptions that
concern a file carry its path in ``.path`` (``None`` otherwise), and their message starts with
it.
"""

from allocreplay._core import (
    AllocReplayError,
    InvalidArgumentError,
    PolicySpecError,
    ReplayError,
    SchemaError,
    TraceFormatError,
    TraceIOError,
    UnknownFormatError,
    UnsafePickleError,
)


class CaptureError(AllocReplayError):
    """A capture could not be made: no command given, the framework is not installed, no GPU
    was visible, the output is not writable, nothing was recorded."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


__all__ = [
    "AllocReplayError",
    "CaptureError",
    "InvalidArgumentError",
    "PolicySpecError",
    "ReplayError",
    "SchemaError",
    "TraceFormatError",
    "TraceIOError",
    "UnknownFormatError",
    "UnsafePickleError",
]
