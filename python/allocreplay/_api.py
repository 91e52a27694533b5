"""The Python API: :func:`load` a trace, look at its events, :func:`replay` it under policies.

The heavy lifting is in Rust (``allocreplay._core``); tables come across through the Arrow C
stream interface, so Polars and pyarrow take the Rust buffers without copying them through
Python objects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import polars as pl

from allocreplay import _core

if TYPE_CHECKING:
    import pyarrow as pa


class Trace:
    """An allocation trace: one row per event (see ``traces/README.md`` for every column).

    Get one with :func:`load`. ``events`` is a Polars DataFrame, ``metadata`` a dict,
    ``to_arrow()`` a pyarrow Table (schema metadata included), ``save(path)`` writes ``.arrow``.
    """

    __slots__ = ("__dict__", "_inner")

    def __init__(self, inner: _core.Trace) -> None:
        self._inner = inner

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._inner.__arrow_c_stream__(requested_schema)

    def __len__(self) -> int:
        return len(self._inner)

    def __repr__(self) -> str:
        md = self.metadata
        return f"<allocreplay.Trace {md.get('source')} from {md.get('source_path')!r}: {len(self)} events>"

    @cached_property
    def events(self) -> pl.DataFrame:
        """The events as a Polars DataFrame (zero-copy from the Rust record batch)."""
        return pl.DataFrame(self._inner)

    @cached_property
    def metadata(self) -> dict[str, Any]:
        """Trace-level metadata: format_version, source, devices, pools, allocator_settings..."""
        return json.loads(self._inner.metadata_json())

    @cached_property
    def frames(self) -> dict[str, Any]:
        """Stack frames: ``filename``/``line``/``name`` per frame, ``stacks`` (frame ids,
        innermost first) indexed by the ``stack_id`` column."""
        return json.loads(self._inner.frames_json())

    def info(self) -> dict[str, Any]:
        """The numbers ``allocreplay info --json`` prints (counts, recorded peaks, duration)."""
        return json.loads(self._inner.info_json())

    def to_arrow(self) -> pa.Table:
        """The events as a pyarrow Table, with the trace's schema metadata."""
        import pyarrow as pa

        return pa.RecordBatchReader.from_stream(self._inner).read_all()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the trace as an Arrow IPC file (``.arrow``), readable by :func:`load`."""
        self._inner.save(os.fspath(path))


def load(path: str | os.PathLike[str], *, meta: str | os.PathLike[str] | None = None, allocator: str | None = None, lenient: bool = False) -> Trace:
    """Loads a trace: an ``.arrow`` file, or a raw capture whose format is detected from its
    bytes (a PyTorch memory snapshot pickle or a TensorFlow / JAX profiler capture
    ``*.xplane.pb``, optionally gzip/xz/zstd compressed, or a profile directory).

    ``meta``: the capture's metadata JSON (total device memory, memory cap); by default
    ``NAME.json`` beside ``NAME.pickle.xz`` is used when present.
    ``allocator``: for profiler captures, which BFC allocator's events to import
    (``GPU_0_bfc``, ``xla_gpu_host_bfc``...); default: the device allocator with most events.
    ``lenient``: events that break the trace's semantics (a double free, a free of an unknown
    id, time going backwards, a device or pool the metadata does not declare) are skipped
    instead of raising :class:`~allocreplay.errors.TraceFormatError`; ``info()["lenient_skipped"]``
    says how many (docs/bad-inputs.md).
    """
    return Trace(_core.load(os.fspath(path), None if meta is None else os.fspath(meta), allocator, lenient))


class ReplayResult:
    """What a replay produced, as Polars DataFrames built in Rust.

    - ``summary``: one row per policy and device (peaks, device allocations, retries, OOMs...).
    - ``timeline``: allocated/reserved bytes over the events, downsampled.
    - ``segments``: the segments each policy holds at the end.
    - ``placements``: where each request was placed.
    """

    __slots__ = ("__dict__", "_inner")

    def __init__(self, inner: _core.ReplayResult) -> None:
        self._inner = inner

    @cached_property
    def summary(self) -> pl.DataFrame:
        return pl.DataFrame(self._inner.summary)

    @cached_property
    def timeline(self) -> pl.DataFrame:
        return pl.DataFrame(self._inner.timeline)

    @cached_property
    def segments(self) -> pl.DataFrame:
        return pl.DataFrame(self._inner.segments)

    @cached_property
    def placements(self) -> pl.DataFrame:
        return pl.DataFrame(self._inner.placements)

    def __repr__(self) -> str:
        return f"<allocreplay.ReplayResult\n{self.summary}>"


def _capacity_arg(capacity: str | float | None) -> str | None:
    if capacity is None:
        return None
    if isinstance(capacity, bool):
        raise _core.InvalidArgumentError(f"capacity {capacity!r}: expected bytes, a size string or a fraction")
    if isinstance(capacity, float):
        return repr(capacity) if "." in repr(capacity) else f"{capacity:.6f}"
    return str(capacity)


def replay(
    trace: Trace | str | os.PathLike[str],
    policies: str | Sequence[str] = ("pytorch",),
    capacity: str | float | None = None,
    *,
    timeline_points: int = 2000,
    placements: bool = True,
) -> ReplayResult:
    """Replays every device of ``trace`` under each policy spec (``"pytorch"``,
    ``"pytorch:expandable_segments:True"``...).

    ``capacity``: bytes (int), a size (``"80GiB"``, ``"16GB"``) or a fraction of the device's
    recorded memory (``0.5``); default: the device's total memory when the trace records it.
    """
    if not isinstance(trace, Trace):
        trace = load(trace)
    specs = [policies] if isinstance(policies, str) else list(policies)
    inner = _core.replay(trace._inner, specs, _capacity_arg(capacity), timeline_points, placements)
    return ReplayResult(inner)


def validate_bfc(trace: Trace | str | os.PathLike[str], policy: str | None = None, *, device: int | None = None) -> dict[str, Any]:
    """Replays a BFC trace (a TensorFlow / JAX profiler capture) and compares it event by event
    with what the real allocator did: ``chunk_match`` / ``in_use_match`` (shares of events whose
    replayed chunk size / bytes in use equal the recorded ``allocation_bytes`` /
    ``bytes_allocated``), ``peak_in_use_recorded`` / ``_replayed``, ``pool_bytes_recorded`` /
    ``_replayed`` (where the run's ``.json`` gives them), ``ok``.

    ``policy``: a ``bfc`` / ``tf`` / ``jax`` spec; default: the settings the capture recorded.
    """
    if not isinstance(trace, Trace):
        trace = load(trace)
    return json.loads(_core.validate_bfc(trace._inner, device, policy))


def parse_capacity(text: str) -> int | float:
    """``"80GiB"`` → 85899345920 (bytes, int); ``"0.5"`` → 0.5 (a fraction of device memory)."""
    return _core.parse_capacity(text)


def validate(trace: Trace | str | os.PathLike[str]) -> dict[str, Any]:
    """Replays ``trace`` under the allocator settings (and memory cap) it recorded and compares
    decision by decision with what the real allocator did.

    Returns a dict with ``address_match`` (share of allocations placed at the recorded
    address), ``segment_events_match`` (segment allocs/frees/maps/unmaps identical in order and
    size), ``peak_reserved_recorded`` / ``peak_reserved_replayed``, retries and OOMs against the
    run's metadata, and ``ok``; with several devices, every device's report under ``devices``.
    """
    if not isinstance(trace, Trace):
        trace = load(trace)
    return json.loads(_core.validate_json(trace._inner))


_PLAN_SCHEMA = {
    "program": pl.String,
    "recorded_temp_bytes": pl.Int64,
    "planned_temp_bytes": pl.Int64,
    "lower_bound_bytes": pl.Int64,
    "argument_bytes": pl.Int64,
    "output_bytes": pl.Int64,
}


def plan(dump_dir: str | os.PathLike[str]) -> pl.DataFrame:
    """XLA's buffer assignment of every program in an XLA dump directory (``--xla_dump_to``):
    one row per program with the recorded preallocated-temp size, ours (XLA's heap planner
    replayed), the max-live lower bound, and the argument and output bytes."""
    rows = json.loads(_core.plan_json(os.fspath(dump_dir)))
    return pl.DataFrame(rows, schema=_PLAN_SCHEMA, orient="row") if rows else pl.DataFrame(schema=_PLAN_SCHEMA)


def offline(trace: Trace, alignment: int | None = None) -> pl.DataFrame:
    """The ``ideal`` (max live bytes) and ``offline`` (XLA's best-fit plan knowing every
    lifetime) peaks of each device of ``trace``; sizes rounded to ``alignment`` (default 512
    bytes for PyTorch traces, 256 otherwise)."""
    return pl.DataFrame(json.loads(_core.offline_json(trace._inner, alignment or 0)))


def xla_runtime(dump_dir: str | os.PathLike[str], program: str | None = None, calls: int = 3) -> Trace:
    """The allocations the JAX runtime makes when it runs one compiled program of an XLA dump
    ``calls`` times — the arguments, then per call every live-out allocation and the temp arena
    (freed when the call ends) — as a trace to replay under ``jax`` / ``bfc`` policies.
    ``program``: a substring of the program's name (default: the largest temp arena)."""
    return Trace(_core.xla_runtime_trace(os.fspath(dump_dir), program, calls))
