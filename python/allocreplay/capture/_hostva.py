"""The host ranges a recorded process frees while its model moves to the GPU (issue 29 item 1).

The CUDA driver takes the virtual range of each new ``cudaMalloc`` region with the kernel's
top-down ``mmap`` search, below the process's ``mmap_base`` (just under the dynamic loader's
mapping): the highest free gap ``[s, e)`` with 32 MiB of it below ``align_down(e - size,
32 MiB)`` (docs/driver-address-space.md). A model built on the CPU and moved with ``.cuda()`` /
``.to()`` frees its CPU tensors one by one, above the CUDA context, and the driver puts the
segments made during the move into those gaps. The GPU trace cannot show them; this module
notes them: inside ``nn.Module._apply`` (what ``.cuda()``, ``.to()``, ``.half()`` run), before
each tensor conversion and once after the last, it reads ``/proc/self/statm`` and, when the
process's memory changed and the caching allocator has made its first allocation (so the CUDA
context and the first segment exist), ``/proc/self/maps``; it notes every gap below the loader's
mapping that was not free at the last note (``freed``), and every range free then that is mapped
now (``taken``: the host, or the driver, took it back), with the number of allocations made by then
(``memory_stats()``'s ``allocation.all.allocated``: the index of the next ``alloc`` entry of the
history). A replay moves those ranges into its model of the address space by where the first
segment was, keeps the part above the model's CUDA context (below it the model holds the space
itself) and adds (or removes) it at that point of the history (``rust/allocreplay-core/src/engine/host_ranges.rs``).

Only inside a module's move: elsewhere the host reuses the ranges it frees at once (a batch's
CPU tensors), and a range noted free that the host took back would mislead the model.

Also, apart (``driver_changes``, which replays apply with the module notes since session 38):
how the host's gaps changed each time the driver took device memory for itself (``_driver_memory`` calls
``note_driver_change``). An H100 watch of ``vit_b32_train`` saw the driver's +10 MiB (cuDNN's
kernels loading) and +64 MiB (the first cuBLAS call) come with new ``---p`` reservations of the
host's address space (research/driver-probes/s23/vit_b32_watch_s32.txt), and three captures
still replay off without their addresses where the driver's own allocations are
(docs/driver-address-space.md, "Still missing"): these notes record, in a capture, what the
address space gained and lost at those moments. They are rare (tens per run), and each reads
``/proc/self/maps`` once.

Standard library and torch only: copied into the recorded process with the hook.
"""

from __future__ import annotations

import functools
import os
from typing import Any

# Most ranges noted (a bound on the JSON's size; a model of 10,000 tensors notes fewer).
MAX_RANGES = 100_000
LOADERS = ("ld-linux", "ld-musl", "ld.so")


def parse_maps(text: str) -> tuple[list[tuple[int, int]], int | None, int | None]:
    """``/proc/self/maps``'s mappings (sorted), the end of the highest ``/dev/nvidia*`` one and
    the start of the dynamic loader's lowest one (``None`` where there is none)."""
    spans: list[tuple[int, int]] = []
    context_top: int | None = None
    loader: int | None = None
    for line in text.splitlines():
        fields = line.split(None, 5)
        if not fields:
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        spans.append((lo, hi))
        path = fields[5].strip() if len(fields) > 5 else ""
        if path.startswith("/dev/nvidia"):
            context_top = hi if context_top is None else max(context_top, hi)
        elif os.path.basename(path).startswith(LOADERS):
            loader = lo if loader is None else min(loader, lo)
    spans.sort()
    return spans, context_top, loader


def gaps_between(spans: list[tuple[int, int]], floor: int, ceiling: int) -> list[tuple[int, int]]:
    """The unmapped ranges inside ``[floor, ceiling)`` (``spans`` sorted)."""
    out: list[tuple[int, int]] = []
    prev = floor
    for lo, hi in spans:
        if hi <= prev:
            continue
        if lo >= ceiling:
            break
        if lo > prev:
            out.append((prev, lo))
        prev = hi
    if prev < ceiling:
        out.append((prev, ceiling))
    return out


