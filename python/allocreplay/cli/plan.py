"""``allocreplay plan``: XLA's buffer assignment of each program of a dump, and ours."""

from __future__ import annotations

import json

import click

from allocreplay import _output
from allocreplay._api import plan as _plan
from allocreplay._api import xla_runtime
from allocreplay.cli._common import check_output, gib, one_stdout, save_trace, table
from allocreplay.cli._options import OUT_PATH


@click.command("plan")
@click.argument("dump_dir", type=click.Path(file_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per program.")
@click.option(
    "--runtime",
    "runtime_out",
    type=OUT_PATH,
    metavar="OUT.arrow",
    help="Also write the allocations the JAX runtime makes running a program (arguments; per call the outputs and the temp arena), to replay under jax/bfc policies.",
)
@click.option("--program", metavar="NAME", help="With --runtime: the program (a substring of its name; default the largest temp arena).")
@click.option("--calls", type=click.IntRange(min=1, max=10_000_000), default=3, show_default=True, help="With --runtime: how many calls of the program.")
def plan_cmd(dump_dir: str, as_json: bool, runtime_out: str | None, program: str | None, calls: int) -> None:
    """XLA's buffer assignment of each program in DUMP_DIR (XLA_FLAGS=--xla_dump_to=DUMP_DIR
    --xla_dump_hlo_as_proto): the recorded preallocated-temp size, ours (XLA's heap planner
    replayed from the dump), the max-live lower bound, arguments and outputs."""
    stdout_taken = one_stdout(("--runtime", runtime_out), *([("--json", "-")] if as_json else []))
    runtime_target = check_output(runtime_out)
    _output.check_input(dump_dir)
    plans = _output.interruptible(_plan, dump_dir)
    if runtime_target:
        save_trace(_output.interruptible(xla_runtime, dump_dir, program, calls), runtime_target)
        if runtime_out != "-":
            click.echo(f"runtime trace ({calls} calls) written to {runtime_out}", err=True)
    if as_json:
        click.echo(json.dumps(plans.to_dicts()))
        return
    header = ["program", "recorded temp", "planned temp", "lower bound", "arguments", "outputs"]
    rows = [
        [
            r["program"],
            gib(r["recorded_temp_bytes"]),
            gib(r["planned_temp_bytes"]),
            gib(r["lower_bound_bytes"]),
            gib(r["argument_bytes"]),
            gib(r["output_bytes"]),
        ]
        for r in plans.iter_rows(named=True)
    ]
    click.echo(table(rows, header), err=stdout_taken)
