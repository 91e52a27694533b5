"""``allocreplay devices``: the device catalogue."""

from __future__ import annotations

import json

import click


@click.command("devices")
@click.argument("keys", nargs=-1, metavar="[DEVICE]...")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per device.")
def devices_cmd(keys: tuple[str, ...], as_json: bool) -> None:
    """The device catalogue: each card's memory as PyTorch sees it, the share the CUDA context
    and libraries take, what is usable (where cudaMalloc starts failing), and where each number
    comes from. DEVICE: only these (h200, a100-80gb, rtx4090...)."""
    from allocreplay._catalogue import device_rows

    try:
        rows = device_rows(keys)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if as_json:
        click.echo(json.dumps(rows))
        return
    header = ["key", "name", "total", "context", "usable", "usable GiB", "cc", "SMs"]
    sizes = ("total_bytes", "context_bytes", "usable_bytes")
    table = [[r["key"], r["name"], *(f"{r[c]:,}" for c in sizes), f"{r['usable_gib']:.2f}", r["compute_capability"], str(r["sms"])] for r in rows]
    widths = [max(len(row[c]) for row in [header, *table]) for c in range(len(header))]
    right = {2, 3, 4, 5, 7}
    for row in [header, *table]:
        click.echo("  ".join(cell.rjust(w) if c in right else cell.ljust(w) for c, (cell, w) in enumerate(zip(row, widths))).rstrip())
    click.echo("")
    click.echo("Bytes. total: torch.cuda.get_device_properties(0).total_memory; usable = total - context.")
    for r in rows:
        click.echo(f"total of {r['key']}: {r['source_total']}")
    contexts: dict[str, list[str]] = {}
    for r in rows:
        contexts.setdefault(r["source_context"], []).append(r["key"])
    for text, ks in contexts.items():
        click.echo(f"context of {', '.join(ks)}: {text}")
