"""``allocreplay replay``: peak memory and OOMs of a trace under allocator policies."""

from __future__ import annotations

import json
import os

import click

from allocreplay import _api
from allocreplay.cli._common import (
    CAPACITY_SOURCES,
    RANGE_NOTE,
    check_capacity,
    check_output,
    count,
    gib,
    has_range,
    load_trace,
    one_stdout,
    peak_range,
    sidecar,
    table,
    write_binary,
)
from allocreplay.cli._options import OUT_PATH, TRACE_PATH, allocator_option, capacity_option, lenient_option, meta_option, policies_option, quiet_option
from allocreplay.progress import replay as _replay_progress
from allocreplay.progress import replay_file as _replay_file_progress


@click.command("replay")
@click.argument("trace", type=TRACE_PATH)
@policies_option
@capacity_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per policy and device.")
@click.option(
    "-o",
    "--output",
    "out",
    type=OUT_PATH,
    metavar="RESULT.arrow",
    help="Also write the summary table as an Arrow IPC file (- for stdout; the table then goes to stderr).",
)
@meta_option
@click.option(
    "--plot",
    "plot_path",
    type=OUT_PATH,
    metavar="FILE.png",
    help="Also draw the memory timeline of every policy (PNG, SVG, PDF by extension; - for PNG on stdout; needs matplotlib).",
)
@allocator_option
@quiet_option
@lenient_option
def replay_cmd(
    trace: str,
    policies: tuple[str, ...],
    capacity: str | None,
    as_json: bool,
    out: str | None,
    meta: str | None,
    plot_path: str | None,
    allocator: str | None,
    quiet: bool,
    lenient: bool,
) -> None:
    """Replay TRACE under allocator policies and report peak memory and OOMs. A policy that
    cannot run on the trace says why in its row's error column; the others still run."""
    specs = list(policies) or ["pytorch"]
    # Everything that can be refused is refused before the trace is loaded and replayed.
    stdout_taken = one_stdout(("-o", out), ("--plot", plot_path), *([("--json", "-")] if as_json else []))
    out_target = check_output(out, trace, meta, sidecar(trace, meta))
    plot_target = check_output(plot_path, trace, meta, sidecar(trace, meta))
    if out_target and plot_target and out_target.kind == plot_target.kind == "file" and out_target.real == plot_target.real:
        raise click.UsageError(f"-o and --plot both write {out}")
    check_capacity(capacity)
    if plot_path:
        from allocreplay.plot import _pyplot

        _pyplot()  # say now, not after the replay, that matplotlib is missing
    if not lenient and _api._streams(trace, specs):
        # A large .arrow file: streamed batch by batch from the file, never loaded whole (issue #12).
        result, info = _replay_file_progress(trace, specs, capacity, placements=False, quiet=quiet)
    else:
        t = load_trace(trace, meta, allocator, quiet, lenient)
        result = _replay_progress(t, specs, capacity, placements=False, quiet=quiet)
        info = t.info()
    summary = result.summary
    if out_target:
        write_binary(out_target, summary.write_ipc)
    if plot_target and plot_path:
        from allocreplay.plot import plot_timeline

        fmt = "png" if plot_path == "-" else (os.path.splitext(plot_path)[1].lstrip(".").lower() or "png")
        write_binary(plot_target, lambda f: plot_timeline(result, f, title=os.path.basename(trace), format=fmt))
        if plot_path != "-":
            click.echo(f"timeline written to {plot_path}", err=True)
    if as_json:
        click.echo(json.dumps(summary.to_dicts()))
        return
    recorded = info.recorded_peak_reserved_bytes
    # A truncated history shows only the end of the run: its peak is that part's (issue 29).
    whose = "the recorded part's" if info.seed_segments or info.seed_allocs else "the recorded run's"
    report = [
        f"{trace}: {info.events:,} events on device(s) {', '.join(map(str, info.devices))}"
        + (f"; {whose} peak reserved: {gib(recorded)}" if recorded is not None else "")
    ]
    report.extend(f"assumed: {a}" for a in info.assumed)
    limits = {(r["capacity_bytes"], r["capacity_source"]) for r in summary.iter_rows(named=True)}
    for cap, source in sorted(limits, key=lambda x: (x[0] or 0, x[1])):
        report.append(f"limit: {'none' if cap is None else f'{cap:,} bytes ({gib(cap)})'} — {CAPACITY_SOURCES.get(source, source)}")
    header = ["policy", "device", "peak allocated", "peak reserved", "device allocs", "retries", "OOMs", "first OOM at event", "seconds"]
    rows = [
        [
            r["policy"],
            str(r["device"]),
            gib(r["peak_allocated_bytes"]),
            peak_range(r),
            count(r["num_device_alloc"]),
            count(r["num_alloc_retries"]),
            count(r["num_ooms"]),
            count(r["first_oom_event"]),
            "-" if r["replay_seconds"] is None else f"{r['replay_seconds']:.3f}",
        ]
        for r in summary.iter_rows(named=True)
    ]
    if any(r.get("pages_migrated") for r in summary.iter_rows(named=True)):
        # Unified memory (`managed`): what oversubscription would move between host and device.
        header.insert(-1, "migrated")
        for row, r in zip(rows, summary.iter_rows(named=True)):
            row.insert(-1, "-" if r["error"] else f"{r['pages_migrated']:,} pages, {gib(r['bytes_migrated'])}")
    text_columns = [0]
    if summary["error"].null_count() < summary.height:
        # A policy that could not run on this trace: its reason, in its own row.
        header.append("error")
        text_columns.append(-1)
        for row, r in zip(rows, summary.iter_rows(named=True)):
            row.append(" ".join((r["error"] or "").split()))
    report.append(table(rows, header, text_columns))
    if has_range(summary.iter_rows(named=True)):
        report.append(RANGE_NOTE)
    unfit = list(dict.fromkeys(r["policy"] for r in summary.iter_rows(named=True) if r["error"] is None and not r["fits"]))
    if unfit:
        # What to do next: the commands that say which limit or which setting would fit.
        report.append(
            f"{', '.join(unfit)} {'does' if len(unfit) == 1 else 'do'} not fit this limit: `allocreplay tune` finds the "
            "settings that would, and where none does, the smallest limit that fits"
        )
    click.echo("\n".join(report), err=stdout_taken)
