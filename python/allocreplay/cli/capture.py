"""``allocreplay capture``: run a command with allocation recording on, and write its trace."""

from __future__ import annotations

import sys

import click


@click.command("capture", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=str),
    required=True,
    metavar="OUT.arrow",
    help="The trace to write; several devices give OUT_STEM.devN.arrow, one per device.",
)
@click.option(
    "--framework",
    type=click.Choice(["auto", "pytorch", "jax", "tf"]),
    default="auto",
    show_default=True,
    help="What to record: auto records whichever framework the command uses.",
)
@click.option(
    "--max-entries",
    type=click.IntRange(min=1, max=2**63 - 1),
    default=1_000_000,
    show_default=True,
    metavar="N",
    help="PyTorch: events the allocator's history keeps (the oldest beyond N are dropped; the trace is then seeded from the final state).",
)
@click.option(
    "--stacks",
    type=click.Choice(["python", "all", "none"]),
    default="python",
    show_default=True,
    help="PyTorch: stack of each allocation: Python frames, Python and C++ (slower), or none.",
)
@click.option("--keep-raw", is_flag=True, help="Keep the raw captures (snapshot pickle, profiler directory, XLA dump, metadata .json) in OUT_STEM.raw/.")
@click.option(
    "--no-gpu",
    is_flag=True,
    help="PyTorch without a GPU: cuda tensors are fake (no memory, no compute); the trace holds the requests the GPU run would make (docs/no-gpu.md).",
)
@click.option(
    "--device-memory",
    default=None,
    metavar="SIZE|DEVICE",
    help="--no-gpu: the device torch.cuda reports: a size (80GiB) or h200, h100-80gb, a100-80gb, a100-40gb, l4, rtx4090, v100-32gb. Default: h200.",
)
@click.option(
    "--unknown-values",
    type=click.Choice(["error", "zero"]),
    default="error",
    show_default=True,
    help="--no-gpu: when the program reads a value computed on the GPU (.item(), if t.any(), a generation loop's stopping test): stop with an error naming the line, or read it as zeros (the lines are listed in the trace's metadata).",
)
@click.option(
    "--world-size",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="--no-gpu: run the command as a rank of an N-rank distributed job (torchrun's RANK, WORLD_SIZE, LOCAL_RANK... set); its process group completes collectives without communicating (docs/distributed.md).",
)
@click.option("--rank", type=click.IntRange(min=0), default=None, metavar="R", help="--world-size: the rank to capture (default 0); its trace is device R.")
@click.option("--all-ranks", is_flag=True, help="--world-size: capture every rank, one process each; one trace, device R = rank R.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND [ARGS]...")
def capture_cmd(
    out: str,
    framework: str,
    max_entries: int,
    stacks: str,
    keep_raw: bool,
    no_gpu: bool,
    device_memory: str | None,
    unknown_values: str,
    world_size: int | None,
    rank: int | None,
    all_ranks: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (python train.py ...) unchanged with allocation recording on from its first
    allocation, and write what it recorded as an Arrow trace: PyTorch's allocator history
    (dumped at exit, also after an exception or out-of-memory error), JAX's / TensorFlow's BFC
    events through their profiler (for JAX with XLA's dumps of the compiled programs, kept in
    OUT_STEM.xla_dump/), with the device, memory cap, allocator settings and versions that the
    raw formats lack. With --no-gpu, a PyTorch script runs without a GPU (fake cuda tensors) and
    the trace holds the requests the GPU run would make. Exit code: the command's (2 when
    nothing could be captured)."""
    from allocreplay.capture import _runner

    if not no_gpu and (device_memory is not None or unknown_values != "error"):
        raise click.UsageError("--device-memory and --unknown-values go with --no-gpu")
    if world_size is None and (rank is not None or all_ranks):
        raise click.UsageError("--rank and --all-ranks go with --world-size")
    if world_size is not None and not no_gpu:
        raise click.UsageError("--world-size goes with --no-gpu (a real multi-GPU job: allocreplay capture -o run.arrow -- torchrun ...)")
    if rank is not None and all_ranks:
        raise click.UsageError("--rank and --all-ranks exclude each other")
    ng = {"device": device_memory or "h200", "unknown": unknown_values} if no_gpu else None
    if ng is not None and world_size is not None:
        from allocreplay.capture import _ranks

        ranks = list(range(world_size)) if all_ranks else [rank or 0]
        result = _ranks.run(
            list(command), out, world_size=world_size, ranks=ranks, no_gpu=ng, framework=framework, max_entries=max_entries, stacks=stacks, keep_raw=keep_raw
        )
    else:
        result = _runner.run(list(command), out, framework=framework, max_entries=max_entries, stacks=stacks, keep_raw=keep_raw, no_gpu=ng)
    outcome = result.outcome
    for t in outcome.traces if outcome else []:
        click.echo(t.describe(), err=True)
    for note in outcome.notes if outcome else []:
        click.echo(f"note: {' '.join(note.split())}", err=True)
    for m in result.messages:
        click.echo(" ".join(m.split()), err=True)
    if result.xla_dump:
        click.echo(f"{result.xla_dump}: XLA's optimized programs, with their buffer assignments", err=True)
    if result.raw_dir:
        click.echo(f"{result.raw_dir}: the raw captures", err=True)
    if outcome and outcome.traces and not no_gpu:
        click.echo(f"check it: allocreplay validate {outcome.traces[0].path}", err=True)
    elif outcome and outcome.traces:
        click.echo(f"replay it: allocreplay replay {outcome.traces[0].path} --policy pytorch", err=True)
    if result.exit_code:
        click.echo(f"the command exited with code {result.exit_code}", err=True)
        sys.exit(result.exit_code)
