"""The Python API: :func:`load` a trace, look at its events, :func:`replay` it under policies.

The heavy lifting is in Rust (``allocreplay._core``); tables come across through the Arrow C
stream interface, so Polars and pyarrow take the Rust buffers without copying them through
Python objects.

This package is the one door to the extension: no other module of ``allocreplay`` imports
``allocreplay._core`` or reaches into the ``_inner`` of a :class:`Trace` (tests/test_architecture.py;
docs/architecture.md). What the layers above need of the extension is here, typed: the public
API (re-exported by ``allocreplay``), then the entries for the package's own modules (at the end:
formatting, the policy registry, sweeps, states, progress counters).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import polars as pl

from allocreplay import _core, _output
from allocreplay._api._trace import ReplayResult as ReplayResult
from allocreplay._api._trace import Trace as Trace
from allocreplay._core import FORMAT_VERSION as FORMAT_VERSION
from allocreplay._core import POLICY_NAMES as POLICY_NAMES
from allocreplay._core import BfcValidationReport as BfcValidationReport
from allocreplay._core import PolicyInfo as PolicyInfo
from allocreplay._core import PolicyOption as PolicyOption
from allocreplay._core import Progress as Progress
from allocreplay._core import TraceInfo as TraceInfo
from allocreplay._core import ValidationReport as ValidationReport
from allocreplay._core import __version__ as __version__
from allocreplay.errors import InvalidArgumentError


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
    _output.check_input(path)  # a FIFO, a device: refused, not read for ever
    _output.check_input(meta)
    return Trace(_core.load(os.fspath(path), None if meta is None else os.fspath(meta), allocator, lenient))


# .arrow files from this size on are replayed streamed from the file, batch by batch
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
    recorded memory (``0.5``); default: the limit the recorded run had (the core's
    ``replay::metadata_limit``) — for a PyTorch trace its ``set_per_process_memory_fraction`` cap
    when it recorded one, else the device's memory minus the CUDA context's share; for other
    traces the device's total memory; unlimited when the trace records no device memory. The
    summary's ``capacity_source`` says which (``--capacity``, ``recorded_cap``,
    ``device_total_minus_cuda_context``, ``device_total``, ``unlimited``).

    ``cuda-async``'s real peak varies from run to run (the driver's pool), so its summary row
    also gives the range real runs land in, ``peak_reserved_low_bytes`` –
    ``peak_reserved_high_bytes`` (docs/cuda-async-band.md; the other policies are deterministic:
    both equal ``peak_reserved_bytes``), and ``fits`` is true only without an OOM and with the
    range's high end within the limit.

    ``placements`` (one row per allocation: where each request was placed) is built when the
    result's ``placements`` is first read, by replaying the same request again (replays are
    deterministic: it is the table this replay would have built), so a replay whose placements
    are never read costs only its own pass; ``placements=False`` gives an empty table.

    Given the path of a large ``.arrow`` file (``STREAM_MIN_BYTES``), the file is streamed batch
    by batch rather than loaded: a trace of any length replays in the memory of the policies'
    state. Its placements, read later, stream the file again (an error naming it if it changed
    since).
    """
    specs = [policies] if isinstance(policies, str) else list(policies)
    if isinstance(timeline_points, bool) or not isinstance(timeline_points, int) or not 0 <= timeline_points < 2**32:
        raise InvalidArgumentError(f"timeline_points must be an integer from 0 to 2^32 - 1, got {timeline_points!r}")
    if not isinstance(trace, Trace) and _streams(trace, specs):
        streamed, _info = replay_file_counted(trace, specs, None, capacity, timeline_points, placements)
        return streamed
    if not isinstance(trace, Trace):
        trace = load(trace)
    inner = _core.replay(trace._inner, specs, capacity, timeline_points, placements)
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


