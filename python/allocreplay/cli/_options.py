"""The options several commands share, with their help texts: each defined once here.

The default limit a replay runs under (``replay::metadata_limit`` in the core, read back by
``analysis.limits``) is described once, in :data:`DEFAULT_CAPACITY`: every ``--capacity`` help
says it in these words.
"""

from __future__ import annotations

import click

from allocreplay import _api
from allocreplay.capture._devices import H200_CONTEXT_BYTES

# A trace to read: a file, or a profiler's directory; missing files are the core's to report
# (with the path, as every error does).
TRACE_PATH = click.Path(dir_okay=True, path_type=str)
# A file to write; "-" is stdout.
OUT_PATH = click.Path(dir_okay=False, allow_dash=True, path_type=str)

# What --capacity takes (the core's `Capacity`: bytes, a size, or a fraction resolved against
# the device's recorded memory).
CAPACITY_FORMS = "bytes, a size (80GiB, 81920MiB, 16GB) or a fraction of the trace's device memory (0.5)"
# The one rule every replay, analysis and command applies without --capacity
# (`replay::metadata_limit`): a PyTorch trace's recorded cap, else for PyTorch the device's memory
# less the CUDA context's share (`replay::PYTORCH_CUDA_CONTEXT_BYTES`, the catalogue's H200
# measurement), else the device's memory, else no limit.
DEFAULT_CAPACITY = (
    "the limit the recorded run had: for a PyTorch trace, its set_per_process_memory_fraction cap when it recorded one, "
    f"else the device's memory minus the CUDA context's share ({H200_CONTEXT_BYTES:,} bytes, measured on an H200); "
    "for other traces, the device's total memory; unlimited when the trace records no device memory. "
    "Every output says which (capacity_source)"
)


def capacity_help(what: str) -> str:
    """``--capacity``'s help: ``what`` the limit is, the forms it takes, and the default."""
    return f"{what}: {CAPACITY_FORMS}. Default: {DEFAULT_CAPACITY}."


CAPACITY_HELP = capacity_help("Device memory available")

capacity_option = click.option("-c", "--capacity", metavar="SIZE", help=CAPACITY_HELP)
# `tune`: the limit every setting must fit in, on every trace.
fit_in_capacity_option = click.option("-c", "--capacity", metavar="SIZE", help=capacity_help("Device memory to fit in (on every trace)"))

policies_option = click.option(
    "-p",
    "--policy",
    "policies",
    multiple=True,
    metavar="SPEC",
    help=f"Policy to replay under, NAME[:OPTIONS] (repeatable; default pytorch). Known: {', '.join(_api.POLICY_NAMES)}.",
)

meta_option = click.option("--meta", type=click.Path(dir_okay=False, path_type=str), metavar="JSON", help="Capture metadata for a raw source (see `import`).")

allocator_option = click.option(
    "--allocator",
    metavar="NAME",
    help="Profiler captures (.xplane.pb): the BFC allocator whose events to import (GPU_0_bfc, xla_gpu_host_bfc...); default: the device allocator with most events.",
)

lenient_option = click.option(
    "--lenient",
    is_flag=True,
    help="Skip events that break the trace's semantics (double free, free of an unknown id, backwards time, undeclared device or pool) instead of refusing the trace; the count is reported.",
)

quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
