"""allocreplay: replay GPU memory allocation traces under allocator policies.

>>> import allocreplay
>>> trace = allocreplay.load("traces/two_streams__default.pickle.xz")
>>> trace.events            # Polars DataFrame, one row per event
>>> result = allocreplay.replay(trace, ["pytorch", "pytorch:expandable_segments:True"])
>>> result.summary          # one row per policy and device
>>> allocreplay.analysis.oom(trace, "pytorch")  # where the memory goes (Polars DataFrames)
>>> allocreplay.tune(trace, "16GiB")  # settings that fit, best first (Polars DataFrame)
>>> allocreplay.fit(["python", "train.py", "--batch-size", "{batch_size}"], {"batch_size": (1, 1024)}, device="a100-40gb")
>>> allocreplay.policies()  # every policy and its options (name, type, default, help)
"""

from allocreplay import analysis, errors
from allocreplay._api import (
    FORMAT_VERSION,
    POLICY_NAMES,
    BfcValidationReport,
    PolicyInfo,
    PolicyOption,
    ReplayResult,
    Trace,
    TraceInfo,
    ValidationReport,
    __version__,
    load,
    offline,
    parse_capacity,
    plan,
    policies,
    replay,
    validate,
    validate_bfc,
    validate_reports,
    xla_runtime,
)
from allocreplay._catalogue import devices
from allocreplay._fit import FitResult, fit
from allocreplay._tune import tune
from allocreplay.capture import Capture, capture
from allocreplay.errors import (
    AllocReplayError,
    CaptureError,
    InternalError,
    InvalidArgumentError,
    PolicySpecError,
    ReplayError,
    SchemaError,
    TraceFormatError,
    TraceIOError,
    TraceNotFoundError,
    UnknownFormatError,
    UnsafePickleError,
)

__all__ = [
    "FORMAT_VERSION",
    "POLICY_NAMES",
    "AllocReplayError",
    "BfcValidationReport",
    "Capture",
    "CaptureError",
    "FitResult",
    "InternalError",
    "InvalidArgumentError",
    "PolicyInfo",
    "PolicyOption",
    "PolicySpecError",
    "ReplayError",
    "ReplayResult",
    "SchemaError",
    "Trace",
    "TraceFormatError",
    "TraceIOError",
    "TraceInfo",
    "TraceNotFoundError",
    "UnknownFormatError",
    "UnsafePickleError",
    "ValidationReport",
    "__version__",
    "analysis",
    "capture",
    "devices",
    "errors",
    "fit",
    "load",
    "offline",
    "parse_capacity",
    "plan",
    "policies",
    "replay",
    "tune",
    "validate",
    "validate_bfc",
    "validate_reports",
    "xla_runtime",
]