def parse_capacity(capacity: str | float) -> int | float:
    """``"80GiB"`` → 85899345920 (bytes, int); ``"0.5"`` or ``0.5`` → 0.5 (a fraction of device
    memory); ``17179869184`` → itself. The rules of every ``capacity`` argument (the core parses
    each once, where it is passed)."""
    return _core.parse_capacity(capacity)


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


# ---- For the package's own modules: the extension's other entries, behind typed functions ----


def format_bytes(n: int) -> str:
    """``1.50 GiB``, ``512.00 MiB``, ``96 B``: binary units, two decimals (the core's)."""
    return _core.format_bytes(n)


def policies() -> list[PolicyInfo]:
    """Every policy of the registry, with its options (``allocreplay policies``)."""
    return _core.policies()


def policy_env(spec: str) -> str:
    """The environment text that sets a policy spec's options (``PYTORCH_CUDA_ALLOC_CONF=...``;
    empty for the defaults). A bad spec raises ``PolicySpecError``."""
    return _core.policy_env(spec)


def info_file(path: str | os.PathLike[str]) -> tuple[TraceInfo, dict[str, Any]]:
    """An ``.arrow`` file's info and metadata, counted in one pass over the file."""
    return _core.info_file(path)


def tile_file(trace: Trace, n: int, path: str | os.PathLike[str]) -> int:
    """Writes ``trace`` repeated ``n`` times to ``path`` batch by batch; the events written."""
    return _core.tile_file(trace._inner, n, path)


def trace_from_table(table: object, origin: str, lenient: bool = False) -> Trace:
    """A trace from an Arrow table with a trace's schema and metadata, checked as a load is;
    ``origin`` names it in messages."""
    return Trace(_core.trace_from_arrow(table, origin, lenient))


def sweep(traces: Sequence[Trace], specs: Sequence[str], capacity: str | float | None, threads: int) -> pl.DataFrame:
    """Every trace replayed under every spec (``tune``'s sweep: all cores, GIL released), one
    row per (setting, trace, device); ``setting`` indexes ``specs``."""
    return pl.DataFrame(_core.sweep([t._inner for t in traces], list(specs), capacity, threads))


State = tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]


def state_at(trace: Trace, policy: str, at: str, capacity: str | float | None, history: bool) -> State:
    """The core's ``analysis::state_at``: a policy's state right after the event ``at``
    (``peak``, ``peak_allocated``, ``oom``, ``end`` or an index), as the five tables summary,
    live, blocks, segments and history (empty unless ``history``)."""
    s, live, blocks, segs, hist = _core.state_at(trace._inner, policy, at, capacity, history)
    return pl.DataFrame(s), pl.DataFrame(live), pl.DataFrame(blocks), pl.DataFrame(segs), pl.DataFrame(hist)


def replay_counted(trace: Trace, specs: Sequence[str], counter: Progress, capacity: str | float | None, timeline_points: int, placements: bool) -> ReplayResult:
    """:func:`replay` of a loaded trace counting the rows walked into ``counter`` (a progress bar's)."""
    return ReplayResult(_core.replay(trace._inner, list(specs), capacity, timeline_points, placements, counter))


def replay_file_counted(
    path: str | os.PathLike[str], specs: Sequence[str], counter: Progress | None, capacity: str | float | None, timeline_points: int, placements: bool
) -> tuple[ReplayResult, TraceInfo]:
    """:func:`replay` of an ``.arrow`` file streamed batch by batch (rows counted into
    ``counter``), and the trace's info."""
    inner, info = _core.replay_file(os.fspath(path), list(specs), capacity, timeline_points, placements, counter)
    return ReplayResult(inner), info


def load_counted(path: str | os.PathLike[str], counter: Progress, meta: str | os.PathLike[str] | None, allocator: str | None, lenient: bool) -> Trace:
    """:func:`load` counting the bytes of the file read into ``counter`` (the caller checks the
    inputs)."""
    return Trace(_core.load_progress(os.fspath(path), counter, None if meta is None else os.fspath(meta), allocator, lenient))
