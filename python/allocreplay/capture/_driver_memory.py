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

It also notes the pinned host memory the driver maps for itself (``host``): a ``/dev/zero
(deleted)`` mapping that starts at a 2 MiB boundary (the driver's own placement: the kernel's
top-down search would end it at a gap's top instead). The driver gives it an address among the
segments, in a region's hole, as it does its own ``cudaMalloc`` s: an 8.25 MiB one, mapped around
the first cuBLAS call, moved later segments of three H100 recordings (docs/driver-address-space.md,
"The driver's pinned host memory"). Device memory does not show it, so ``/proc/self/maps`` is read
whenever the device's free memory moved (a new segment, or the driver's own) and the process's
shared resident pages (``/proc/self/statm``) moved since the last read, and at every change of the
driver's device memory.

Only for the first device the process allocates on (another device's allocations are not
counted); another process allocating on the same GPU meanwhile would be counted as the
driver's. Standard library and torch only: copied into the recorded process with the hook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Most changes noted (a bound on the JSON's size; a run notes tens).
MAX_CHANGES = 100_000
# The driver's placements start at 2 MiB boundaries.
PAGE = 2 << 20
PINNED = "/dev/zero (deleted)"


def pinned_mappings(maps: str) -> set[tuple[int, int]]:
    """The ``/dev/zero (deleted)`` mappings of ``/proc/self/maps`` text that start at a 2 MiB
    boundary, as ``(start, end)``."""
    out: set[tuple[int, int]] = set()
    for line in maps.splitlines():
        if line.endswith(PINNED):
            lo, hi = (int(x, 16) for x in line.split(None, 1)[0].split("-"))
            if lo % PAGE == 0:
                out.add((lo, hi))
    return out


def read_maps() -> str:
    with open("/proc/self/maps") as f:
        return f.read()


def read_shared_pages() -> str:
    """``/proc/self/statm``'s shared resident pages (its third field), as text."""
    with open("/proc/self/statm") as f:
        return f.read().split()[2]


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
        # The driver's pinned host mappings: [index of the allocation it came before, bytes]; the
        # ones seen at the last look; the shared resident pages then.
        self.host: list[list[int]] = []
        self.pinned: set[tuple[int, int]] = set()
        self.shared = ""
        self.host_error: str | None = None
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
            self._look_for_pinned(None, force=True)
            return
        index = self.next_alloc
        self.next_alloc += 1
        free = int(self._free_memory())
        if free == self.free:
            return
        reserved = int(cuda.memory_reserved(self.device))
        taken = (self.free - free) - (reserved - self.reserved)
        self.free, self.reserved = free, reserved
        self._look_for_pinned(index, force=taken != 0)
        if taken == 0:
            return
        if len(self.changes) >= MAX_CHANGES:
            self.error = f"more than {MAX_CHANGES} changes: stopped noting"
            return
        self.changes.append([index, taken])
        if self.on_change is not None:
            self.on_change(index)

    def _look_for_pinned(self, index: int | None, force: bool) -> None:
        """Note the driver's pinned host mappings new since the last look, as made before
        allocation ``index`` (``None``: the first look, which only sets what is known). Read only
        where ``force`` is set or the shared resident pages moved."""
        if self.host_error is not None:
            return
        try:
            shared = read_shared_pages()
            if not force and shared == self.shared:
                return
            self.shared = shared
            pinned = pinned_mappings(read_maps())
            new = sorted(pinned - self.pinned)
            self.pinned = pinned
            if index is None:
                return
            if len(self.host) + len(new) > MAX_CHANGES:
                self.host_error = f"more than {MAX_CHANGES} pinned mappings: stopped noting"
                return
            self.host.extend([index, hi - lo] for lo, hi in new)
        except Exception as e:  # never break the recorded program
            self.host_error = f"{type(e).__name__}: {e}"

    def to_json(self) -> dict[str, Any] | None:
        if self.next_alloc is None and self.error is None:
            return None
        return {
            "what": "device memory the driver took for itself (negative: gave back) between allocations of the caching allocator: [index of the allocation it came before, bytes], in order; host: the pinned host memory it mapped for itself (new /dev/zero (deleted) mappings at 2 MiB boundaries), [index of the allocation it came before, bytes], in order",
            "device": self.device,
            "changes": self.changes,
            "host": self.host,
            "host_error": self.host_error,
            "error": self.error,
        }
