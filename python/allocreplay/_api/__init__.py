"""The Python API: :func:`load` a trace, look at its events, :func:`replay` it under policies.

The heavy lifting is in Rust (``allocreplay._core``); tables come across through the Arrow C
stream interface, so Polars and pyarrow take the Rust buffers without copying them through
Python objects.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import polars as pl

from allocreplay import _core
from allocreplay._core import BfcValidationReport, TraceInfo, ValidationReport
from allocreplay.errors import AllocReplayError, InvalidArgumentError

if TYPE_CHECKING:
    import pyarrow as pa


class Trace:
    """An allocation trace: one row per event (see ``traces/README.md`` for every column).

    Get one with :func:`load`. ``events`` is a Polars DataFrame, ``metadata`` a dict,
    ``frames`` / ``stacks`` Polars DataFrames, ``info()`` a :class:`TraceInfo`, ``to_arrow()`` a
    pyarrow Table (schema metadata included), ``save(path)`` writes ``.arrow``.
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
        return self._inner.metadata

    @cached_property
    def frames(self) -> pl.DataFrame:
        """Stack frames, one row each: ``frame_id``, ``filename``, ``line``, ``name``."""
        return pl.DataFrame(self._inner.frames)

    @classmethod
    def from_events(
        cls,
        df: pl.DataFrame | pa.Table,
        metadata: dict[str, Any] | None = None,
        frames: dict[str, Any] | pl.DataFrame | None = None,
        stacks: pl.DataFrame | None = None,
        *,
        lenient: bool = False,
    ) -> Trace:
        """A trace from a table of events, one row per event (see ``traces/README.md``).

        Needed: ``action`` (names such as ``"alloc"``, or codes) and ``size``. Optional:
        ``alloc_id`` (without it, frees are paired with the last ``alloc`` at their ``addr``),
        ``addr``, ``stream``, ``device``, ``pool`` (0 by default), ``time_ns``, ``seed``
        (false), ``stack_id``, and the optional columns of the format. ``metadata``: keys of the
        trace metadata to set (``devices=[{"index": 0, "total_memory": ...}]``,
        ``allocator_settings``...); ``frames`` and ``stacks``: the tables ``Trace.frames`` and
        ``Trace.stacks`` (or one dict in the stored form: filename, line, name, stacks).
        Checked as ``load`` checks an ``.arrow`` file (its columns, then its events: a double
        free, a free before its alloc, a size that differs... are errors; ``lenient=True`` skips
        such events as ``load(..., lenient=True)`` does); a problem raises
        ``InvalidArgumentError``, ``SchemaError`` or ``TraceFormatError`` naming
        ``<Trace.from_events>``. A float that is not a whole number is an error, never truncated.
        """
        from allocreplay._build import from_events

        return from_events(df, metadata, frames, stacks, lenient)

    @classmethod
    def from_arrow(
        cls,
        table: Any,
        metadata: dict[str, Any] | None = None,
        frames: dict[str, Any] | pl.DataFrame | None = None,
        stacks: pl.DataFrame | None = None,
        *,
        lenient: bool = False,
    ) -> Trace:
        """A trace from an Arrow table: one with a trace's schema metadata (``to_arrow()``)
        as it is, any other through :meth:`from_events`; checked as ``load`` checks a file."""
        from allocreplay._build import from_arrow

        return from_arrow(table, metadata, frames, stacks, lenient)

    @cached_property
    def stacks(self) -> pl.DataFrame:
        """Stacks, one row per frame: ``stack_id`` (the events' ``stack_id`` column), ``depth``
        (0 the innermost frame) and ``frame_id`` (a row of :attr:`frames`)."""
        return pl.DataFrame(self._inner.stacks)

    def info(self) -> TraceInfo:
        """Counts, recorded peaks and duration, one attribute each; ``info().to_dict()`` is
        what ``allocreplay info --json`` prints."""
        return self._inner.info()

    def to_arrow(self) -> pa.Table:
        """The events as a pyarrow Table, with the trace's schema metadata."""
        import pyarrow as pa

        return pa.RecordBatchReader.from_stream(self._inner).read_all()

    def save(self, path: str | os.PathLike[str], *, device: int | None = None, metadata: dict[str, Any] | None = None) -> None:
        """Writes the trace as an Arrow IPC file (``.arrow``), readable by :func:`load`;
        atomically (a temporary file beside ``path``, flushed to disk and renamed once
        complete). A symlink is followed (its target replaced, the link kept); a character
        device or a FIFO is written through; ``-`` is stdout (see ``allocreplay._output``).

        ``device``: keep only that device's events (and its entries of the metadata).
        ``metadata``: keys to replace in the metadata (nested dicts merge key by key).
        """
        from allocreplay import _output

        with _output.output_path(_output.target(path)) as tmp:
            self._inner.save(tmp, device, metadata)
            if metadata is not None and os.path.isfile(tmp):
                # Replaced metadata is checked as load checks it, before the file takes the
                # place of the target: a writer never leaves a file that load refuses.
                try:
                    _core.load(tmp)
                except AllocReplayError as e:
                    raise InvalidArgumentError(
                        f"{os.fspath(path)}: not written: the metadata given to save() makes a trace load refuses: {str(e).replace(tmp, '<the trace>')}"
                    ) from None

    def ipc_bytes(self) -> bytes:
        """The bytes :meth:`save` would write."""
        return self._inner.ipc_bytes()


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
    from allocreplay._output import check_input

    check_input(path)  # a FIFO, a device: refused, not read for ever
    check_input(meta)
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
        raise InvalidArgumentError(f"capacity {capacity!r}: expected bytes, a size string or a fraction")
    if isinstance(capacity, float):
        return repr(capacity) if "." in repr(capacity) else f"{capacity:.6f}"
    return str(capacity)


