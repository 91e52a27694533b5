"""The exceptions allocreplay raises, one class per kind of problem.

All derive from :class:`AllocReplayError`, and each also from the builtin a caller would catch
for that kind of problem: :class:`TraceIOError` is an :class:`OSError` (and
:class:`TraceNotFoundError`, for a missing file, a :class:`FileNotFoundError`); a bad file
(:class:`TraceFormatError`, :class:`UnsafePickleError`, :class:`UnknownFormatError`,
:class:`SchemaError`) and a bad argument (:class:`PolicySpecError`,
:class:`InvalidArgumentError`) are :class:`ValueError`\\ s. The Rust core raises them (each maps
one variant of its ``Error`` enum; see ``rust/allocreplay-py/src/errors.rs``), except
:class:`CaptureError` (``allocreplay capture``, pure Python) and :class:`InternalError` (a bug:
a panic of the Rust core, caught at the binding boundary). Exceptions that concern a file carry
its path in ``.path`` (``None`` otherwise), and their message starts with it.
"""

from __future__ import annotations


class AllocReplayError(Exception):
    """Base class of every error allocreplay raises."""

    path: str | None = None

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class TraceIOError(AllocReplayError, OSError):
    """A file could not be opened, read or written. ``.errno`` is the system's error number
    when there is one; ``.filename`` stays unset so that ``str(e)`` is the message itself."""


class TraceNotFoundError(TraceIOError, FileNotFoundError):
    """A file (or directory) that does not exist."""


class TraceFormatError(AllocReplayError, ValueError):
    """A file is corrupt, truncated, or not the kind of input it claims to be."""


class UnsafePickleError(TraceFormatError):
    """A pickle holds something other than plain dicts, lists, strings and numbers; it was
    refused, never executed."""


class UnknownFormatError(TraceFormatError):
    """The format of a source could not be recognised."""


class SchemaError(TraceFormatError):
    """An .arrow file is not a trace of a supported format version."""


class PolicySpecError(AllocReplayError, ValueError):
    """A policy specification names an unknown policy or option."""


class InvalidArgumentError(AllocReplayError, ValueError):
    """An argument (capacity, option combination) is invalid."""


class ReplayError(AllocReplayError):
    """A trace is well formed but inconsistent, or a replay failed."""


class InternalError(AllocReplayError, RuntimeError):
    """A bug in allocreplay: the Rust core panicked. The message asks for an issue report and
    ends with what the panic said and where. No input should ever cause one. Traces are
    immutable, so the ones passed to the failing call can still be used."""


class CaptureError(AllocReplayError):
    """A capture could not be made: no command given, the framework is not installed, no GPU
    was visible, the output is not writable, nothing was recorded."""


__all__ = [
    "AllocReplayError",
    "CaptureError",
    "InternalError",
    "InvalidArgumentError",
    "PolicySpecError",
    "ReplayError",
    "SchemaError",
    "TraceFormatError",
    "TraceIOError",
    "TraceNotFoundError",
    "UnknownFormatError",
    "UnsafePickleError",
]
