"""``allocreplay capture --no-gpu --world-size N``: one rank of a distributed PyTorch job on the
CPU. The program's ``init_process_group("nccl")`` (or ``"gloo"``, any backend) gets a process
group that completes every collective at once without communicating, while the buffers NCCL's
process group and the framework would allocate are requested as on the GPU:

- What the framework allocates around its collectives (DDP's ``Reducer``: its gradient buckets,
  rebuilt after the first iteration; its ``_broadcast_coalesced`` of the module's states; FSDP2's
  all-gather and reduce-scatter buffers, on their own streams) is PyTorch's own code, run on the
  fake tensors: the dispatch mode of ``_nogpu`` records every storage it creates.
- What ``ProcessGroupNCCL`` allocates inside a collective (``ProcessGroupNCCL.cpp``: the
  flattened output of ``allgather`` and the flattened input of ``reduce_scatter``, both
  ``newLikeFlat``; ``barrier``'s one-element tensor) is requested by :class:`NoGpuProcessGroup`,
  in the same order.
- Lifetimes: ``ProcessGroupNCCL::collective`` no longer calls ``recordStream`` on the tensors it
  uses (``TORCH_NCCL_AVOID_RECORD_STREAMS`` "is the default now", the constructor warns since
  torch 2.8): an asynchronous collective stashes them on its work
  (``stashed_for_allocator_safety_``) until ``wait()``, a synchronous one runs on the current
  stream. So a collective's buffer is an allocation on the stream that was current when it was
  made, freed as a plain free when the last reference (the program's, or the work's) goes: no
  cross-stream use to record, no deferred free (the real 2-GPU DDP captures,
  ``ddp2gpu__default_rank0/1``, have one stream and no free completed later than requested).

The rank and world size come from the capture's configuration (``no_gpu["world_size"]``,
``no_gpu["rank"]``), which the runner also puts in the environment as torchrun would (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``).

Only the standard library and torch: copied into the recorded process with ``_nogpu``.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

BACKEND = "allocreplay_nogpu"
"""The name the fake process group is registered under (``torch.distributed.Backend``)."""

MODELLED = (
    "torch.distributed: a process group that completes collectives at once; the rank's own program, DDP's buckets and FSDP2's buffers allocated by PyTorch's own code",
    "ProcessGroupNCCL's own requests: allgather's flattened output, reduce_scatter's flattened input, barrier's tensor",
)


def torchrun_env(rank: int, world_size: int, local_world_size: int | None = None) -> dict[str, str]:
    """The variables ``torchrun`` sets for a worker (``torch/distributed/run.py``), for rank
    ``rank`` of ``world_size`` on one node of ``local_world_size`` GPUs (default: all)."""
    local = world_size if local_world_size is None else local_world_size
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank % local),
        "LOCAL_WORLD_SIZE": str(local),
        "GROUP_RANK": str(rank // local),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "allocreplay-nogpu",
    }


def patch(torch: Any, rank: int, world_size: int) -> None:
    """Every process group the program creates is a :class:`NoGpuProcessGroup` of this rank."""
    dist: Any = importlib.import_module("torch.distributed")
    if not dist.is_available():
        return
    group_class = make_group_class(torch)

    def create(prefix_store: Any, group_rank: int, group_size: int, timeout: Any) -> Any:
        return group_class(group_rank, group_size)

    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create, devices=["cpu", "cuda"])
    c10d = dist.distributed_c10d
    original_init = c10d.init_process_group
    original_new_group = c10d.new_group

    @functools.wraps(original_init)
    def init_process_group(backend: Any = None, init_method: Any = None, timeout: Any = None, world_size: Any = -1, rank: Any = -1, **kw: Any) -> Any:
        # No rendezvous: an in-memory store, this rank of the capture's world size.
        for k in ("store", "device_id", "pg_options", "group_name"):
            kw.pop(k, None)
        args: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
        return original_init(BACKEND, store=dist.HashStore(), world_size=world_size_, rank=rank_, **args, **kw)

    @functools.wraps(original_new_group)
    def new_group(*a: Any, **kw: Any) -> Any:
        if "backend" in kw and kw["backend"] is not None:
            kw["backend"] = BACKEND
        elif len(a) >= 3 and a[2] is not None:
            a = (*a[:2], BACKEND, *a[3:])
        kw.pop("pg_options", None)
        return original_new_group(*a, **kw)

    rank_, world_size_ = rank, world_size
    for mod in (dist, c10d):
        mod.init_process_group = init_process_group
        mod.new_group = new_group
    _patch_ddp_checks(torch)


def _patch_ddp_checks(torch: Any) -> None:
    """``_verify_param_shape_across_processes`` (DDP's constructor) reads the values of device
    tensors on the host (``Tensor::accessor``, ``item``) in C++: its device requests are made
    here, in its order, without the reads."""
    dist_utils: Any = importlib.import_module("torch.distributed.utils")
    ddp_mod: Any = importlib.import_module("torch.nn.parallel.distributed")

    def verify_param_shape_across_processes(process_group: Any, tensors: list[Any], logger: Any = None) -> None:
        # torch/csrc/distributed/c10d/reducer.cpp, verify_params_across_processes: the number
        # of parameters (one int64, at::tensor on the device), all-gathered into world-size
        # empty_like tensors, then the sizes and strides of every parameter (int64 each, built on
        # the host and copied to the device), broadcast from rank 0. Destroyed in reverse order.
        if not tensors:
            return
        device = tensors[0].device
        count = torch.tensor([len(tensors)], dtype=torch.long, device=device)
        gathered = [torch.empty_like(count) for _ in range(process_group.size())]
        process_group.allgather([gathered], [count]).wait()
        n = sum(2 * t.dim() for t in tensors)
        metadata = torch.zeros(n, dtype=torch.long).to(device)
        process_group.broadcast([metadata]).wait()
        del metadata
        del gathered
        del count

    dist_utils._verify_param_shape_across_processes = verify_param_shape_across_processes
    ddp_mod._verify_param_shape_across_processes = verify_param_shape_across_processes


def make_group_class(torch: Any) -> Any:
    """The process group class (built once torch is imported: it subclasses torch's)."""
    dist: Any = importlib.import_module("torch.distributed")
    c10d: Any = importlib.import_module("torch._C._distributed_c10d")
    Future: Any = importlib.import_module("torch.futures").Future
    ProcessGroup: Any = dist.ProcessGroup

    def done(result: Any) -> Any:
        fut = Future()
        fut.set_result(result)
        return c10d._create_work_from_future(fut)

    def flat_like(tensors: list[Any]) -> Any:
        # ProcessGroupNCCL.cpp, newLikeFlat: one tensor of len(tensors) x the first's shape.
        t = tensors[0]
        return t.new_empty((len(tensors), *t.shape))

    class NoGpuProcessGroup(ProcessGroup):  # type: ignore[misc]
        """Collectives that complete at once, with ``ProcessGroupNCCL``'s own requests."""

        def __init__(self, rank: int, world_size: int) -> None:
            super().__init__(rank, world_size)
            self._rank = rank
            self._world_size = world_size

        def size(self) -> int:
            return self._world_size

        def rank(self) -> int:
            return self._rank

        def getBackendName(self) -> str:
            return BACKEND

        @property
        def group_name(self) -> str:
            # A Python process group registers no C++ backend, which ProcessGroup::getGroupName
            # asks: the name c10d gave it (as torch's threaded test group answers).
            return str(dist.distributed_c10d._world.pg_names[self])

        @property
        def group_desc(self) -> str:
            return self.group_name

        def allreduce(self, tensors: Any, opts: Any = None) -> Any:
            return done(list(tensors))

        def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> Any:
            return done(list(tensors))

        def broadcast(self, tensors: Any, opts: Any = None) -> Any:
            return done(list(tensors))

        def reduce(self, tensors: Any, opts: Any = None) -> Any:
            return done(list(tensors))

        def allgather(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> Any:
            # ProcessGroupNCCL::allgather: same-size outputs are gathered into one flattened
            # tensor (newLikeFlat), then copied into the outputs; it goes with the collective.
            outs = output_tensors[-1]
            flat = flat_like(outs)
            for j, o in enumerate(outs):
                o.copy_(input_tensors[-1] if o.shape == input_tensors[-1].shape else flat[j])
            del flat
            return done(output_tensors)

        def _allgather_base(self, output: Any, input: Any, opts: Any = None) -> Any:
            return done([output])

        def allgather_into_tensor_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return done(list(outputs))

        def allgather_coalesced(self, output_lists: Any, inputs: Any, opts: Any = None) -> Any:
            return done(output_lists)

        def reduce_scatter(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> Any:
            # ProcessGroupNCCL::reduce_scatter: same-size inputs are copied into one flattened
            # tensor (newLikeFlat) first.
            flat = flat_like(input_tensors[-1])
            for j, t in enumerate(input_tensors[-1]):
                flat[j].copy_(t)
            del flat
            return done(list(output_tensors))

        def _reduce_scatter_base(self, output: Any, input: Any, opts: Any = None) -> Any:
            return done([output])

        def reduce_scatter_tensor_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return done(list(outputs))

        def alltoall_base(self, output: Any, input: Any, output_split_sizes: Any = None, input_split_sizes: Any = None, opts: Any = None) -> Any:
            return done([output])

        def alltoall(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return done(list(outputs))

        def gather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return done(list(inputs))

        def scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            return done(list(outputs))

        def send(self, tensors: Any, dst: int, tag: int = 0) -> Any:
            return done(list(tensors))

        def recv(self, tensors: Any, src: int, tag: int = 0) -> Any:
            return done(list(tensors))

        def recv_anysource(self, tensors: Any, tag: int = 0) -> Any:
            return done(list(tensors))

        def barrier(self, opts: Any = None) -> Any:
            # ProcessGroup::barrier (ProcessGroup.hpp): a one-byte tensor on the barrier's device,
            # held in a function-local static (the last one lives to the end of the process);
            # then ProcessGroupNCCL::barrier: a one-element float tensor, all-reduced, kept by
            # the work (barrierTensor_) until it is waited on.
            device = getattr(opts, "device", None)
            if device is None or device.type != "cuda":
                device = torch.device("cuda", torch.cuda.current_device())
            _static_barrier_tensor[:] = [torch.empty(1, dtype=torch.uint8, device=device)]
            t = torch.zeros(1, dtype=torch.float32, device=device)
            return done([t])

        def __repr__(self) -> str:
            return f"NoGpuProcessGroup(rank={self._rank}, world_size={self._world_size})"

    return NoGpuProcessGroup


_static_barrier_tensor: list[Any] = []
"""ProcessGroup::barrier's ``static at::Tensor tensor``."""


def config_of(no_gpu: dict[str, Any] | None) -> tuple[int, int] | None:
    """(rank, world size) of a ``--world-size`` capture's configuration; without one, of a
    ``torchrun`` worker (``allocreplay capture --no-gpu -- torchrun ...``: its ``RANK`` and
    ``WORLD_SIZE``, set with ``TORCHELASTIC_RUN_ID`` by ``torch/distributed/run.py``); else
    None."""
    if no_gpu is None:
        return None
    if no_gpu.get("world_size"):
        return int(no_gpu.get("rank") or 0), int(no_gpu["world_size"])
    env = os.environ
    if "TORCHELASTIC_RUN_ID" in env and "RANK" in env and "WORLD_SIZE" in env:
        try:
            return int(env["RANK"]), int(env["WORLD_SIZE"])
        except ValueError:
            return None
    return None
