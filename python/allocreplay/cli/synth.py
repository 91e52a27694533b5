"""``allocreplay synth``: a long trace made from a real one, for benchmarks."""

from __future__ import annotations

import click

from allocreplay import _api, _output
from allocreplay.cli._common import load_trace, output_beside
from allocreplay.cli._options import meta_option


@click.command("synth")
@click.argument("trace")
@click.option(
    "--tile",
    "n",
    type=click.IntRange(min=1, max=2**32 - 1),
    required=True,
    metavar="N",
    help="Repeat the trace N times (fresh allocation ids, shifted addresses and times).",
)
@click.option("-o", "--output", "out", required=True, metavar="OUT.arrow", help="Where to write the long trace.")
@meta_option
def synth_cmd(trace: str, n: int, out: str, meta: str | None) -> None:
    """A long trace made from a real one, for benchmarks: TRACE repeated N times."""
    target = output_beside(out, trace, meta)
    t = load_trace(trace, meta)
    # Written batch by batch as it is made: a tile of any length (100 M events) in the memory of
    # one batch.
    with _output.output_path(target) as tmp:
        events = _output.interruptible(_api.tile_file, t, n, tmp)
    click.echo(f"{out}: {events:,} events ({n} x {len(t):,} from {trace})", err=True)
