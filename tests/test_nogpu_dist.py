"""`allocreplay capture --no-gpu --world-size N`: the ranks of a DDP or FSDP2 job captured on the
CPU (docs/distributed.md), each rank a device of the trace.

Needs the real torch (as tests/test_nogpu.py: skipped locally without it, FAILS under CI=true).
The expected sizes follow from the models' parameter shapes and the rules of PyTorch's code
(DDP's bucket assignment, FSDP2's padded shards), computed here, not read back from the capture;
the ground truth is real runs: ../shared/traces/pytorch/ddp2gpu__default_rank0/1 (2 x H200, DDP)
and traces/dist/ (one H200: DDP and FSDP2 at world size 1, scripts/dist/one_gpu.sh).
"""

from __future__ import annotations

import json
import lzma
import math
import os
import pickle
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

import allocreplay
from conftest import SHARED_PYTORCH, require_torch_for_module, shared

REPO = Path(__file__).resolve().parent.parent
DIST = REPO / "traces" / "dist"
FSDP2_TOY = REPO / "scripts" / "dist" / "fsdp2_toy.py"


require_torch_for_module("capture --no-gpu")


def fixture(path: Path) -> Path:
    assert path.is_file(), f"missing fixture {path}"
    return path


def capture(cwd: Path, script: Path, *opts: str, out: str = "run.arrow", args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> allocreplay.Trace:
    cmd = [sys.executable, "-m", "allocreplay", "capture", "--no-gpu", *opts, "-o", out, "--", sys.executable, str(script), *args]
    e = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900, env={**e, **(env or {})})
    assert p.returncode == 0, p.stderr[-3000:]
    return allocreplay.load(cwd / out)


def allocs(trace: allocreplay.Trace, device: int) -> list[tuple[int, int]]:
    """(size, stream) of every alloc on ``device``, in order."""
    ev = trace.events
    return [
        (int(s), int(st))
        for a, s, st, d in zip(ev["action"].to_list(), ev["size"].to_list(), ev["stream"].to_list(), ev["device"].to_list())
        if a == "alloc" and d == device
    ]


def peaks(trace: allocreplay.Trace, policy: str) -> dict[int, int]:
    s = allocreplay.replay(trace, policy).summary
    return {int(d): int(p) for d, p in zip(s["device"].to_list(), s["peak_reserved_bytes"].to_list())}


# --- DDP -----------------------------------------------------------------------------------

DDP_SCRIPT = """
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    layers = [torch.nn.Linear(512, 512, bias=False) for _ in range(39)] + [torch.nn.Linear(512, 640, bias=False)]
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers).cuda(), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(4 + rank, 512, device="cuda")  # each rank its own batch
        model(x)[:, :512].square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()
"""


def ddp_buckets(param_bytes_in_ready_order: list[int], first_cap: int = 1 << 20, cap: int = 25 << 20) -> list[int]:
    """reducer.cpp, compute_bucket_assignment_by_size (what Reducer::rebuild_buckets uses after
    the first iteration): parameters in the order their gradients became ready; a bucket closes
    once it holds at least its limit, the first bucket's limit first_bucket_bytes (1 MiB,
    dist._DEFAULT_FIRST_BUCKET_BYTES), then bucket_cap_mb (25)."""
    out, current, limit = [], 0, first_cap
    for b in param_bytes_in_ready_order:
        current += b
        if current >= limit:
            out.append(current)
            current, limit = 0, cap
    if current:
        out.append(current)
    return out


