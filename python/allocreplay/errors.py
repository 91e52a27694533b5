"""The exceptions allocreplay raises, one class per kind of problem.

All derive from :class:`AllocReplayError`; each maps one variant of the Rust core's ``Error``
enum. Exceptions that concern a file carry its path in ``.path`` (``None`` otherwise), and their
message starts with it.
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

__all__ = [
    "AllocReplayError",
    "TraceIOError",
    "TraceFormatError",
    "UnsafePickleError",
    "UnknownFormatError",
    "SchemaError",
    "PolicySpecError",
    "InvalidArgumentError",
    "ReplayError",
]
