"""``allocreplay policies``: the policy registry, with every option."""

from __future__ import annotations

import json

import click

from allocreplay import _api


@click.command("policies")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per policy with its options.")
def policies_cmd(as_json: bool) -> None:
    """The policies --policy accepts and their options: type, default, values tune searches."""
    from allocreplay._registry import policy_dict

    infos = _api.policies()
    if as_json:
        click.echo(json.dumps([policy_dict(p) for p in infos]))
        return
    for i, p in enumerate(infos):
        if i:
            click.echo("")
        click.echo(f"{p.name}: {p.summary}")
        click.echo(f"  models {p.models}")
        if not p.options:
            continue
        rows = [[o.name, o.type, ("(" + o.default + ")") if o.unset else o.default, ", ".join(o.search) or "-", o.help] for o in p.options]
        # Every column left-aligned (help text reads badly right-aligned).
        header = ["option", "type", "default", "searched", "help"]
        widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header, *rows]]
        lines.insert(1, "  ".join("-" * w for w in widths[:-1]) + "  ----")
        for line in lines:
            click.echo("  " + line)
