"""``allocreplay breakdown``: what the memory reserved at the peak is made of."""

from __future__ import annotations

import json

import click

from allocreplay import analysis
from allocreplay.cli._common import check_capacity, gib, load_trace, progress_bar, table
from allocreplay.cli._options import capacity_option, meta_option, policies_option, quiet_option


@click.command("breakdown")
@click.argument("trace")
@policies_option
@capacity_option
@click.option("--at", "at", default="peak", show_default=True, metavar="WHEN", help="peak, peak_allocated, oom, end, or an event index.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per policy, device and category.")
@meta_option
@quiet_option
def breakdown_cmd(trace: str, policies: tuple[str, ...], capacity: str | None, at: str, as_json: bool, meta: str | None, quiet: bool) -> None:
    """What the memory each policy reserves at its peak (or --at) is made of: parameters,
    buffers, gradients, optimizer state, activations and temporaries (for a capture that tags
    its storages: `capture --no-gpu`; otherwise `untagged`), and the allocator's cache and
    fragmentation (reserved bytes no live allocation holds)."""
    check_capacity(capacity)
    t = load_trace(trace, meta, None, quiet)
    frames = []
    for spec in list(policies) or ["pytorch"]:
        with progress_bar(f"replaying under {spec}", quiet):
            frames.append(analysis.breakdown(t, spec, at=int(at) if at.isdigit() else at, capacity=capacity))
    if as_json:
        click.echo(json.dumps([r for f in frames for r in f.to_dicts()]))
        return
    for k, f in enumerate(frames):
        if k:
            click.echo("")
        if f.is_empty():
            click.echo(f"{trace}: {(list(policies) or ['pytorch'])[k]}: no event matches --at {at}")
            continue
        for (device,), g in f.group_by("device", maintain_order=True):
            r0 = g.row(0, named=True)
            when = "" if at.isdigit() else f" ({at})"
            click.echo(f"{trace}: {r0['policy']}, device {device}, at event {r0['event']:,}{when}: {gib(int(g['bytes'].sum()))} reserved")
            rows = [
                [
                    r["category"],
                    gib(r["bytes"]),
                    "-" if r["share"] is None else f"{r['share']:.1%}",
                    f"{r['allocations']:,}",
                    r["how_tagged"],
                ]
                for r in g.iter_rows(named=True)
            ]
            click.echo(table(rows, ["category", "bytes", "share", "allocations", "how tagged"], text_columns=(0, 4)))