def subtract(gaps: list[tuple[int, int]], known: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``gaps`` not in ``known`` (both sorted and disjoint)."""
    out: list[tuple[int, int]] = []
    k = 0
    for s, e in gaps:
        while k < len(known) and known[k][1] <= s:
            k += 1
        cur, j = s, k
        while cur < e:
            if j < len(known) and known[j][0] < e:
                ks, ke = known[j]
                if ks > cur:
                    out.append((cur, ks))
                cur = max(cur, ke)
                j += 1
            else:
                out.append((cur, e))
                cur = e
    return out


def merge(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(a + b):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def changed_rows(index: int, before: list[tuple[int, int]], gaps: list[tuple[int, int]]) -> list[list[int]]:
    """What changed from the gaps ``before`` to ``gaps``, as noted rows ``[index, start, end, 0 or
    1]``: the ranges mapped since (0), then the ranges found free since (1)."""
    return [[index, s, e, 0] for s, e in subtract(before, gaps)] + [[index, s, e, 1] for s, e in subtract(gaps, before)]


class HostVA:
    """Notes the host ranges freed while modules move (see the module's docstring)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.context_top: int | None = None
        self.mmap_base: int | None = None
        self.known: list[tuple[int, int]] = []
        # [allocations made, start, end, 1 if the range was found free (freed), 0 if it was
        # found mapped again (taken)], in the order noted.
        self.changes: list[list[int]] = []
        self.last_statm = ""
        self.depth = 0
        self.error: str | None = None
        # The same, at each change of the driver's own memory (see the module's docstring):
        # [index of the allocation it came before, start, end, 1 or 0], against the gaps seen
        # at the last look (either kind).
        self.driver_changes: list[list[int]] = []
        self.driver_error: str | None = None
        # The gaps seen at the last look of either kind (a module's note or the driver's; set
        # with `mmap_base`, by the first module note).
        self.last_seen: list[tuple[int, int]] = []

    def install(self) -> None:
        """Wrap ``nn.Module._apply``: the outermost call's conversion function notes before each
        tensor, and the call notes once more at its end. Nothing else of torch is touched (the
        program's own ``Tensor.to`` calls, compiled or not, run as before)."""
        original_apply = self.torch.nn.Module._apply
        me = self

        @functools.wraps(original_apply)
        def _apply(module: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            if me.depth == 0:
                convert = fn

                def fn(tensor: Any, *a: Any, **k: Any) -> Any:
                    me.note()
                    return convert(tensor, *a, **k)

            me.depth += 1
            try:
                return original_apply(module, fn, *args, **kwargs)
            finally:
                me.depth -= 1
                if me.depth == 0:
                    me.note()

        self.torch.nn.Module._apply = _apply

    def note(self) -> None:
        if self.error is not None:
            return
        try:
            self._note()
        except Exception as e:  # never break the recorded program
            self.error = f"{type(e).__name__}: {e}"

    def _note(self) -> None:
        with open("/proc/self/statm") as f:
            statm = f.read().split(" ", 1)[0]
        if statm == self.last_statm:
            return
        self.last_statm = statm
        cuda = self.torch.cuda
        if not cuda.is_initialized():
            return
        allocs = int(cuda.memory_stats().get("allocation.all.allocated", 0))
        if allocs == 0:
            return  # the context and the first segment are still to come
        with open("/proc/self/maps") as f:
            spans, context_top, loader = parse_maps(f.read())
        if loader is None:
            self.error = "no dynamic loader mapping in /proc/self/maps: the top of the driver's window is unknown"
            return
        if self.mmap_base is None:
            self.context_top, self.mmap_base = context_top, loader
        gaps = gaps_between(spans, 0, self.mmap_base)
        self.last_seen = gaps
        rows = changed_rows(allocs, self.known, gaps)
        if not rows:
            return
        if len(self.changes) + len(rows) > MAX_RANGES:
            self.error = f"more than {MAX_RANGES} ranges: stopped noting"
            return
        self.changes.extend(rows)
        self.known = gaps

    def note_driver_change(self, index: int) -> None:
        """The driver took (or gave back) device memory of its own before allocation ``index``
        (``_driver_memory``): note how the host's gaps changed since the last look. Nothing
        before the first note of a module's move (the window, ``mmap_base``, is known from it)."""
        if self.driver_error is not None or self.mmap_base is None:
            return
        try:
            self._note_driver_change(index)
        except Exception as e:  # never break the recorded program (nor the module notes)
            self.driver_error = f"{type(e).__name__}: {e}"

    def _note_driver_change(self, index: int) -> None:
        assert self.mmap_base is not None
        with open("/proc/self/maps") as f:
            spans, _, _ = parse_maps(f.read())
        gaps = gaps_between(spans, 0, self.mmap_base)
        rows = changed_rows(index, self.last_seen, gaps)
        self.last_seen = gaps
        if len(self.driver_changes) + len(rows) > MAX_RANGES:
            self.driver_error = f"more than {MAX_RANGES} ranges: stopped noting"
            return
        self.driver_changes.extend(rows)

    def to_json(self) -> dict[str, Any] | None:
        if self.mmap_base is None and self.error is None:
            return None
        return {
            "what": "host ranges below the loader's mapping found free (1) or mapped again (0) while modules moved: [allocations made by then, start, end, 1 or 0], in the order noted; driver_changes: the same at each change of the driver's own memory, [index of the allocation it came before, start, end, 1 or 0]",
            "context_top": self.context_top,
            "mmap_base": self.mmap_base,
            "changes": self.changes,
            "driver_changes": self.driver_changes,
            "driver_changes_error": self.driver_error,
            "error": self.error,
        }
