"""allocreplay: replay GPU memory allocation traces under allocator policies.

>>> import allocreplay
>>> trace = allocreplay.load("traces/two_streams__default.pickle.xz")
>>> trace.events            # Polars DataFrame, one row per event
>>> result = allocreplay.replay(trace, ["pytorch", "pytorch:expandable_segments:True"])
>>> result.summary          # one row per policy and device
"""

from allocreplay import errors
from allocreplay._api import ReplayResult, Trace, load, offline, parse_capacity, plan, replay, validate, validate_bfc, xla_runtime
from allocreplay._core import FORMAT_VERSION, POLICY_NAMES, __version__
from allocreplay.errors import (
    AllocReplayError,
    InvalidArgumentError,
    PolicySpecError,
    ReplayError,
    SchemaError,
    TraceFormatError,
    TraceIOError,
    UnknownFormatError,
    UnsafePickleError,
    CaptureError,
)
from allocreplay.capture import Capture, capture  # noqa: E402 - after _api: the module is shadowed by the function

__all__ = [
    "__version__",
    "FORMAT_VERSION",
    "POLICY_NAMES",
    "Trace",
    "ReplayResult",
    "load",
    "replay",
    "validate",
    "plan",
    "xla_runtime",
    "offline",
    "parse_capacity",
    "validate_bfc",
    "capture",
    "Capture",
    "errors",
    "AllocReplayError",
    "TraceIOError",
    "TraceFormatError",
    "UnsafePickleError",
    "UnknownFormatError",
    "SchemaError",
    "PolicySpecError",
    "InvalidArgumentError",
    "ReplayError",
    "CaptureError",
]
