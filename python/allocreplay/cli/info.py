"""``allocreplay info``: a trace's counts and recorded peaks."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from allocreplay import _api
from allocreplay.cli._common import gib, load_trace, progress_bar
from allocreplay.cli._options import TRACE_PATH, allocator_option, lenient_option, meta_option, quiet_option


def _device_line(md: dict[str, Any], index: int) -> str:
    for d in md.get("devices", []):
        if d.get("index") == index:
            parts = [p for p in (d.get("name"), d.get("total_memory") and gib(d["total_memory"])) if p]
            if d.get("memory_cap"):
                parts.append(f"cap {gib(d['memory_cap'])}")
            return f"{index} ({', '.join(parts)})" if parts else str(index)
    return str(index)


@click.command("info")
@click.argument("trace", type=TRACE_PATH)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@meta_option
@allocator_option
@lenient_option
@quiet_option
def info_cmd(trace: str, as_json: bool, meta: str | None, allocator: str | None, lenient: bool, quiet: bool) -> None:
    """Counts and recorded peaks of a TRACE."""
    if not lenient and _api._streams(trace, []):
        # A large .arrow file: counted in one pass over the file, never loaded whole.
        with progress_bar(f"reading {os.path.basename(trace)}", quiet=quiet):
            info, md = _api.info_file(trace)
    else:
        t = load_trace(trace, meta, allocator, quiet, lenient)
        info, md = t.info(), t.metadata
    if as_json:
        click.echo(json.dumps(info.to_dict()))
        return
    source = " ".join(p for p in (info.source, info.source_version) if p)
    rows = [
        ("trace", trace),
        ("source", f"{source} (format version {info.format_version})"),
        ("devices", "; ".join(_device_line(md, d) for d in info.devices) or "-"),
        ("events", f"{info.events:,}"),
        ("allocs / frees", f"{info.allocs:,} / {info.frees:,} (free requests {info.free_requests:,})"),
        ("segment events", f"{info.segment_events:,}"),
        ("OOMs recorded", f"{info.ooms:,}"),
        ("streams / pools", f"{info.streams} / {info.pools}"),
    ]
    bfc = md.get("allocator_settings") if md.get("source") == "xplane" else None
    if isinstance(bfc, dict):
        rows.append(
            (
                "allocator",
                f"{bfc.get('allocator_name')} (BFC, limit {gib(bfc.get('memory_limit'))}); recorded peak in use {gib(bfc.get('final_peak_bytes_in_use'))}",
            )
        )
    # A truncated history's seed is the first of what the recording assumes (issue 29).
    rows.extend(("assumed", a) for a in info.assumed)
    rows += [
        ("peak live requested", gib(info.peak_live_requested_bytes)),
        (
            "recorded peak reserved" + (" (the recorded part)" if md.get("seeded") else ""),
            gib(info.recorded_peak_reserved_bytes) if info.recorded_peak_reserved_bytes is not None else "- (no segments recorded)",
        ),
        ("duration", "-" if info.duration_s is None else f"{info.duration_s:.3f} s"),
    ]
    if info.lenient_skipped is not None:
        rows.append(("skipped (--lenient)", f"{info.lenient_skipped:,} events"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
