"""The device memory the CUDA driver takes for itself while a recorded process runs (issue 29
item 1).

A PyTorch process's trace records the caching allocator's segments, not what the driver and the
libraries allocate beside them: the context's local memory grows when lazily loaded kernels need
more per thread (about 90 MiB at the first real kernel on an H100), each thread's first cuBLAS
call takes 64 MiB, module loads take 2 to 10 MiB. The driver places those in the same virtual
address space as the segments, so a replay on the modelled address space that does not know
them places later segments elsewhere (docs/driver-address-space.md, "The driver's own allocations
during the run"). This module notes them: on every allocation of the caching allocator
(``torch.cuda._gpu_trace``'s allocation callbacks, what the CUDA sanitizer uses), it reads the
device's free memory (``cudaMemGetInfo``); when free memory moved by more than PyTorch's reserved
memory did, the difference is the driver's, noted with the index of that allocation (the number
of allocations made before it: the ``alloc`` entry of the history it comes before).

Only for the first device the process allocates on (another device's allocations are not
counted); another process allocating on the same GPU meanwhile would be counted as the
driver's. Standard library and torch only: copied into the recorded process with the hook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Most changes noted (a bound on the JSON's size; a run notes tens).
MAX_CHANGES = 100_000


class DriverMemory:
    """Notes the driver's own allocations (see the module's docstring)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.device: int | None = None
        # Index of the next allocation, the free memory and PyTorch's reserved memory after the
        # last allocation seen.
        self.next_alloc: int | None = None
        self.free = 0
        self.reserved = 0
        # [index of the allocation it came before, bytes the driver took (negative: gave back)].
        self.changes: list[list[int]] = []
        self.error: str | None = None
        self._free_memory: Any = None
        # Called with the allocation index of each change noted (``_hostva``'s
        # ``note_driver_change``: the host's mappings at that moment).
        self.on_change: Callable[[int], None] | None = None

    def install(self) -> None:
        """Register the allocation callback and switch the GPU trace on (the caching allocator
        calls it only while the trace is active)."""
        from torch.cuda import _gpu_trace

        _gpu_trace.register_callback_for_memory_allocation(self.on_alloc)
        self.torch._C._activate_gpu_trace()

    def on_alloc(self, _ptr: int) -> None:
        if self.error is not None:
            return
        try:
            self._on_alloc()
        except Exception as e:  # never break the recorded program
            self.error = f"{type(e).__name__}: {e}"

    def _reader(self, device: int) -> Any:
        """The device's free memory, read as cheaply as torch allows (its ``cudart`` binding,
        without ``torch.cuda.mem_get_info``'s Python layers: the read is once per allocation)."""
        cuda = self.torch.cuda
        try:
            get_info = cuda.cudart().cudaMemGetInfo
            get_info(device)
            return lambda: get_info(device)[0]
        except Exception:
            return lambda: cuda.mem_get_info(device)[0]

    def _on_alloc(self) -> None:
        cuda = self.torch.cuda
        if self.device is not None and cuda.current_device() != self.device:
            return  # another device's allocation (the allocator sets the device it allocates on)
        if self.next_alloc is not None and cuda.is_current_stream_capturing():
            # Inside a CUDA graph's capture, cudaMemGetInfo may invalidate it: counted only.
            self.next_alloc += 1
            return
        if self.next_alloc is None:
            # The first allocation (its segment is made): the state every later one is against.
            self.device = int(cuda.current_device())
            self._free_memory = self._reader(self.device)
            self.next_alloc = int(cuda.memory_stats(self.device).get("allocation.all.allocated", 1))
            self.free = int(self._free_memory())
            self.reserved = int(cuda.memory_reserved(self.device))
            return
        index = self.next_alloc
        self.next_alloc += 1
        free = int(self._free_memory())
        if free == self.free:
            return
        reserved = int(cuda.memory_reserved(self.device))
        taken = (self.free - free) - (reserved - self.reserved)
        self.free, self.reserved = free, reserved
        if taken == 0:
            return
        if len(self.changes) >= MAX_CHANGES:
            self.error = f"more than {MAX_CHANGES} changes: stopped noting"
            return
        self.changes.append([index, taken])
        if self.on_change is not None:
            self.on_change(index)

    def to_json(self) -> dict[str, Any] | None:
        if self.next_alloc is None and self.error is None:
            return None
        return {
            "what": "device memory the driver took for itself (negative: gave back) between allocations of the caching allocator: [index of the allocation it came before, bytes], in order",
            "device": self.device,
            "changes": self.changes,
            "error": self.error,
        }
