"""Where the memory goes: Polars analyses of a replay.

Every function works on any allocator policy's replay and returns a Polars DataFrame. The state
of a policy at one event (its peak, its first OOM, the end, or any event index) is computed in
Rust (``allocreplay-core``'s ``analysis::state_at``: the trace replayed once to find the event
and once stopped right after it); Python only joins and aggregates with Polars expressions.

``at`` takes ``"peak"`` (the first event after which reserved bytes were at their peak),
``"peak_allocated"``, ``"oom"`` (the first request the policy failed), ``"end"``, or an event
index (a row of ``trace.events``).

Call sites: a stack's *call site* is its innermost frame outside installed packages and the
Python standard library (``site-packages``, ``dist-packages``, ``/lib/pythonX.Y/``), i.e. the
line of the user's code that allocated; ``innermost_frame`` is the stack's first frame
whatever it is. Both read ``"name (file:line)"``; null where the trace recorded no stack.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from allocreplay import _api
from allocreplay.errors import InvalidArgumentError

if TYPE_CHECKING:
    from allocreplay._api import ReplayResult, Trace

__all__ = [
    "CAPACITY_SOURCES",
    "State",
    "breakdown",
    "call_sites",
    "compare",
    "diff",
    "diff_timeline",
    "fragmentation",
    "frame_tables",
    "holes",
    "limits",
    "live_allocations",
    "oom",
    "segments",
    "smallest_fitting_capacity",
    "state",
    "storage_tags",
    "top_call_sites",
]

_LIBRARY = r"(site-packages|dist-packages|/lib/python\d+(\.\d+)?/|^<frozen )"


def _frame_tables(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``Trace.frames`` and ``Trace.stacks``: ``frames(frame_id, filename, line, name)`` and
    ``stacks(stack_id, depth, frame_id)`` (depth 0 = innermost), as the core builds them."""
    return trace.frames, trace.stacks


