"""``allocreplay fit``: the command line of :func:`allocreplay.fit`."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING

import click

from allocreplay import _api
from allocreplay.cli._common import gib, table

if TYPE_CHECKING:
    from allocreplay._fit import FitResult

EPILOG = """\b
Examples:
  allocreplay fit --device a100-40gb --vary batch_size=1:1024 -- python train.py --batch-size {batch_size}
  allocreplay fit --capacity 24GiB --vary seq_len=128:16384 --step 128 -- python train.py --seq {seq_len}
  allocreplay fit --device h100-80gb --vary seq_len=1024,2048,4096 --vary batch_size=1:256 -- python train.py --seq {seq_len} --bs {batch_size}
  allocreplay fit --device a100-80gb --world-size 2,4,8 --vary batch_size=1:256 -- python train_fsdp.py --bs {batch_size}
"""


def _short(label: str) -> str:
    return label.replace("PYTORCH_CUDA_ALLOC_CONF=", "")


def _candidates_table(result: FitResult) -> str:
    """One row per candidate: for each setting its peak reserved and whether it fits (with the
    allocator's retries), then how long the capture took."""
    t = result.table
    names = result.parameters
    settings = t["setting"].unique(maintain_order=True).to_list()
    heads = {"pytorch": "defaults", "tuned": "tune's best"}
    header = [*names]
    for s in settings:
        header.append(heads.get(s) or _short(_api.policy_env(s) or s))
    header += ["retries", "peak allocated", "capture"]
    rows = []
    for point, g in t.group_by(names, maintain_order=True):
        by = {r["setting"]: r for r in g.iter_rows(named=True)}
        row = [str(v) for v in point]
        for s in settings:
            r = by.get(s)
            if r is None:
                row.append("-")
            elif r["error"]:
                row.append("error")
            else:
                row.append(f"{gib(r['peak_reserved_bytes'])} {'fits' if r['fits'] else 'OOM'}")
        d = by.get("pytorch") or next(iter(by.values()))
        row.append("-" if d["num_alloc_retries"] is None else f"{d['num_alloc_retries']:,}")
        row.append(gib(d["peak_allocated_bytes"]))
        row.append("cached" if d["cached"] else f"{d['capture_seconds']:.1f} s")
        rows.append(row)
    return table(rows, header, text_columns=())


def _env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"{text!r}: expected NAME=VALUE", param_hint="--env")
    return name, value


@click.command("fit", epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--device", metavar="NAME", help="The card to fit on (`allocreplay devices` lists them): its memory less the CUDA context's share. Default: h200."
)
@click.option(
    "-c",
    "--capacity",
    metavar="SIZE",
    help="The limit instead of the device's usable memory: bytes or a size (24GiB), as set_per_process_memory_fraction would set it.",
)
@click.option(
    "--vary",
    "vary",
    multiple=True,
    required=True,
    metavar="NAME=LO:HI",
    help="A parameter to vary: NAME=LO:HI (searched: ×2 up, then bisection) or NAME=V1,V2,... (all tried). Several make a grid; the last is searched at each combination of the others. {NAME} in the command takes the value.",
)
@click.option("--values", metavar="V1,V2,...", help="Try exactly these values of the (last) --vary parameter.")
@click.option("--step", type=click.IntRange(min=1, max=1 << 62), help="Search on multiples of STEP from LO instead of on every integer.")
@click.option(
    "-s",
    "--setting",
    "settings",
    multiple=True,
    metavar="SPEC",
    help="Also replay under this allocator setting (pytorch:expandable_segments:True); repeatable. The defaults are always replayed.",
)
@click.option(
    "--world-size",
    "world_size",
    metavar="N|V1,V2,...",
    help="A distributed job (DDP, FSDP2): capture every rank of an N-rank job at each candidate (capture --no-gpu --world-size N --all-ranks), at each of these world sizes; a candidate fits when every rank fits (docs/distributed.md).",
)
@click.option("--no-tune", is_flag=True, help="Do not search for the best setting (`tune`) at each candidate.")
@click.option("--no-check", is_flag=True, help="Do not try the two values above each first failure (the check that a larger value does not fit either).")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="A variable for the command ({NAME} substituted); repeatable.")
@click.option("--gpu", is_flag=True, help="Capture on this machine's GPU instead of without one (--no-gpu, the default).")
@click.option("--no-gpu", "no_gpu", is_flag=True, help="Capture without a GPU (the default).")
@click.option(
    "--unknown-values",
    type=click.Choice(["zero", "error"]),
    default="zero",
    show_default=True,
    help="Values computed on the GPU that the CPU run reads (.item(), a generate loop's stopping test): read as zeros and counted, or stop with an error.",
)
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=1024), default=1, show_default=True, help="Candidates captured at once.")
@click.option(
    "--backend",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local processes, or tasks on a Ray cluster (pip install 'allocreplay[ray]').",
)
@click.option("--address", metavar="ADDR", help="With --backend ray: the cluster (default: a running one, else a local one).")
@click.option("--cache-dir", metavar="DIR", help="Where captures are kept (default: ~/.cache/allocreplay/fit).")
@click.option("--no-cache", is_flag=True, help="Capture every candidate again.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: answer, largest, rows, frontier, breakdown, monotonicity_breaks.")
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=str),
    metavar="FIT.html",
    help="Also write an HTML page: memory against the value, one curve per setting, the device's line (needs plotly).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND [ARGS]...")
