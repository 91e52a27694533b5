"""Exports of a simulated allocator, for viewers people already use.

- :func:`snapshot`: what the policy did, as a PyTorch memory snapshot (the dict
  ``torch.cuda.memory._snapshot()`` returns: ``segments`` with their ``blocks``, and
  ``device_traces`` with ``alloc`` / ``free_requested`` / ``free_completed`` /
  ``segment_alloc`` / ``segment_free`` / ``segment_map`` / ``segment_unmap`` / ``oom`` entries and
  their ``frames``), to open in pytorch.org/memory_viz or ``torch.cuda._memory_viz``. We write
  our own plain dicts with :mod:`pickle` (only *reading* untrusted pickles must avoid it).
- :func:`chrome_trace`: allocated and reserved bytes over time as Chrome trace-event JSON
  counter events (``"ph": "C"``), which Perfetto (ui.perfetto.dev) and ``chrome://tracing``
  open: one process per device, one counter track per policy; a policy that could not run on
  a device is an instant event ``"<policy>: cannot run"`` there, its reason in ``args.error``
  (and listed under ``otherData.policies_that_cannot_run``).
"""

from __future__ import annotations

import json
import os
import pickle
import re
from typing import TYPE_CHECKING, Any

import polars as pl

from allocreplay import _api, _output
from allocreplay.analysis import _frame_tables

if TYPE_CHECKING:
    from allocreplay._api import ReplayResult, Trace

__all__ = ["chrome_trace", "snapshot", "write_chrome_trace", "write_snapshot"]


def _stack_frames(trace: Trace) -> dict[int, list[dict[str, Any]]]:
    """stack_id → the stack as PyTorch's snapshot lists it: frame dicts, innermost first."""
    frames, stacks = _frame_tables(trace)
    if stacks.is_empty():
        return {}
    j = stacks.join(frames, on="frame_id").sort("stack_id", "depth")
    out: dict[int, list[dict[str, Any]]] = {}
    for sid, filename, line, name in zip(j["stack_id"].to_list(), j["filename"].to_list(), j["line"].to_list(), j["name"].to_list()):
        out.setdefault(sid, []).append({"filename": filename, "line": line, "name": name})
    return out


def _expandable(trace: Trace, policy: str) -> bool:
    opts = policy.replace(" ", "").lower()
    if "expandable_segments:true" in opts:
        return True
    if opts.startswith("pytorch:recorded"):
        settings = trace.metadata.get("allocator_settings")
        return isinstance(settings, dict) and bool(settings.get("expandable_segments"))
    return False


def snapshot(trace: Trace, policy: str = "pytorch", *, capacity: str | float | None = None) -> dict[str, Any]:
    """The replay of ``trace`` under ``policy`` as a PyTorch memory snapshot dict (see the
    module's docstring). Addresses are the simulated allocator's; frames and times are the
    trace's. The history is computed in Rust; one dict per entry is then built here (about
    7 µs an entry: some 20 s for 3 million events)."""
    _states, live, blocks, segs, hist = _api.state_at(trace, policy, "end", capacity, history=True)
    stacks = _stack_frames(trace)
    empty: list[dict[str, Any]] = []
    pools = {p["index"]: tuple(p.get("id") or (0, 0)) for p in trace.metadata.get("pools", [])}
    expandable = _expandable(trace, policy)
    n_dev = max([d["index"] for d in trace.metadata.get("devices", [])] + hist["device"].to_list() + [0]) + 1
    device_traces: list[list[dict[str, Any]]] = [[] for _ in range(n_dev)]
    cols = [hist[c].to_list() for c in ("device", "action", "addr", "size", "stream", "time_ns", "stack_id")]
    for device, action, addr, size, stream, time_ns, stack_id in zip(*cols):
        e: dict[str, Any] = {
            "action": action,
            "addr": addr,
            "size": size,
            "stream": stream,
            "time_us": 0 if time_ns is None else time_ns // 1000,
            "frames": stacks.get(stack_id, empty) if stack_id is not None else empty,
        }
        if action == "oom":
            e["device_free"] = 0
        device_traces[device].append(e)
    by_id = {r["alloc_id"]: r for r in live.iter_rows(named=True)}
    seg_list: list[dict[str, Any]] = []
    by_segment = blocks.sort("addr").partition_by(["device", "segment"], as_dict=True)
    for s in segs.sort("device", "addr").iter_rows(named=True):
        own = by_segment.get((s["device"], s["addr"]))
        out_blocks = []
        for b in own.iter_rows(named=True) if own is not None else []:
            a = by_id.get(b["alloc_id"]) if b["allocated"] else None
            state = "inactive"
            if b["allocated"]:
                state = "active_pending_free" if a and a["free_requested"] else "active_allocated"
            sid = a["stack_id"] if a else None
            out_blocks.append(
                {
                    "address": b["addr"],
                    "size": b["size"],
                    "requested_size": a["requested_bytes"] if a else (b["size"] if b["allocated"] else 0),
                    "state": state,
                    "frames": stacks.get(sid, empty) if sid is not None else empty,
                }
            )
        # DeviceCachingAllocator::snapshot: allocated_size counts blocks still allocated; a
        # block freed by the program but in use by another stream is active, not allocated.
        requested = sum(b["requested_size"] for b in out_blocks if b["state"] != "inactive")
        allocated = sum(b["size"] for b in out_blocks if b["state"] == "active_allocated")
        active = sum(b["size"] for b in out_blocks if b["state"] != "inactive")
        seg_list.append(
            {
                "device": s["device"],
                "address": s["addr"],
                "total_size": s["size"],
                "allocated_size": allocated,
                "active_size": active,
                "requested_size": requested,
                "stream": s["stream"],
                "segment_type": s["kind"] if s["kind"] in ("small", "large") else "large",
                "segment_pool_id": pools.get(s["pool"], (0, 0)),
                "is_expandable": expandable,
                "frames": empty,
                "blocks": out_blocks,
            }
        )
    out: dict[str, Any] = {"segments": seg_list, "device_traces": device_traces, "allocreplay_policy": policy}
    settings = _allocator_settings(trace, policy)
    if settings is not None:
        out["allocator_settings"] = settings
    return out


