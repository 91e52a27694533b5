"""From the raw files a recorded process left (see ``_hook``) to Arrow traces: one per device.

Each raw capture is imported by the same importers as ``allocreplay import`` (with its ``.json``
as ``--meta``); a process that used several devices gives one trace per device, the other
devices' events filtered out.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

from allocreplay._api import Trace, TraceInfo, format_bytes, load
from allocreplay.errors import AllocReplayError

ALL_DEVICES = "all"
"""An artifact's device key for a capture that holds several devices, kept in one trace (the
ranks of ``capture --no-gpu --all-ranks``, merged by ``_ranks``)."""


@dataclass
class Captured:
    """One trace written by a capture."""

    path: str
    framework: str
    device: str
    pid: int
    info: TraceInfo

    def describe(self) -> str:
        i = self.info
        peak = i.recorded_peak_reserved_bytes
        parts = [f"{i.events:,} events", f"{i.allocs:,} allocations"]
        if peak is not None:
            parts.append(f"peak reserved {format_bytes(peak)}")
        if i.ooms:
            parts.append(f"{i.ooms} OOM(s)")
        where = f"devices {', '.join(map(str, i.devices))}" if self.device == ALL_DEVICES else f"device {self.device}"
        return f"{self.path}: {self.framework}, {where}: " + ", ".join(parts)


@dataclass
class Outcome:
    traces: list[Captured]
    notes: list[str]
    manifests: list[dict[str, Any]]


def read_manifests(raw_dir: str) -> list[dict[str, Any]]:
    out = []
    for p in sorted(glob.glob(os.path.join(raw_dir, "manifest-*.json"))):
        try:
            with open(p) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            continue
    return out


def output_paths(out: str, keys: list[tuple[str, int, str]]) -> list[str]:
    """``out`` itself for a single trace; otherwise ``STEM[.FRAMEWORK][.pPID].devN.arrow``,
    with only the parts that tell the traces apart."""
    if len(keys) == 1:
        return [out]
    stem, ext = (out[: -len(".arrow")], ".arrow") if out.endswith(".arrow") else (out, ".arrow")
    frameworks = {k[0] for k in keys}
    counts: dict[tuple[str, str], int] = {}
    for fw, _, dev in keys:
        counts[(fw, dev)] = counts.get((fw, dev), 0) + 1
    paths = []
    for fw, pid, dev in keys:
        parts = [stem]
        if len(frameworks) > 1:
            parts.append(fw)
        if counts[(fw, dev)] > 1:
            parts.append(f"p{pid}")
        parts.append(dev if dev == "cpu" else f"dev{dev}")
        paths.append(".".join(parts) + ext)
    return paths


def convert(raw_dir: str, out: str, *, keep_raw: bool, xla_dump: str | None = None) -> Outcome:
    manifests = read_manifests(raw_dir)
    notes: list[str] = []
    jobs: list[tuple[tuple[str, int, str], dict[str, Any], str]] = []
    quiet: list[str] = []  # processes that imported a framework but never used a device (a launcher)
    for m in manifests:
        for name, st in m.get("frameworks", {}).items():
            if st.get("imported") and st.get("reason"):
                reason = f"{name} (process {m['pid']}): {st['reason']}"
                (quiet if st["reason"].startswith("the script never used") else notes).append(reason)
        for a in m.get("artifacts", []):
            for dev, meta in sorted(a.get("devices", {}).items()):
                jobs.append(((a["framework"], int(m["pid"]), dev), a, os.path.join(raw_dir, meta)))
    if xla_dump is not None:
        # Relative to the traces' directory: the trace and its dump move together.
        rel = os.path.relpath(os.path.abspath(xla_dump), os.path.dirname(os.path.abspath(out)))
        for _, _, meta in jobs:
            _set_json_key(meta, "xla_dump", rel)
    paths = output_paths(out, [k for k, _, _ in jobs])
    traces: list[Captured] = []
    for (key, artifact, meta), dest in zip(jobs, paths):
        fw, pid, dev = key
        raw = os.path.join(raw_dir, artifact["raw"])
        try:
            with open(meta) as f:
                allocator = json.load(f).get("allocator")
            trace = load(raw, meta=meta, allocator=allocator if artifact["kind"] == "xplane" else None)
            info = finalize(trace, dest, None if dev in ("cpu", ALL_DEVICES) else int(dev), raw if keep_raw else None)
        except AllocReplayError as e:
            notes.append(
                f"{fw} (process {pid}, device {dev}): the raw capture could not be imported: {e}"
                + ("" if keep_raw else " (pass --keep-raw to keep the raw files)")
            )
            continue
        traces.append(Captured(dest, fw, dev, pid, info))
    if not traces:
        notes += quiet
    return Outcome(traces, notes, manifests)


def finalize(trace: Trace, dest: str, device: int | None, raw: str | None) -> TraceInfo:
    """Writes ``trace`` to ``dest`` (atomically, by the core's trace writer), keeping only
    ``device``'s events when it holds others, and pointing ``source_path`` at the raw capture
    when it is kept (otherwise at nothing: the raw files are deleted)."""
    others = set(trace.info().devices) - {device}
    patch: dict[str, Any] = {"source_path": raw}
    if raw is None and "meta_path" in (trace.metadata.get("extra") or {}):
        patch["extra"] = {"meta_path": None}
    trace.save(dest, device=device if device is not None and others else None, metadata=patch)
    # Read back through allocreplay: what users will load.
    return load(dest).info()


def _set_json_key(path: str, key: str, value: Any) -> None:
    try:
        with open(path) as f:
            d = json.load(f)
        d[key] = value
        with open(path, "w") as f:
            json.dump(d, f, indent=1)
    except (OSError, ValueError):
        pass


def keep_xla_dump(raw_dump: str, dest: str) -> str | None:
    """Copies the optimized programs of XLA's dump (``*after_optimizations*``: HloProto with the
    buffer assignment, buffer-assignment and live-range text, memory-usage report) to ``dest``;
    the rest of the dump (the programs before optimization) stays in the raw directory."""
    if not os.path.isdir(raw_dump):
        return None
    files = [f for f in sorted(os.listdir(raw_dump)) if "after_optimizations" in f]
    if not files:
        return None
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    for f in files:
        shutil.copy2(os.path.join(raw_dump, f), os.path.join(dest, f))
    return dest