@pytest.mark.parametrize("world_size", [2, 8])
def test_ddp_every_rank_holds_the_reducers_buckets(tmp_path, world_size):
    (tmp_path / "ddp.py").write_text(textwrap.dedent(DDP_SCRIPT))
    trace = capture(tmp_path, tmp_path / "ddp.py", "--world-size", str(world_size), "--all-ranks")
    assert trace.info().devices == list(range(world_size))
    params = [512 * 512 * 4] * 39 + [640 * 512 * 4]  # bytes, in the module's order
    # DistributedDataParallel._ddp_init_helper: before the first iteration one bucket of every
    # parameter (find_unused_parameters=False: bucket_size_limits [sys.maxsize]); it is also the
    # size of _sync_module_states' flattened broadcast (one 250 MiB bucket). After the first
    # backward, the buckets are rebuilt in the order the gradients came: the last layer's first.
    initial = sum(params)
    rebuilt = ddp_buckets(params[::-1])
    assert rebuilt == [640 * 512 * 4, 25 * (1 << 20), 14 * (1 << 20)]
    for rank in range(world_size):
        sizes = Counter(s for s, _ in allocs(trace, rank))
        assert sizes[initial] == 2, f"rank {rank}: the broadcast's flat buffer and the first bucket"
        assert sizes[rebuilt[1]] == 1 and sizes[rebuilt[2]] == 1, f"rank {rank}: the rebuilt buckets"
    # The batches differ by rank: so do the activations, not the buckets.
    assert allocs(trace, 0) != allocs(trace, world_size - 1)


def test_ddp_on_two_h200s_peaks_as_the_real_runs(tmp_path):
    # ../shared/traces/pytorch/ddp2gpu__default_rank0/1: ../shared/capture/torch_multi.py ddp
    # under torchrun on 2 x H200 (each rank its own random batch shapes). The bar: each
    # rank's no-GPU trace replayed under `pytorch` within 3% of its real peak reserved.
    script = SHARED_PYTORCH.parent.parent / "capture" / "torch_multi.py"
    assert script.is_file(), f"missing {script}: shared/ must sit beside the repository"
    trace = capture(tmp_path, script, "--world-size", "2", "--all-ranks", args=("ddp", "--out", str(tmp_path / "real_script_out")))
    got = peaks(trace, "pytorch")
    for rank in (0, 1):
        meta = json.loads(shared(f"ddp2gpu__default_rank{rank}.json").read_text())
        real = int(meta["memory_stats_per_device"][str(rank)]["reserved_bytes.all.peak"])
        assert abs(got[rank] - real) <= 0.03 * real, (rank, got[rank], real)


@pytest.mark.parametrize("conf", ["default", "expandable"])
def test_ddp_at_world_size_1_peaks_as_the_real_one_gpu_run(tmp_path, conf):
    # traces/dist/ddp1gpu__CONF_rank0: the same script, torchrun --nproc_per_node 1, one H200
    # (scripts/dist/one_gpu.sh). The bar: within 2% of the real peak reserved.
    script = SHARED_PYTORCH.parent.parent / "capture" / "torch_multi.py"
    assert script.is_file(), f"missing {script}: shared/ must sit beside the repository"
    meta = json.loads(fixture(DIST / f"ddp1gpu__{conf}_rank0.json").read_text())
    real = int(meta["memory_stats_per_device"]["0"]["reserved_bytes.all.peak"])
    trace = capture(tmp_path, script, "--world-size", "1", args=("ddp", "--out", str(tmp_path / "real_script_out")))
    policy = "pytorch" if conf == "default" else "pytorch:expandable_segments:True"
    got = peaks(trace, policy)[0]
    assert abs(got - real) <= 0.02 * real, (got, real)


# --- FSDP2 ---------------------------------------------------------------------------------

# scripts/dist/fsdp2_toy.py's blocks: (dim 0, the rest) of each parameter, in registration order.
BLOCK_PARAMS = [(1024, 256), (1024, 1), (256, 1024), (256, 1), (37, 256), (256, 1), (256, 1)]
BLOCKS, STEPS = 4, 3


def padded_shard_numel(world_size: int) -> int:
    """_fsdp_param.py, FSDPParam._init_sharded_param: dim 0 chunked over the ranks and every
    shard padded to the first chunk's rows (ceil(d0 / N))."""
    return sum(math.ceil(d0 / world_size) * rest for d0, rest in BLOCK_PARAMS)


