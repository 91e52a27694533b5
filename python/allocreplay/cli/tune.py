"""``allocreplay tune``: the allocator settings that make traces fit, best first."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

import click

from allocreplay import analysis
from allocreplay._api import Trace
from allocreplay._tune import BACKENDS, FRAMEWORKS, OBJECTIVES, framework_of, grid_size, search_space, tune
from allocreplay.cli._common import CAPACITY_SOURCES, check_capacity, count, gib, load_trace, smallest_limits, table
from allocreplay.cli._options import fit_in_capacity_option, meta_option


class _Bar:
    """A progress bar on stderr for long sweeps, only when stderr is a terminal."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.on = sys.stderr.isatty()
        self.start = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if not self.on:
            return
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} settings, {time.monotonic() - self.start:5.1f} s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.on:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


@click.command("tune")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@fit_in_capacity_option
@click.option("--framework", type=click.Choice(FRAMEWORKS), help="Whose settings to search; default: the framework that recorded the first trace.")
@click.option("--objective", type=click.Choice(OBJECTIVES), default="peak_reserved", show_default=True, help="What to minimise among the settings that fit.")
@click.option(
    "--budget",
    type=click.IntRange(min=1, max=2**32 - 1),
    default=256,
    show_default=True,
    metavar="N",
    help="At most N settings: the whole grid if it is smaller, else a seeded sample.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random sample.")
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="local",
    show_default=True,
    help="local: all cores here; ray: a Ray cluster (pip install 'allocreplay[ray]').",
)
@click.option("--address", metavar="ADDR", help="With --backend ray: the cluster (default: a running one, else a local one).")
@click.option("--threads", type=click.IntRange(min=0, max=65536), default=0, help="Local backend: worker threads (0: one per core).")
@click.option("--top", type=click.IntRange(min=1, max=2**32 - 1), default=10, show_default=True, help="Rows of the table to print.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of every setting, best first.")
@meta_option
def tune_cmd(
    traces: tuple[str, ...],
    capacity: str | None,
    framework: str | None,
    objective: str,
    budget: int,
    seed: int,
    backend: str,
    address: str | None,
    threads: int,
    top: int,
    as_json: bool,
    meta: str | None,
) -> None:
    """Find the allocator settings that make TRACE... fit in --capacity (on every trace), with
    the least memory and fewest device calls, and print them as the text to paste
    (PYTORCH_CUDA_ALLOC_CONF=..., TF_FORCE_GPU_ALLOW_GROWTH=..., XLA_PYTHON_CLIENT_...)."""
    check_capacity(capacity)
    loaded = [load_trace(t, meta) for t in traces]
    fw = framework or framework_of(loaded[0], traces[0])
    specs = search_space(fw, budget, seed)
    bar = _Bar("tune")
    try:
        ranked = tune(loaded, capacity, objective=objective, backend=backend, address=address, threads=threads, specs=specs, progress=bar)
    finally:
        bar.close()
    if as_json:
        keys = ["policy", "env", "fits", "peak_reserved_bytes", "margin_bytes", "num_alloc_retries", "num_ooms", "device_calls", "pareto", "is_default", "rank"]
        keys.append("error")  # why a setting cannot run (null: it ran)
        click.echo(json.dumps(ranked.select(keys).to_dicts()))
        return
    grid = grid_size(fw)
    how = "the whole grid" if len(specs) >= grid else f"{len(specs)} of a grid of {grid:,} (seed {seed})"
    events = sum(len(t) for t in loaded)
    click.echo(f"{', '.join(traces)}: {events:,} events; {_tune_limits(loaded, traces, capacity)}; {fw} settings: {how}; objective {objective}")
    d = ranked.filter(ranked["is_default"])
    if len(d):
        r = d.row(0, named=True)
        if r["error"] is not None:
            click.echo(f"defaults: cannot run: {' '.join(r['error'].split())}")
        else:
            click.echo(
                f"defaults: peak reserved {gib(r['peak_reserved_bytes'])}, margin {_margin(r['margin_bytes'])}, retries {r['num_alloc_retries']:,}, "
                f"OOMs {r['num_ooms']:,}, device calls {r['device_calls']:,}{'' if r['fits'] else ' - does NOT fit'}"
            )
    header = ["#", "env (paste this)", "fits", "peak reserved", "margin", "vs defaults", "retries", "OOMs", "device calls", "pareto"]
    shown = ranked.head(top)
    # A setting that cannot run (a policy's error on a trace) is ranked last, with its reason.
    failed = shown["error"].null_count() < shown.height
    if failed:
        header.append("why it cannot run")
    rows = [
        [
            str(r["rank"]),
            r["env"] or "(defaults)",
            "yes" if r["fits"] else "no",
            gib(r["peak_reserved_bytes"]),
            _margin(r["margin_bytes"]),
            _delta(r["peak_vs_default_bytes"]),
            count(r["num_alloc_retries"]),
            count(r["num_ooms"]),
            count(r["device_calls"]),
            "*" if r["pareto"] else "",
            *([" ".join((r["error"] or "").split())] if failed else []),
        ]
        for r in shown.iter_rows(named=True)
    ]
    click.echo(table(rows, header, text_columns=(1, 9, 10) if failed else (1, 9)))
    best = ranked.row(0, named=True)
    if best["fits"]:
        click.echo(f"best: {best['env'] or '(the defaults)'}   # replay --policy '{best['policy']}'")
    elif best["error"] is not None:
        click.echo(f"no setting can run: {' '.join(best['error'].split())}")
    else:
        click.echo("no setting fits: every one runs out of memory on at least one trace")
        found = [("#1 (the defaults)" if best["is_default"] else "#1", str(best["policy"]))]
        if d.height and not best["is_default"]:
            found.append(("the defaults", str(d["policy"][0])))
        click.echo(smallest_limits(loaded, capacity, found))
    failures = ranked.filter(ranked["error"].is_not_null())
    if failures.height and failures.height > (failures["rank"] <= top).sum():
        click.echo(f"{failures.height:,} settings cannot run on these traces (the last ranks; --json lists them with their reasons)")


def _tune_limits(loaded: list[Trace], names: Sequence[str], capacity: str | None) -> str:
    """The limits the sweep replays each trace at (analysis.limits: the core's rule, as every
    command), with where they come from."""
    seen: dict[tuple[int | None, str], list[str]] = {}
    for t, name in zip(loaded, names):
        for _, cap, source in analysis.limits(t, capacity).iter_rows():
            seen.setdefault((cap, source), []).append(name)
    parts = []
    for (cap, source), where in seen.items():
        text = f"capacity {'unlimited' if cap is None else gib(cap)} — {CAPACITY_SOURCES.get(source, source)}"
        parts.append(text if len(seen) == 1 else f"{text} ({', '.join(dict.fromkeys(where))})")
    return "; ".join(parts)


def _margin(n: int | None) -> str:
    if n is None:
        return "-"
    return gib(n) if n >= 0 else "-" + gib(-n)


def _delta(n: int | None) -> str:
    if n is None:
        return "-"
    if n == 0:
        return "0"
    return ("+" if n > 0 else "-") + gib(abs(n))