# .arrow files from this size on are replayed streamed from their memory map, batch by batch
# (``_core.replay_file``: memory O(live allocations), not O(events); issue #12) rather than
# loaded whole; the results are the same. Smaller files load: nothing to gain there.
STREAM_MIN_BYTES = 64 << 20


def _streams(path: str | os.PathLike[str], specs: Sequence[str]) -> bool:
    """Whether a replay of ``path`` under ``specs`` streams the file (see ``STREAM_MIN_BYTES``):
    an ``.arrow`` file that large, and no offline bound among the specs (``ideal``,
    ``offline``: they need every lifetime at once)."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) < STREAM_MIN_BYTES:
            return False
        with open(path, "rb") as f:
            if f.read(6) != b"ARROW1":
                return False
    except OSError:
        return False  # the load reports it, with the path
    bounds = {p.name for p in _core.policies() if p.kind == "offline-bound"}
    return not any(spec.split(":", 1)[0] in bounds for spec in specs)


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
    recorded memory (``0.5``); default: the limit the recorded run had — its
    ``set_per_process_memory_fraction`` cap when the trace records one, else (PyTorch) the
    device's memory minus the CUDA context's share. The summary's ``capacity_source`` says which
    (``--capacity``, ``recorded_cap``, ``device_total_minus_cuda_context``, ``device_total``,
    ``unlimited``).

    Given the path of a large ``.arrow`` file (``STREAM_MIN_BYTES``), the file is streamed from
    its memory map rather than loaded: a trace of any length replays in the memory of the
    policies' state (and of the placements table, one row per allocation: pass
    ``placements=False`` on traces of tens of millions of events).
    """
    specs = [policies] if isinstance(policies, str) else list(policies)
    if isinstance(timeline_points, bool) or not isinstance(timeline_points, int) or not 0 <= timeline_points < 2**32:
        raise InvalidArgumentError(f"timeline_points must be an integer from 0 to 2^32 - 1, got {timeline_points!r}")
    if not isinstance(trace, Trace) and _streams(trace, specs):
        streamed, _info = _core.replay_file(os.fspath(trace), specs, None, _capacity_arg(capacity), timeline_points, placements)
        return ReplayResult(streamed)
    if not isinstance(trace, Trace):
        trace = load(trace)
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
    report: dict[str, Any] = _core.validate_bfc(trace._inner, device, policy).to_dict()
    return report