def test_fsdp2_at_world_size_1_requests_what_the_real_one_gpu_run_requested(tmp_path):
    # traces/dist/fsdp2toy1gpu__default: scripts/dist/fsdp2_toy.py on one H200 under
    # torchrun, the allocator's history recorded (scripts/dist/record.py). Its requests include
    # what FSDP2 does to memory: the unsharded parameters freed and re-allocated by resizing
    # their storages, the reduce-scatter buffers, the copy kernels' metadata on the device,
    # the barrier's tensors. The no-GPU run must request the same sizes in the same order.
    with lzma.open(fixture(DIST / "fsdp2toy1gpu__default.pickle.xz")) as f:
        real = [(e["action"], int(e["size"])) for e in pickle.load(f)["device_traces"][0] if e["action"] in ("alloc", "free_requested")]
    trace = capture(tmp_path, FSDP2_TOY, "--world-size", "1")
    ev = trace.events
    got = [(a, int(s)) for a, s in zip(ev["action"].to_list(), ev["size"].to_list()) if a in ("alloc", "free_requested")]
    assert len(real) > 1000
    assert got == real
    for conf, policy in (("default", "pytorch"), ("expandable", "pytorch:expandable_segments:True")):
        real_peak = int(json.loads(fixture(DIST / f"fsdp2toy1gpu__{conf}.json").read_text())["memory_stats"]["reserved_bytes.all.peak"])
        got_peak = peaks(trace, policy)[0]
        assert abs(got_peak - real_peak) <= 0.02 * real_peak, (conf, got_peak, real_peak)


@pytest.mark.parametrize("world_size", [2, 8])
def test_fsdp2_all_gather_and_reduce_scatter_buffers_and_uneven_shards(tmp_path, world_size):
    trace = capture(tmp_path, FSDP2_TOY, "--world-size", str(world_size), "--all-ranks")
    assert trace.info().devices == list(range(world_size))
    # _fsdp_collectives.py, foreach_all_gather: one flat all-gather output of the group's padded
    # shards x the world size, allocated on the all-gather copy-in stream; foreach_reduce: the
    # reduce-scatter input (the padded unsharded gradients: the same bytes) on the current
    # stream and its output (one rank's shard of it) on the reduce-scatter stream.
    gathered = padded_shard_numel(world_size) * 4 * world_size
    scattered = gathered // world_size
    per_rank: dict[int, Counter[int]] = {}
    for rank in range(world_size):
        a = allocs(trace, rank)
        per_rank[rank] = Counter(s for s, _ in a)
        ag_streams = {st for s, st in a if s == gathered and st != 0}
        assert len(ag_streams) == 1, f"rank {rank}: the all-gather outputs on one side stream"
        # forward and backward (reshard_after_forward) unshard every block at every step
        assert sum(1 for s, st in a if s == gathered and st in ag_streams) == 2 * BLOCKS * STEPS
        assert sum(1 for s, st in a if s == gathered and st == 0) == BLOCKS * STEPS, f"rank {rank}: reduce-scatter inputs"
        rs = [st for s, st in a if s == scattered and st not in (0, *ag_streams)]
        assert len(rs) == BLOCKS * STEPS, f"rank {rank}: reduce-scatter outputs on their own stream"
    # Uneven sharding: the 37 rows of each block's `odd` weight are ceil(37 / N) rows on every
    # rank but the last, which holds the rest; AdamW's state (zeros_like of the local shard) and
    # its temporaries follow the local rows, the padded parameter storage does not.
    rows = math.ceil(37 / world_size)
    full, last = rows * 256 * 4, (37 - (world_size - 1) * rows) * 256 * 4
    first, final = per_rank[0], per_rank[world_size - 1]
    assert full != last
    # exp_avg and exp_avg_sq of each block's odd weight at least (and AdamW's foreach temporaries)
    assert first[full] - final[full] >= 2 * BLOCKS
    assert final[last] - first[last] >= 2 * BLOCKS
    for rank in range(1, world_size - 1):
        assert per_rank[rank] == first, f"rank {rank} shards as rank 0 does"
    # The storage tags see through DTensor: every rank's parameters and optimizer state.
    bd = allocreplay.analysis.breakdown(trace)
    for rank in range(world_size):
        got = dict(zip(*bd.filter(bd["device"] == rank).select("category", "bytes").to_dict(as_series=False).values()))
        assert got["parameters"] > 0 and got["optimizer_state"] > 0, (rank, got)


