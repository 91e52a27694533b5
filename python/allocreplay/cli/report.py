"""``allocreplay report``: one self-contained HTML report of a trace under policies."""

from __future__ import annotations

import os

import click

from allocreplay.cli._common import output_beside, progress_bar, replayed
from allocreplay.cli._options import capacity_option, meta_option, policies_option, quiet_option


@click.command("report")
@click.argument("trace")
@policies_option
@capacity_option
@click.option("-o", "--output", "out", required=True, metavar="REPORT.html", help="The HTML file to write (self-contained, opens offline).")
@click.option("--top", type=click.IntRange(min=1, max=2**32 - 1), default=10, show_default=True, help="Call sites shown.")
@meta_option
@quiet_option
def report_cmd(trace: str, policies: tuple[str, ...], capacity: str | None, out: str, top: int, meta: str | None, quiet: bool) -> None:
    """Write one self-contained HTML report of TRACE replayed under the policies: timelines
    on one interactive chart, fragmentation over time, the segment map and the top call sites
    at the peak, the OOM point if any (needs plotly)."""
    from allocreplay.report import _plotly, write_report

    _plotly()  # say now, not after the replay, that plotly is missing
    output_beside(out, trace, meta)  # refused now, before the work
    t, result = replayed(trace, policies, capacity, meta, quiet)
    with progress_bar("writing the report", quiet):
        write_report(t, result, out, title=os.path.basename(trace), capacity=capacity, top=top)
    click.echo(f"report written to {out}", err=True)