def _allocator_settings(trace: Trace, policy: str) -> dict[str, Any] | None:
    """``allocator_settings`` as PyTorch's snapshot records them (the fields
    ``pytorch:recorded`` reads back), for ``pytorch`` policies: the trace's own for
    ``pytorch:recorded``, else what the spec sets (others at PyTorch's defaults)."""
    name, _, opts = policy.partition(":")
    if name != "pytorch":
        return None
    if opts.strip().startswith("recorded"):
        recorded = trace.metadata.get("allocator_settings")
        return dict(recorded) if isinstance(recorded, dict) else None
    low = opts.replace(" ", "")
    split = re.search(r"max_split_size_mb:(\d+)", low)
    gc = re.search(r"garbage_collection_threshold:([0-9.]+)", low)
    return {
        "PYTORCH_CUDA_ALLOC_CONF": opts,
        "expandable_segments": "expandable_segments:true" in low.lower(),
        "max_split_size": int(split.group(1)) * 2**20 if split else -1,
        "garbage_collection_threshold": float(gc.group(1)) if gc else 0.0,
    }


def write_snapshot(trace: Trace, policy: str, path: str | os.PathLike[str], *, capacity: str | float | None = None) -> dict[str, Any]:
    """Writes :func:`snapshot` as a pickle to ``path``; returns the dict."""
    snap = snapshot(trace, policy, capacity=capacity)
    # Atomically (a file), written through (a device, a FIFO, "-"): allocreplay._output.
    with _output.open_output(_output.target(path), "wb") as f:
        pickle.dump(snap, f, protocol=4)
    return snap


def chrome_trace(result: ReplayResult) -> dict[str, Any]:
    """A replay's timeline as Chrome trace-event JSON (``{"traceEvents": [...]}``): per
    (policy, device) a counter track ``"<policy>"`` in process ``"device N"`` with
    ``allocated`` and ``reserved`` bytes. ``ts`` is in microseconds from the first event
    (from ``time_ns`` when the trace has times; else the event index is used as microseconds).
    A policy that could not run on a device (its summary row's ``error``) has no counters: an
    instant event ``"<policy>: cannot run"`` at ``ts`` 0 in that device's process carries its
    reason (``args.error``), and ``otherData.policies_that_cannot_run`` lists them all."""
    tl = result.timeline
    has_time = tl["time_ns"].null_count() < tl.height if tl.height else False
    t0 = tl["time_ns"].min() if has_time else 0
    ts = ((pl.col("time_ns").forward_fill().fill_null(t0) - t0) / 1000.0) if has_time else pl.col("event").cast(pl.Float64)
    rows = tl.with_columns(ts=ts).select("policy", "device", "ts", "allocated_bytes", "reserved_bytes")
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": int(d), "args": {"name": f"device {d}"}} for d in sorted(set(rows["device"].to_list()))
    ]
    for policy, device, t, a, r in rows.iter_rows():
        events.append({"name": policy, "ph": "C", "ts": t, "pid": device, "args": {"allocated": a, "reserved": r}})
    failed = result.summary.filter(pl.col("error").is_not_null()).select("policy", "device", "error").to_dicts()
    named = {e["pid"] for e in events if e["ph"] == "M"}
    for f in failed:
        if f["device"] not in named:
            named.add(f["device"])
            events.append({"name": "process_name", "ph": "M", "pid": int(f["device"]), "args": {"name": f"device {f['device']}"}})
        events.append({"name": f"{f['policy']}: cannot run", "ph": "i", "s": "p", "ts": 0, "pid": f["device"], "args": {"error": f["error"]}})
    other: dict[str, Any] = {"generator": "allocreplay", "unit": "bytes"}
    if failed:
        other["policies_that_cannot_run"] = failed
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_chrome_trace(result: ReplayResult, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Writes :func:`chrome_trace` as JSON to ``path``; returns the dict."""
    data = chrome_trace(result)
    with _output.open_output(_output.target(path), "w") as f:
        json.dump(data, f)
    return data
