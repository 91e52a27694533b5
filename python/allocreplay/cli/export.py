"""``allocreplay export-snapshot`` and ``export-perfetto``: a simulated allocator for viewers
people already use."""

from __future__ import annotations

import click

from allocreplay.cli._common import check_capacity, load_trace, output_beside, progress_bar
from allocreplay.cli._options import capacity_option, meta_option, policies_option, quiet_option
from allocreplay.progress import replay as _replay_progress


@click.command("export-snapshot")
@click.argument("trace")
@click.option("-p", "--policy", "policy", default="pytorch", show_default=True, metavar="SPEC", help="The policy whose decisions to export.")
@capacity_option
@click.option("-o", "--output", "out", required=True, metavar="SIM.pickle", help="The PyTorch memory snapshot to write.")
@meta_option
@quiet_option
def export_snapshot_cmd(trace: str, policy: str, capacity: str | None, out: str, meta: str | None, quiet: bool) -> None:
    """Write what POLICY would have done on TRACE as a PyTorch memory snapshot (pickle):
    open it in pytorch.org/memory_viz or torch.cuda._memory_viz. Addresses are the simulated
    allocator's; stacks and times are the trace's."""
    from allocreplay.export import write_snapshot

    check_capacity(capacity)
    output_beside(out, trace, meta)  # refused now, before the work
    t = load_trace(trace, meta, None, quiet)
    with progress_bar(f"replaying under {policy}", quiet):
        snap = write_snapshot(t, policy, out, capacity=capacity)
    entries = sum(len(d) for d in snap["device_traces"])
    click.echo(f"{out}: {entries:,} trace entries and {len(snap['segments']):,} segments of {policy}", err=True)


@click.command("export-perfetto")
@click.argument("trace")
@policies_option
@capacity_option
@click.option("-o", "--output", "out", required=True, metavar="MEMORY.json", help="The Chrome trace-event JSON to write.")
@click.option(
    "--points",
    type=click.IntRange(min=0, max=2**32 - 1),
    default=20000,
    show_default=True,
    help="Points per policy and device (each the maximum of its events; 0: every event).",
)
@meta_option
@quiet_option
def export_perfetto_cmd(trace: str, policies: tuple[str, ...], capacity: str | None, out: str, points: int, meta: str | None, quiet: bool) -> None:
    """Write allocated and reserved memory over time of each policy as Chrome trace-event
    JSON counters: open in ui.perfetto.dev or chrome://tracing."""
    from allocreplay.export import write_chrome_trace

    specs = list(policies) or ["pytorch"]
    check_capacity(capacity)
    output_beside(out, trace, meta)  # refused now, before the work
    t = load_trace(trace, meta, None, quiet)
    result = _replay_progress(t, specs, capacity, timeline_points=points, placements=False, quiet=quiet)
    data = write_chrome_trace(result, out)
    counters = sum(1 for e in data["traceEvents"] if e["ph"] == "C")
    click.echo(f"{out}: {counters:,} counter events", err=True)
    for f in data["otherData"].get("policies_that_cannot_run", []):
        # Not dropped: in the file as an instant event with its reason, and said here.
        click.echo(f"{out}: {f['policy']} cannot run on device {f['device']} (no counters): {' '.join(f['error'].split())}", err=True)
