"""``allocreplay compare``: policies ranked on a trace, those that fit first."""

from __future__ import annotations

import json

import click

from allocreplay import analysis
from allocreplay.cli._common import CAPACITY_SOURCES, RANGE_NOTE, gib, has_range, peak_range, replayed, smallest_limits, table
from allocreplay.cli._options import capacity_option, meta_option, policies_option, quiet_option

# Policies `compare` finds the smallest fitting limit of, where none fits (a bisection of about
# a dozen replays each).
_LIMITS_FOR = 4


@click.command("compare")
@click.argument("trace")
@policies_option
@capacity_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per policy and device, best first.")
@meta_option
@quiet_option
def compare_cmd(trace: str, policies: tuple[str, ...], capacity: str | None, as_json: bool, meta: str | None, quiet: bool) -> None:
    """Rank policies on TRACE: those that fit first, then by peak reserved memory: peak
    reserved and allocated, efficiency (allocated / reserved at the peaks), device calls,
    retries, and the first OOM with the call site that made the request. A policy that
    cannot run on TRACE is ranked last, with its reason."""
    t, result = replayed(trace, policies, capacity, meta, quiet)
    ranked = analysis.compare(t, result)
    if as_json:
        click.echo(json.dumps(ranked.to_dicts()))
        return
    header = ["rank", "policy", "device", "peak reserved", "peak allocated", "efficiency", "device calls", "retries", "verdict", "first OOM"]
    failed = ranked["error"].null_count() < ranked.height
    if failed:
        header.append("why it cannot run")
    rows = []
    for r in ranked.iter_rows(named=True):
        if r["error"] is not None:
            rows.append([str(r["rank"]), r["policy"], str(r["device"]), *["-"] * 5, "cannot run", "-", " ".join(r["error"].split())])
            continue
        oom = "-"
        if r["first_oom_event"] is not None:
            oom = f"event {r['first_oom_event']:,}: {gib(r['first_oom_requested_bytes'])}" + (
                f" at {r['first_oom_call_site']}" if r["first_oom_call_site"] else ""
            )
        rows.append(
            [
                str(r["rank"]),
                r["policy"],
                str(r["device"]),
                peak_range(r),
                gib(r["peak_allocated_bytes"]),
                "-" if r["efficiency"] is None else f"{r['efficiency']:.1%}",
                f"{r['device_calls']:,}",
                f"{r['num_alloc_retries']:,}",
                "OOM" if r["oom"] else ("may OOM" if not r["fits"] else "fits"),
                oom,
                *([""] if failed else []),
            ]
        )
    # The limit every row ran under, and where it comes from (analysis.limits: what `replay`
    # and `report` say too).
    limits = sorted({(r["capacity_bytes"], r["capacity_source"]) for r in ranked.iter_rows(named=True)}, key=lambda x: (x[0] or 0, x[1]))
    caps = "; ".join(f"{'unlimited' if c is None else gib(c)} — {CAPACITY_SOURCES.get(src, src)}" for c, src in limits)
    click.echo(f"{trace}: capacity {caps}")
    # Names and the OOM's call site read better left-aligned, numbers right-aligned.
    click.echo(table(rows, header, text_columns=(0, 1, 8, 9, 10) if failed else (0, 1, 8, 9)))
    if has_range(ranked.iter_rows(named=True)):
        click.echo(RANGE_NOTE)
    ran = ranked.filter(ranked["error"].is_null())
    if ran.height and not ran["fits"].any():
        # None fits: at which limit each would (the first few, in rank order).
        shown = list(dict.fromkeys(ran["policy"]))[:_LIMITS_FOR]
        click.echo(smallest_limits([t], capacity, [(p, p) for p in shown]))
