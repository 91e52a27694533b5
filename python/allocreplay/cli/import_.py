"""``allocreplay import``: a raw capture into the canonical ``.arrow`` trace."""

from __future__ import annotations

import click

from allocreplay.cli._common import check_output, load_trace, save_trace, sidecar
from allocreplay.cli._options import OUT_PATH, TRACE_PATH, allocator_option, lenient_option, quiet_option


@click.command("import")
@click.argument("src", type=TRACE_PATH)
@click.option("-o", "--output", "out", type=OUT_PATH, required=True, metavar="OUT.arrow", help="Where to write the trace (Arrow IPC; - for stdout).")
@click.option(
    "--meta",
    type=click.Path(dir_okay=False, path_type=str),
    metavar="JSON",
    help="Capture metadata (total memory, memory cap); default: NAME.json beside NAME.pickle.xz.",
)
@allocator_option
@lenient_option
@quiet_option
def import_cmd(src: str, out: str, meta: str | None, allocator: str | None, lenient: bool, quiet: bool) -> None:
    """Import a raw capture SRC into the canonical .arrow trace format."""
    target = check_output(out, src, meta, sidecar(src, meta))
    assert target is not None
    trace = load_trace(src, meta, allocator, quiet, lenient)
    save_trace(trace, target)
    info = trace.info()
    click.echo(f"{out}: {info.events:,} events ({info.allocs:,} allocs, {info.frees:,} frees) from {src}", err=True)