# --- the command line ----------------------------------------------------------------------


def test_one_rank_is_its_device(tmp_path):
    trace = capture(tmp_path, FSDP2_TOY, "--world-size", "4", "--rank", "3")
    assert trace.info().devices == [3]
    nogpu = trace.metadata["extra"]["capture"]["no_gpu"]
    assert (nogpu["rank"], nogpu["world_size"]) == (3, 4)


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (["--world-size", "2", "--rank", "2"], "not a rank of a world of 2"),
        (["--rank", "1"], "--rank and --all-ranks go with --world-size"),
        (["--world-size", "2", "--rank", "0", "--all-ranks"], "exclude each other"),
    ],
)
def test_bad_rank_options_are_one_line(tmp_path, opts, message):
    cmd = [sys.executable, "-m", "allocreplay", "capture", "--no-gpu", *opts, "-o", "x.arrow", "--", sys.executable, "-c", "pass"]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and message in p.stderr, p.stderr
    assert not (tmp_path / "x.arrow").exists()


def test_world_size_needs_no_gpu(tmp_path):
    cmd = [sys.executable, "-m", "allocreplay", "capture", "--world-size", "2", "-o", "x.arrow", "--", sys.executable, "-c", "pass"]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "--world-size goes with --no-gpu" in p.stderr, p.stderr


# --- fit --world-size ------------------------------------------------------------------------

FIT_SCRIPT = """
    import os
    import sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    bs = int(sys.argv[1]) * (1 + rank)  # the last rank carries the most
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)]).cuda(), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        model(torch.randn(bs, 512, device="cuda")).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()
"""


def test_fit_with_a_world_size_fits_when_every_rank_fits(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent(FIT_SCRIPT))
    capacity = 200 << 20
    result = allocreplay.fit(
        [sys.executable, str(tmp_path / "job.py"), "{batch_size}"],
        {"batch_size": [16, 2048]},
        world_size=2,
        capacity=capacity,
        tune=False,
        check=False,
        cache_dir=str(tmp_path / "cache"),
        cwd=str(tmp_path),
    )
    assert result.parameters == ["world_size", "batch_size"]
    rows = {r["batch_size"]: r for r in result.table.filter(result.table["setting"] == "pytorch").iter_rows(named=True)}
    assert set(rows) == {16, 2048}
    # Independently: each candidate captured with --all-ranks and replayed at the capacity.
    for bs, row in rows.items():
        trace = capture(tmp_path, tmp_path / "job.py", "--world-size", "2", "--all-ranks", out=f"bs{bs}.arrow", args=(str(bs),))
        s = allocreplay.replay(trace, "pytorch", capacity).summary
        per_rank = {int(d): (int(p), bool(f)) for d, p, f in zip(s["device"].to_list(), s["peak_reserved_bytes"].to_list(), s["fits"].to_list())}
        assert set(per_rank) == {0, 1}
        assert row["fits"] == all(f for _, f in per_rank.values())
        worst = max(per_rank.values(), key=lambda pf: (not pf[1], pf[0]))
        assert row["peak_reserved_bytes"] == worst[0]
        if bs == 2048:  # rank 0 alone would fit: the candidate fails on rank 1's batch
            assert per_rank[0][1] and not per_rank[1][1]
    assert rows[16]["fits"] and not rows[2048]["fits"]


def test_a_torchrun_command_gives_the_same_ranks_as_all_ranks(tmp_path):
    # capture --no-gpu -- torchrun ...: every worker records itself as the rank torchrun made it
    # (RANK, WORLD_SIZE), and the workers' captures are merged as --all-ranks merges them.
    cmd = [sys.executable, "-m", "allocreplay", "capture", "--no-gpu", "-o", "tr.arrow", "--"]
    cmd += [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(FSDP2_TOY)]
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    launched = allocreplay.load(tmp_path / "tr.arrow")
    assert launched.info().devices == [0, 1]
    ours = capture(tmp_path, FSDP2_TOY, "--world-size", "2", "--all-ranks", out="ours.arrow")
    for rank in (0, 1):
        assert allocs(launched, rank) == allocs(ours, rank)
