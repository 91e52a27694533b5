"""``allocreplay validate``: a trace replayed under its recorded settings, decision by decision
against what the real allocator did."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import click

from allocreplay._api import BfcValidationReport, ValidationReport, validate_reports, validation_dict
from allocreplay.cli._common import CAPACITY_SOURCES, gib, load_trace
from allocreplay.cli._options import TRACE_PATH, allocator_option, lenient_option, meta_option, quiet_option


@click.command("validate")
@click.argument("trace", type=TRACE_PATH)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (several devices: ok, and one object per device under devices).")
@meta_option
@allocator_option
@lenient_option
@click.option(
    "--no-addresses",
    is_flag=True,
    help="Place new segments in the modelled CUDA driver address space instead of at the recorded "
    "addresses, as every what-if replay does (docs/driver-address-space.md); compares peaks, "
    "retries, OOMs and segment events.",
)
@quiet_option
def validate_cmd(trace: str, as_json: bool, meta: str | None, allocator: str | None, lenient: bool, no_addresses: bool, quiet: bool) -> None:
    """Replay TRACE under the settings and memory cap it recorded and compare, decision by
    decision, with what the real allocator did. Exit code 1 when the replay differs."""
    reports = validate_reports(load_trace(trace, meta, allocator, quiet, lenient), no_addresses=no_addresses)
    ok = all(r.ok for r in reports)
    if as_json:
        click.echo(json.dumps(validation_dict(reports)))
    else:
        for r in reports:
            if len(reports) > 1:
                click.echo(f"device {r.device}:")
            _print_validation(r)
        click.echo("OK: the replay reproduces the recorded decisions" if ok else "DIFFERENT: see the rows above")
    if not ok:
        sys.exit(1)


def _pair(rec: int | None, rep: int, fmt: Callable[[int], str] = lambda x: f"{x:,}", unit: str = "") -> str:
    if rec is None:
        return f"{fmt(rep)} (not recorded)"
    if rec == rep:
        return f"{fmt(rep)} = recorded {fmt(rec)}"
    # Rounded GiB of a near miss read alike ("2.25 GiB ≠ recorded 2.25 GiB"): the difference is
    # given exactly, and relative to the recorded value.
    diff = f"{rep - rec:+,}{unit}" + (f", {(rep - rec) / rec:+.3%}" if rec else "")
    return f"{fmt(rep)} ≠ recorded {fmt(rec)} ({diff})"


def _print_validation(r: ValidationReport | BfcValidationReport) -> None:
    rows: list[tuple[str, str]] = []
    if isinstance(r, BfcValidationReport):
        # A BFC trace (TensorFlow / JAX profiler capture): every event's chunk and bytes in use.
        rows.append(("allocator", f"{r.allocator} replayed as {r.policy} (settings {r.settings_source})"))
        rows.append(("chunks as recorded", f"{r.chunk_match:.4%} of {r.events:,} events"))
        rows.append(("bytes in use as recorded", f"{r.in_use_match:.4%} of {r.events:,} events"))
        rows.append(("peak in use", _pair(r.peak_in_use_recorded, r.peak_in_use_replayed, gib, " bytes")))
        if r.pool_bytes_recorded is not None:
            rows.append(("pool bytes", _pair(r.pool_bytes_recorded, r.pool_bytes_replayed, gib, " bytes")))
        rows.append(("allocations at the recorded address", f"{r.address_match:.4%} of {r.allocs:,}"))
    else:
        if r.settings_assumed:
            rows.append(("allocator settings", r.settings_assumed))
        rows.extend(("assumed", a) for a in r.assumed if a != r.settings_assumed)
        limit = r.device_limit
        rows.append(("limit", f"{'none' if limit is None else f'{limit:,} bytes'} — {CAPACITY_SOURCES.get(r.capacity_source, r.capacity_source)}"))
        if r.no_addresses:
            rows.append(("segment addresses", "modelled driver address space (--no-addresses)"))
            rows.extend(("capture notes", n) for n in r.address_notes)
        else:
            rows.append(("allocations at the recorded address", f"{r.address_match:.4%} of {r.allocs:,}"))
        rows.append(
            (
                "segment events",
                ("identical" if r.segment_events_match else f"differ from #{r.first_segment_mismatch}")
                + f" ({r.segment_events_recorded:,} recorded, {r.segment_events_replayed:,} replayed)",
            )
        )
        rows.append(("peak reserved", _pair(r.peak_reserved_recorded, r.peak_reserved_replayed, gib, " bytes")))
        rows.append(("peak allocated", _pair(r.peak_allocated_recorded, r.peak_allocated_replayed, gib, " bytes")))
        rows.append(("alloc retries", _pair(r.num_alloc_retries_recorded, r.num_alloc_retries_replayed)))
        rows.append(("OOMs", _pair(r.num_ooms_recorded, r.num_ooms_replayed)))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"  {k:<{width}}  {v}")