def frame_tables(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(frames, stacks)``: ``frames`` has one row per distinct frame (``frame_id``,
    ``filename``, ``line``, ``name``); ``stacks`` one row per frame of each stack (``stack_id``
    — the events' ``stack_id`` —, ``depth`` from 0 = innermost, ``frame_id``)."""
    return _frame_tables(trace)


def call_sites(trace: Trace) -> pl.DataFrame:
    """One row per stack: ``stack_id``, ``call_site`` (innermost frame of the user's code,
    else the innermost frame), ``innermost_frame``, ``call_site_file``, ``call_site_line``."""
    frames, stacks = _frame_tables(trace)
    label = pl.format("{} ({}:{})", pl.col("name"), pl.col("filename"), pl.col("line"))
    j = stacks.join(frames, on="frame_id").with_columns(label=label, library=pl.col("filename").str.contains(_LIBRARY))
    innermost = j.sort("depth").group_by("stack_id", maintain_order=True).first().select("stack_id", innermost_frame="label")
    user = (
        j.filter(~pl.col("library"))
        .sort("depth")
        .group_by("stack_id", maintain_order=True)
        .first()
        .select("stack_id", call_site="label", call_site_file="filename", call_site_line="line")
    )
    first = j.sort("depth").group_by("stack_id", maintain_order=True).first().select("stack_id", f="filename", l="line")
    return (
        innermost.join(user, on="stack_id", how="left")
        .join(first, on="stack_id", how="left")
        .with_columns(
            call_site=pl.coalesce("call_site", "innermost_frame"),
            call_site_file=pl.coalesce("call_site_file", "f"),
            call_site_line=pl.coalesce("call_site_line", "l"),
        )
        .select("stack_id", "call_site", "innermost_frame", "call_site_file", "call_site_line")
        .sort("stack_id")
    )


@dataclass(frozen=True)
class State:
    """A policy's state right after one event, per device.

    - ``summary``: one row per device: ``policy``, ``device``, ``event``, ``time_ns``,
      ``allocated_bytes``, ``reserved_bytes``, ``capacity_bytes``, ``largest_free_block_bytes``
      (largest free hole of any segment), ``free_cached_bytes`` (all free holes),
      ``live_allocations``, ``first_oom_event``, ``first_oom_requested_bytes``,
      ``first_oom_alloc_bytes`` (what the policy tried to obtain from the device).
    - ``live``: the allocations live then (see :func:`live_allocations`).
    - ``blocks``: every block of every segment: ``segment``, ``addr``, ``size``, ``allocated``
      (false: a free hole), ``alloc_id``.
    - ``segments``: see :func:`segments`.
    """

    summary: pl.DataFrame
    live: pl.DataFrame
    blocks: pl.DataFrame
    segments: pl.DataFrame


def _trace(trace: Trace | str | os.PathLike[str]) -> Trace:
    return trace if isinstance(trace, _api.Trace) else _api.load(trace)


# What each ``capacity_source`` means, in the words every command prints.
CAPACITY_SOURCES = {
    "--capacity": "--capacity",
    "recorded_cap": "the recorded run's cap (set_per_process_memory_fraction)",
    "device_total_minus_cuda_context": "the device's memory minus the CUDA context's share (no cap recorded)",
    "device_total": "the device's total memory",
    "unlimited": "no device memory recorded: unlimited",
}


def limits(trace: Trace | str | os.PathLike[str], capacity: str | float | None = None) -> pl.DataFrame:
    """The device limit every replay and analysis of ``trace`` runs under, one row per device:
    ``device``, ``capacity_bytes`` (null: unlimited), ``capacity_source`` (``--capacity``,
    ``recorded_cap``, ``device_total_minus_cuda_context``, ``device_total``, ``unlimited``).

    Computed by the core's one rule (``replay::metadata_limit``: ``capacity`` when given, else a
    PyTorch trace's recorded cap, else for a PyTorch trace the device's memory minus the CUDA
    context's share, else the device's memory, else no limit), read from a replay's summary: what
    ``replay``, ``compare``, ``report``, ``tune`` and every function of this module use."""
    t = _trace(trace)
    # `ideal` (the live bytes) builds no allocator, so it runs on every trace, and fast.
    s = _api.replay(t, ["ideal"], capacity, timeline_points=1, placements=False).summary
    return s.select("device", "capacity_bytes", "capacity_source").sort("device")


_MIB = 1 << 20
# The largest limit `smallest_fitting_capacity` tries: a policy that runs out of memory even
# there is reported as not fitting at any limit.
_CEILING = 1 << 40


def smallest_fitting_capacity(
    traces: Trace | str | os.PathLike[str] | list[Trace | str | os.PathLike[str]],
    policy: str = "pytorch",
    *,
    above: int = 0,
    resolution: int = 2 * _MIB,
) -> int | None:
    """The smallest device limit, in bytes, at which ``policy`` fits every trace (no OOM; for
    ``cuda-async``, the predicted range's high end within the limit: the ``fits`` column of every
    replay), found by bisection between ``above`` and the policy's peak without a limit, to
    ``resolution`` bytes; ``None`` when it does not fit even at 1 TiB.

    Each candidate limit is replayed; the one returned was replayed and fits. A caching
    allocator frees its cache and retries when it meets the limit, so fitting need not be
    monotone in the limit: this is the smallest limit the bisection met, not a proof that no
    smaller one fits. What ``tune`` prints when no setting fits."""
    if resolution < 1:
        raise InvalidArgumentError(f"resolution must be at least 1 byte, got {resolution}")
    ts = [_trace(t) for t in traces] if isinstance(traces, list) else [_trace(traces)]

    def run(cap: int) -> list[pl.DataFrame]:
        return [_api.replay(t, [policy], cap, timeline_points=1, placements=False).summary for t in ts]

    def every_fits(summaries: list[pl.DataFrame]) -> bool:
        return all(bool(s["fits"].all()) for s in summaries)

    def fits(cap: int) -> bool:
        return every_fits(run(cap))

    free = run(_CEILING)
    if not every_fits(free):
        return None
    # Under a limit at its own peak the policy makes the same decisions as without one (it
    # never met the limit); cuda-async's verdict reads its range's high end.
    peak = max(int(s.select(pl.max_horizontal("peak_reserved_bytes", "peak_reserved_high_bytes")).max().item() or 0) for s in free)
    hi = min(-(-max(peak, 1) // resolution) * resolution, _CEILING)
    while not fits(hi):
        hi = min(2 * hi, _CEILING)
    # No replay runs at a limit of 0 (refused as a capacity): below every peak, it cannot fit.
    lo = max(above, 0)
    if lo >= hi or (lo > 0 and fits(lo)):
        return min(lo, hi)
    while hi - lo > resolution:
        mid = lo + (hi - lo) // 2 // resolution * resolution
        if mid <= lo:
            break
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _state_tables(t: Trace, policy: str, at: str | int, capacity: str | float | None) -> tuple[pl.DataFrame, ...]:
    """``_api.state_at``'s tables at the limit :func:`limits` gives: without ``capacity``, a
    device whose run recorded a cap is replayed at that cap, as ``replay`` does."""
    if capacity is not None:
        return _api.state_at(t, policy, str(at), capacity, history=False)[:4]
    # The recorded cap is what a replay gets as its capacity: pass it as one (the same limit,
    # the same policy configuration), per group of devices sharing it.
    lim = limits(t)
    groups: dict[int | None, list[int]] = {}
    for device, cap, source in lim.iter_rows():
        groups.setdefault(cap if source == "recorded_cap" else None, []).append(device)
    parts = []
    for cap, devices in groups.items():
        frames = list(_api.state_at(t, policy, str(at), cap, history=False)[:4])
        if len(groups) > 1:
            frames = [f.filter(pl.col("device").is_in(devices)) for f in frames]
        parts.append(frames)
    if len(parts) == 1:
        return tuple(parts[0])
    return tuple(pl.concat([p[k] for p in parts], how="vertical_relaxed") for k in range(4))


def state(trace: Trace | str | os.PathLike[str], policy: str = "pytorch", *, at: str | int = "peak", capacity: str | float | None = None) -> State:
    """The state of ``policy`` at ``at`` on every device of ``trace`` (for ``at="oom"``, the
    devices where the policy failed a request). ``capacity``: as :func:`allocreplay.replay`'s;
    default: the limit the recorded run had (:func:`limits`), as every command uses."""
    t = _trace(trace)
    s, live, blocks, segs = _state_tables(t, policy, at, capacity)
    return State(s, live, blocks, segs)


def _with_call_sites(t: Trace, df: pl.DataFrame) -> pl.DataFrame:
    sites = call_sites(t).select("stack_id", "call_site", "innermost_frame")
    return df.join(sites, on="stack_id", how="left")


def live_allocations(
    trace: Trace | str | os.PathLike[str], policy: str = "pytorch", *, at: str | int = "peak", capacity: str | float | None = None
) -> pl.DataFrame:
    """The allocations live at ``at`` (default: the peak of reserved bytes), largest first.

    Columns: ``policy``, ``device``, ``event`` (the state's), ``alloc_id``, ``alloc_event``
    (row of its ``alloc``), ``addr``, ``size`` (bytes the policy set aside: block / chunk),
    ``requested_bytes`` (what the program asked for), ``stream``, ``pool``, ``segment`` (base of
    the segment holding it), ``stack_id``, ``free_requested`` (freed by the program, still held
    for another stream), ``age_events`` (trace rows since its alloc), ``age_ns`` (null without
    timestamps), ``call_site``, ``innermost_frame``.
    """
    t = _trace(trace)
    return _with_call_sites(t, state(t, policy, at=at, capacity=capacity).live).sort("size", "alloc_id", descending=[True, False])


def top_call_sites(
    trace: Trace | str | os.PathLike[str], policy: str = "pytorch", *, at: str | int = "peak", capacity: str | float | None = None, n: int | None = 10
) -> pl.DataFrame:
    """Call sites ranked by the bytes of their allocations live at ``at``.

    Columns: ``policy``, ``device``, ``call_site`` (null: no stack recorded), ``bytes`` (blocks
    held), ``requested_bytes``, ``allocations``, ``share`` (of the bytes held by all live
    allocations of the device). ``n``: rows kept per device (None: all)."""
    live = live_allocations(trace, policy, at=at, capacity=capacity)
    out = (
        live.group_by("policy", "device", "call_site")
        .agg(bytes=pl.col("size").sum(), requested_bytes=pl.col("requested_bytes").sum(), allocations=pl.len().cast(pl.UInt32))
        .with_columns(share=pl.col("bytes") / pl.col("bytes").sum().over("policy", "device"))
        .sort(["device", "bytes", "call_site"], descending=[False, True, False], nulls_last=True)
    )
    return out.group_by("policy", "device", maintain_order=True).head(n) if n is not None else out


UNTAGGED = "untagged"
ALLOCATOR_CACHE = "allocator_cache"
_TAG_ORDER = ("parameters", "buffers", "gradients", "optimizer_state", "activations")
_HOW_UNTAGGED = "the trace carries no storage tags: every live allocation"
_HOW_CACHE = "reserved bytes that no live allocation holds: the allocator's cache and fragmentation (reserved - the live allocations' blocks)"


def storage_tags(trace: Trace | str | os.PathLike[str]) -> pl.DataFrame | None:
    """The storage tags a capture recorded (``metadata["extra"]["capture"]["storage_tags"]``,
    written by ``allocreplay capture --no-gpu``), one row per category in the capture's order:
    ``category``, ``how_tagged``, ``addrs`` (list of the tagged allocations' addresses: the
    ``addr`` of their ``alloc`` events), ``rest`` (true for the category of every allocation in
    no list: ``activations``). None: the trace carries no tags."""
    t = _trace(trace)
    tags = ((t.metadata.get("extra") or {}).get("capture") or {}).get("storage_tags")
    if not isinstance(tags, dict) or tags.get("keyed_by") != "addr" or not isinstance(tags.get("categories"), dict):
        return None
    rest = tags.get("rest")
    given = tags["categories"]
    order = [c for c in tags.get("order") or _TAG_ORDER if c in given]
    cats = {c: given[c] for c in [*order, *sorted(set(given) - set(order))]}
    return pl.DataFrame(
        {
            "category": list(cats),
            "how_tagged": [str(c.get("how", "")) for c in cats.values()],
            "addrs": [[int(a) for a in c.get("addrs", [])] for c in cats.values()],
            "rest": [name == rest for name in cats],
        },
        schema={"category": pl.String, "how_tagged": pl.String, "addrs": pl.List(pl.UInt64), "rest": pl.Boolean},
    )


def breakdown(trace: Trace | str | os.PathLike[str], policy: str = "pytorch", *, at: str | int = "peak", capacity: str | float | None = None) -> pl.DataFrame:
    """What the memory ``policy`` reserves at ``at`` (default: its peak of reserved bytes) is
    made of, by category: for a capture that tags its storages (``allocreplay capture
    --no-gpu``: see :func:`storage_tags`) ``parameters``, ``buffers``, ``gradients``,
    ``optimizer_state`` and ``activations`` (the rest: activations and temporaries); for any
    other trace ``untagged`` (every live allocation); then ``allocator_cache``: the reserved
    bytes no live allocation holds (the allocator's cache and fragmentation). The rows of a
    device sum to its reserved bytes.

    Columns: ``policy``, ``device``, ``event``, ``category``, ``bytes`` (blocks held by the
    category's live allocations; for ``allocator_cache``: reserved − those blocks),
    ``requested_bytes`` (what the program asked for; 0 for ``allocator_cache``),
    ``allocations`` (live allocations), ``share`` (of the device's reserved bytes; null when
    nothing is reserved), ``how_tagged``."""
    t = _trace(trace)
    st = state(t, policy, at=at, capacity=capacity)
    tags = storage_tags(t)
    live = st.live.select("policy", "device", "event", "alloc_event", "size", "requested_bytes")
    if tags is None:
        cats = pl.DataFrame({"category": [UNTAGGED], "how_tagged": [_HOW_UNTAGGED]})
        live = live.with_columns(category=pl.lit(UNTAGGED))
    else:
        cats = tags.select("category", "how_tagged")
        rest = tags.filter(pl.col("rest"))["category"]
        rest_name = rest[0] if rest.len() else UNTAGGED
        if not rest.len():
            cats = pl.concat([cats, pl.DataFrame({"category": [UNTAGGED], "how_tagged": ["allocations in no category's list"]})])
        by_addr = tags.select("category", "addrs").explode("addrs").drop_nulls("addrs").rename({"addrs": "trace_addr"}).unique("trace_addr", keep="first")
        # The trace's address of each live allocation: that of its alloc event.
        alloc_rows = live.select("alloc_event").drop_nulls().unique()
        addr_of = (
            t.events.select(pl.col("addr").alias("trace_addr"))
            .with_row_index("alloc_event")
            .with_columns(pl.col("alloc_event").cast(pl.UInt64))
            .join(alloc_rows, on="alloc_event", how="semi")
        )
        live = (
            live.join(addr_of, on="alloc_event", how="left")
            .join(by_addr, on="trace_addr", how="left")
            .with_columns(pl.col("category").fill_null(rest_name))
            .drop("trace_addr")
        )
    order = pl.concat([cats, pl.DataFrame({"category": [ALLOCATOR_CACHE], "how_tagged": [_HOW_CACHE]})]).with_row_index("order")
    per = live.group_by("device", "category").agg(
        bytes=pl.col("size").sum().cast(pl.UInt64),
        requested_bytes=pl.col("requested_bytes").sum().cast(pl.UInt64),
        allocations=pl.len().cast(pl.UInt32),
    )
    held = live.group_by("device").agg(held=pl.col("size").sum().cast(pl.Int64))
    devices = st.summary.select("policy", "device", "event", "reserved_bytes")
    cache = devices.join(held, on="device", how="left").select(
        "device",
        category=pl.lit(ALLOCATOR_CACHE),
        bytes=(pl.col("reserved_bytes").cast(pl.Int64) - pl.col("held").fill_null(0)).clip(lower_bound=0).cast(pl.UInt64),
        requested_bytes=pl.lit(0, dtype=pl.UInt64),
        allocations=pl.lit(0, dtype=pl.UInt32),
    )
    rows = pl.concat([per, cache], how="vertical_relaxed")
    out = (
        devices.join(order, how="cross")
        .join(rows, on=["device", "category"], how="left")
        .with_columns(pl.col("bytes", "requested_bytes").fill_null(0), pl.col("allocations").fill_null(0))
        .with_columns(share=pl.when(pl.col("reserved_bytes") > 0).then(pl.col("bytes") / pl.col("reserved_bytes")).otherwise(None))
        .sort("device", "order")
    )
    return out.select("policy", "device", "event", "category", "bytes", "requested_bytes", "allocations", "share", "how_tagged")


def segments(trace: Trace | str | os.PathLike[str], policy: str = "pytorch", *, at: str | int = "peak", capacity: str | float | None = None) -> pl.DataFrame:
    """The segments the policy holds at ``at``, with their free holes.

    Columns: ``policy``, ``device``, ``event``, ``addr``, ``size``, ``stream``, ``pool``,
    ``kind`` (``small``/``large`` for PyTorch, ``region`` for BFC...), ``allocated_bytes``,
    ``free_bytes`` (free holes in all), ``blocks``, ``holes`` (free blocks), ``largest_hole_bytes``."""
    return state(trace, policy, at=at, capacity=capacity).segments


def holes(trace: Trace | str | os.PathLike[str], policy: str = "pytorch", *, at: str | int = "peak", capacity: str | float | None = None) -> pl.DataFrame:
    """The free holes (cached free blocks) at ``at``, largest first: ``policy``, ``device``,
    ``event``, ``segment``, ``addr``, ``size``."""
    b = state(trace, policy, at=at, capacity=capacity).blocks
    return b.filter(~pl.col("allocated")).drop("allocated", "alloc_id").sort("size", descending=True)


def fragmentation(result: ReplayResult) -> pl.DataFrame:
    """Fragmentation over time from a replay's timeline: ``policy``, ``device``, ``event``,
    ``time_ns``, ``allocated_bytes``, ``reserved_bytes``, ``unused_bytes`` (reserved −
    allocated: held from the device but serving no allocation), ``fragmentation`` (unused /
    reserved; null while nothing is reserved). Lazy-friendly: plain expressions."""
    return result.timeline.with_columns(unused_bytes=(pl.col("reserved_bytes").cast(pl.Int64) - pl.col("allocated_bytes").cast(pl.Int64))).with_columns(
        fragmentation=pl.when(pl.col("reserved_bytes") > 0).then(pl.col("unused_bytes") / pl.col("reserved_bytes")).otherwise(None)
    )


def oom(trace: Trace | str | os.PathLike[str], policy: str = "pytorch", *, capacity: str | float | None = None) -> pl.DataFrame:
    """The first request the policy failed, per device (no rows: no OOM).

    Columns: ``policy``, ``device``, ``event``, ``time_ns``, ``requested_bytes``,
    ``alloc_bytes`` (what the policy tried to obtain from the device), ``allocated_bytes``,
    ``reserved_bytes``, ``capacity_bytes``, ``headroom_bytes`` (capacity − reserved),
    ``largest_free_block_bytes``, ``free_cached_bytes``, ``fragmented`` (true when the cached
    free holes plus the headroom would hold the request but no hole is large enough: the
    memory is there, in pieces), ``call_site``."""
    t = _trace(trace)
    s = state(t, policy, at="oom", capacity=capacity).summary
    ev = t.events.with_row_index("event").select(pl.col("event").cast(pl.UInt64), "stack_id")
    out = (
        s.join(ev, on="event", how="left")
        .with_columns(
            requested_bytes=pl.col("first_oom_requested_bytes"),
            alloc_bytes=pl.col("first_oom_alloc_bytes"),
            headroom_bytes=(pl.col("capacity_bytes").cast(pl.Int64) - pl.col("reserved_bytes").cast(pl.Int64)).clip(lower_bound=0),
        )
        .with_columns(
            fragmented=(pl.col("largest_free_block_bytes") < pl.col("alloc_bytes"))
            & ((pl.col("free_cached_bytes").cast(pl.Int64) + pl.col("headroom_bytes")) >= pl.col("alloc_bytes").cast(pl.Int64))
        )
    )
    out = _with_call_sites(t, out)
    return out.select(
        "policy",
        "device",
        "event",
        "time_ns",
        "requested_bytes",
        "alloc_bytes",
        "allocated_bytes",
        "reserved_bytes",
        "capacity_bytes",
        "headroom_bytes",
        "largest_free_block_bytes",
        "free_cached_bytes",
        "fragmented",
        "call_site",
    )


def diff(trace: Trace | str | os.PathLike[str], policy_a: str, policy_b: str, *, at: str | int = "peak", capacity: str | float | None = None) -> pl.DataFrame:
    """Per call site, the bytes live at each policy's own ``at`` (default: its peak reserved):
    where does ``policy_b`` hold less or more than ``policy_a``?

    Columns: ``device``, ``call_site``, ``bytes_a``, ``bytes_b`` (blocks held; 0 where the call
    site has nothing live), ``delta_bytes`` (b − a), ``requested_bytes_a``, ``requested_bytes_b``;
    sorted by the size of the difference."""
    t = _trace(trace)

    def side(policy: str, tag: str) -> pl.DataFrame:
        return top_call_sites(t, policy, at=at, capacity=capacity, n=None).select(
            "device", "call_site", pl.col("bytes").alias(f"bytes_{tag}"), pl.col("requested_bytes").alias(f"requested_bytes_{tag}")
        )

    j = side(policy_a, "a").join(side(policy_b, "b"), on=["device", "call_site"], how="full", coalesce=True, nulls_equal=True)
    j = j.with_columns(pl.col(c).fill_null(0) for c in ("bytes_a", "bytes_b", "requested_bytes_a", "requested_bytes_b"))
    return (
        j.with_columns(delta_bytes=pl.col("bytes_b").cast(pl.Int64) - pl.col("bytes_a").cast(pl.Int64))
        .sort([pl.col("delta_bytes").abs(), "call_site"], descending=[True, False], nulls_last=True)
        .select("device", "call_site", "bytes_a", "bytes_b", "delta_bytes", "requested_bytes_a", "requested_bytes_b")
    )


def diff_timeline(result: ReplayResult, policy_a: str, policy_b: str) -> pl.DataFrame:
    """Over time, ``policy_b`` against ``policy_a`` of one replay (both in ``result``; the
    timelines share their event buckets): ``device``, ``event``, ``time_ns``,
    ``reserved_bytes_a``/``_b``, ``allocated_bytes_a``/``_b``, ``reserved_delta_bytes``
    (b − a; negative where b saves memory), ``allocated_delta_bytes``."""
    tl = result.timeline
    known = set(tl["policy"].unique().to_list())
    for p in (policy_a, policy_b):
        if p not in known:
            raise InvalidArgumentError(f"policy {p!r} is not in this replay (it has: {', '.join(sorted(known))})")

    def side(p: str, tag: str) -> pl.DataFrame:
        return tl.filter(pl.col("policy") == p).select(
            "device", "event", "time_ns", pl.col("reserved_bytes").alias(f"reserved_bytes_{tag}"), pl.col("allocated_bytes").alias(f"allocated_bytes_{tag}")
        )

    j = side(policy_a, "a").join(side(policy_b, "b").drop("time_ns"), on=["device", "event"], how="inner")
    return j.with_columns(
        reserved_delta_bytes=pl.col("reserved_bytes_b").cast(pl.Int64) - pl.col("reserved_bytes_a").cast(pl.Int64),
        allocated_delta_bytes=pl.col("allocated_bytes_b").cast(pl.Int64) - pl.col("allocated_bytes_a").cast(pl.Int64),
    ).sort("device", "event")


def compare(trace: Trace, result: ReplayResult) -> pl.DataFrame:
    """A replay's policies ranked per device: those that fit first, then by peak reserved
    bytes, then by device calls (``allocreplay compare``); a policy that could not run on the
    device (its summary row's ``error``) last, with its reason and no numbers.

    Columns: ``rank`` (1 = best, per device), ``policy``, ``device``, ``peak_reserved_bytes``,
    ``peak_allocated_bytes``, ``efficiency`` (peak allocated / peak reserved: the share of the
    reserved peak that held data; null for a zero peak), ``device_calls`` (device allocations
    + frees: cudaMalloc/cudaFree, maps/unmaps), ``num_alloc_retries``, ``num_ooms``, ``oom``
    (true: the policy failed a request; null: it could not run), ``fits`` (no OOM, and the high
    end of the peak's range within the limit: for ``cuda-async``, whose real peak varies from run
    to run, ``peak_reserved_low_bytes`` – ``peak_reserved_high_bytes``; the replay's peak for
    the others), ``first_oom_event``,
    ``first_oom_requested_bytes``, ``first_oom_call_site``, ``capacity_bytes``,
    ``capacity_source`` (see :func:`limits`), ``error`` (why the policy could not run; null
    when it ran)."""
    s = result.summary
    ev = trace.events.with_row_index("first_oom_event").select(pl.col("first_oom_event").cast(pl.UInt64), "stack_id")
    sites = call_sites(trace).select("stack_id", first_oom_call_site="call_site")
    out = (
        s.join(ev, on="first_oom_event", how="left")
        .join(sites, on="stack_id", how="left")
        .with_columns(
            efficiency=pl.when(pl.col("peak_reserved_bytes") > 0).then(pl.col("peak_allocated_bytes") / pl.col("peak_reserved_bytes")).otherwise(None),
            device_calls=pl.col("num_device_alloc") + pl.col("num_device_free"),
            oom=pl.when(pl.col("error").is_null()).then(pl.col("num_ooms") > 0),
            _failed=pl.col("error").is_not_null(),
            _unfit=~pl.col("fits"),
        )
        .sort(["device", "_failed", "oom", "_unfit", "peak_reserved_bytes", "device_calls", "policy"], nulls_last=True)
        .with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.UInt32).over("device"))
    )
    return out.select(
        "rank",
        "policy",
        "device",
        "peak_reserved_bytes",
        "peak_allocated_bytes",
        "efficiency",
        "device_calls",
        "num_alloc_retries",
        "num_ooms",
        "oom",
        "fits",
        "peak_reserved_low_bytes",
        "peak_reserved_high_bytes",
        "first_oom_event",
        "first_oom_requested_bytes",
        "first_oom_call_site",
        "capacity_bytes",
        "capacity_source",
        "error",
    )