def parse_capacity(text: str) -> int | float:
    """``"80GiB"`` → 85899345920 (bytes, int); ``"0.5"`` → 0.5 (a fraction of device memory)."""
    return _core.parse_capacity(text)


def validate(trace: Trace | str | os.PathLike[str], *, no_addresses: bool = False) -> dict[str, Any]:
    """Replays ``trace`` under the allocator settings (and memory cap) it recorded and compares
    decision by decision with what the real allocator did.

    Returns a dict with ``address_match`` (share of allocations placed at the recorded
    address), ``segment_events_match`` (segment allocs/frees/maps/unmaps identical in order and
    size), ``peak_reserved_recorded`` / ``peak_reserved_replayed``, retries and OOMs against the
    run's metadata, and ``ok`` (BFC captures: the keys of :func:`validate_bfc`). One device:
    its report, and itself again under ``devices``; several: only ``ok`` (all of them) and
    ``devices``, one report each. :func:`validate_reports` gives the typed reports.

    ``no_addresses=True`` (PyTorch traces): new segments are placed in the modelled CUDA driver
    address space (docs/driver-address-space.md) instead of at the recorded addresses, as in any
    what-if replay; ``ok`` then asks for the recorded peaks, retries, OOMs and segment events
    (sizes and order), not for equal addresses.
    """
    return validation_dict(validate_reports(trace, no_addresses=no_addresses))


Report = ValidationReport | BfcValidationReport


def validate_reports(trace: Trace | str | os.PathLike[str], *, no_addresses: bool = False) -> list[Report]:
    """:func:`validate`'s reports as typed objects, one per device (ascending):
    :class:`ValidationReport` for a PyTorch snapshot, :class:`BfcValidationReport` for a
    TensorFlow / JAX profiler capture."""
    if not isinstance(trace, Trace):
        trace = load(trace)
    return _core.validate(trace._inner, no_addresses)


def validation_dict(reports: Sequence[Report]) -> dict[str, Any]:
    """The JSON object ``validate --json`` prints for these reports (see :func:`validate`)."""
    per_device: list[dict[str, Any]] = [r.to_dict() for r in reports]
    if len(per_device) == 1:
        return {**per_device[0], "devices": per_device}
    return {"ok": all(r.ok for r in reports), "devices": per_device}


def plan(dump_dir: str | os.PathLike[str]) -> pl.DataFrame:
    """XLA's buffer assignment of every program in an XLA dump directory (``--xla_dump_to``):
    one row per program with the recorded preallocated-temp size, ours (XLA's heap planner
    replayed), the max-live lower bound, and the argument and output bytes."""
    return pl.DataFrame(_core.plan(os.fspath(dump_dir)))


def offline(trace: Trace, alignment: int | None = None) -> pl.DataFrame:
    """The ``ideal`` (max live bytes) and ``offline`` (XLA's best-fit plan knowing every
    lifetime) peaks of each device of ``trace``; sizes rounded to ``alignment`` (default 512
    bytes for PyTorch traces, 256 otherwise)."""
    return pl.DataFrame(_core.offline(trace._inner, alignment or 0))


def xla_runtime(dump_dir: str | os.PathLike[str], program: str | None = None, calls: int = 3) -> Trace:
    """The allocations the JAX runtime makes when it runs one compiled program of an XLA dump
    ``calls`` times — the arguments, then per call every live-out allocation and the temp arena
    (freed when the call ends) — as a trace to replay under ``jax`` / ``bfc`` policies.
    ``program``: a substring of the program's name (default: the largest temp arena)."""
    return Trace(_core.xla_runtime_trace(os.fspath(dump_dir), program, calls))