def fit_cmd(
    device: str | None,
    capacity: str | None,
    vary: tuple[str, ...],
    values: str | None,
    step: int | None,
    world_size: str | None,
    settings: tuple[str, ...],
    no_tune: bool,
    no_check: bool,
    env: tuple[str, ...],
    gpu: bool,
    no_gpu: bool,
    unknown_values: str,
    jobs: int,
    backend: str,
    address: str | None,
    cache_dir: str | None,
    no_cache: bool,
    as_json: bool,
    out: str | None,
    quiet: bool,
    command: tuple[str, ...],
) -> None:
    """The largest batch size (sequence length, or any integer COMMAND takes) that fits a GPU,
    found without that GPU: COMMAND is captured once per candidate with --no-gpu ({NAME}
    replaced by the value), and each trace replayed at the device's usable memory under the
    default caching allocator, the --setting's, and the best setting `tune` finds."""
    from allocreplay._fit import fit
    from allocreplay._fit._search import parse_values

    if gpu and no_gpu:
        raise click.UsageError("--gpu and --no-gpu exclude each other")
    if out is not None:
        from allocreplay.report import _plotly

        _plotly()
        from allocreplay import _output

        _output.target(out)  # a missing folder, a directory, a block device: refused now
    env_map = dict(_env_pair(e) for e in env)
    vals = list(parse_values(values, "--values")) if values else None
    sizes = list(parse_values(world_size, "--world-size")) if world_size else None
    started = time.monotonic()

    # A progress line on a terminal (allocreplay.progress.Bar: redrawn in place, erased at the
    # end): what is being captured and how many candidates are done; one line per candidate
    # as it is decided.
    from allocreplay.progress import Bar

    bar = Bar("fit: starting", enabled=False if quiet else None)
    running: list[str] = []
    done = [0]

    def relabel() -> None:
        now = ", ".join(running) or "-"
        bar.label = f"fit: {done[0]} candidate(s) done; capturing {now}"

    def began(vals: dict[str, int]) -> None:
        running.append(", ".join(f"{k}={v}" for k, v in vals.items()))
        relabel()

    def say(msg: str) -> None:
        key = msg.split(":", 1)[0]
        if key in running:
            running.remove(key)
        done[0] += 1
        relabel()
        if not quiet:
            click.echo(("\r\033[K" if bar.enabled else "") + f"fit [{time.monotonic() - started:6.1f} s] {msg}", err=True)

    from allocreplay._fit import default_cache_dir

    try:
        with bar:
            result = fit(
                list(command),
                list(vary),
                device=device,
                capacity=capacity,
                settings=settings,
                tune=not no_tune,
                check=not no_check,
                values=vals,
                step=step,
                env=env_map,
                gpu=gpu,
                unknown_values=unknown_values,
                jobs=jobs,
                backend=backend,
                address=address,
                cache_dir=cache_dir,
                use_cache=not no_cache,
                progress=say,
                started=began,
                world_size=sizes,
            )
    except KeyboardInterrupt:
        kept = os.path.abspath(cache_dir or default_cache_dir())
        click.echo(f"fit: interrupted; the captures that finished are kept in {kept}: the same command goes on from them", err=True)
        sys.exit(130)
    if out is not None:
        from allocreplay._fit._html import write_html

        write_html(result, out, title=" ".join(command))
        click.echo(f"{out}: written", err=True)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
        return
    click.echo(result.answer)
    click.echo(f"limit: {result.capacity_bytes:,} bytes ({gib(result.capacity_bytes)}): {result.capacity_how}")
    t = result.table
    if len(t):
        click.echo("")
        click.echo(_candidates_table(result))
    if result.breakdown is not None and result.breakdown_at is not None:
        at = ", ".join(f"{k}={v}" for k, v in result.breakdown_at.items())
        click.echo("")
        b = result.breakdown
        total = int(b["bytes"].sum())
        click.echo(
            f"why {at} does not fit with the defaults: at its peak, replayed without a limit, it reserves {gib(total)} "
            f"against the limit of {gib(result.capacity_bytes)}; by category:"
        )
        rows = [
            [str(r["category"]), gib(r["bytes"]), "-" if r.get("share") is None else f"{r['share']:.1%}", str(r.get("how_tagged") or "")]
            for r in b.iter_rows(named=True)
        ]
        click.echo(table(rows, ["category", "bytes", "share", "how tagged"], text_columns=(0, 3)))
    for brk in result.monotonicity_breaks:
        lo = ", ".join(f"{k}={v}" for k, v in brk["does_not_fit"].items())
        hi = ", ".join(f"{k}={v}" for k, v in brk["fits"].items())
        click.echo(f"warning: not monotonic ({brk['setting']}): {hi} fits but {lo} does not; the answer stops below the first failure", err=True)
    if result.values_guessed:
        click.echo(
            f"note: a candidate's CPU run read up to {result.values_guessed:,} value(s) computed on the GPU as zeros (--unknown-values zero): "
            "right for a generate loop whose stopping test never fires on a random model, wrong where values steer memory "
            "(mixture-of-experts routing, data-dependent shapes); --unknown-values error stops at the first instead. Where:",
            err=True,
        )
        for w in result.guessed_where[:5]:
            click.echo(f"  {w}", err=True)
        if len(result.guessed_where) > 5:
            click.echo(f"  ... and {len(result.guessed_where) - 5} more lines (--json: guessed_where)", err=True)
    sys.stdout.flush()
