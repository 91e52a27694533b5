"""The host process's free address space while a model moves to the GPU (issue 29 item 1).

The CUDA driver places each new ``cudaMalloc`` range in the host process's own mmap area: the
highest gap ``[s, e)`` with ``align_down(e - size, 32 MiB) - 32 MiB >= s``
(docs/driver-address-space.md). A model built on the CPU and moved with ``.cuda()`` / ``.to()``
frees its CPU parameters one by one, above the CUDA context, and the driver puts the segments
allocated during the move into those gaps. The GPU trace cannot show them; this module records
them: inside ``nn.Module._apply`` (what ``.cuda()``, ``.to()``, ``.half()`` run), before each
tensor conversion and once after the last, it reads ``/proc/self/statm`` and, when the process's
mappings changed, ``/proc/self/maps``, and notes every range above the CUDA context (the
driver's ``/dev/nvidia*`` mappings) that has become free since the last note, with the number
of allocations the caching allocator had made by then (``memory_stats()``'s
``allocation.all.allocated``: the index of the next ``alloc`` entry of the history). The
replay adds those ranges to its model of the address space at that point of the history.

Only inside a module's move: elsewhere the host reuses freed ranges at once (a batch's CPU
tensors), and a range noted free that the host took back would mislead the model.

Standard library and torch only: copied into the recorded process with the hook.
"""

from __future__ import annotations

import functools
from typing import Any

PAGE = 4096


def _statm() -> str:
    try:
        with open("/proc/self/statm") as f:
            return f.read().split(" ", 1)[0]
    except OSError:
        return ""


def _maps() -> tuple[list[tuple[int, int]], int | None]:
    """The process's mappings (sorted) and the end of the highest ``/dev/nvidia*`` one."""
    spans: list[tuple[int, int]] = []
    top: int | None = None
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            spans.append((lo, hi))
            if len(fields) > 5 and fields[5].startswith("/dev/nvidia"):
                top = hi if top is None else max(top, hi)
    spans.sort()
    return spans, top


def _gaps_above(spans: list[tuple[int, int]], floor: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    prev = floor
    for lo, hi in spans:
        if hi <= floor:
            continue
        if lo > prev:
            out.append((prev, lo))
        prev = max(prev, hi)
    return out


def _subtract(gaps: list[tuple[int, int]], known: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``gaps`` not in ``known`` (both sorted, disjoint)."""
    out: list[tuple[int, int]] = []
    k = 0
    for s, e in gaps:
        cur = s
        while k < len(known) and known[k][1] <= cur:
            k += 1
        j = k
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


def _merge(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(a + b):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


class HostMaps:
    """Notes the host ranges freed while modules move (see the module's docstring)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.context_top: int | None = None
        self.known: list[tuple[int, int]] = []
        self.freed: list[list[int]] = []  # [allocations made, start, end]
        self.last_statm = ""
        self.depth = 0
        self.error: str | None = None

    def install(self) -> None:
        torch = self.torch
        original_apply = torch.nn.Module._apply
        original_cuda = torch.Tensor.cuda
        original_to = torch.Tensor.to
        me = self

        @functools.wraps(original_apply)
        def _apply(module: Any, *args: Any, **kwargs: Any) -> Any:
            me.depth += 1
            try:
                return original_apply(module, *args, **kwargs)
            finally:
                me.depth -= 1
                if me.depth == 0:
                    me.note()

        @functools.wraps(original_cuda)
        def cuda(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if me.depth:
                me.note()
            return original_cuda(tensor, *args, **kwargs)

        @functools.wraps(original_to)
        def to(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if me.depth:
                me.note()
            return original_to(tensor, *args, **kwargs)

        torch.nn.Module._apply = _apply
        torch.Tensor.cuda = cuda
        torch.Tensor.to = to

    def note(self) -> None:
        if self.error is not None:
            return
        try:
            self._note()
        except Exception as e:  # never break the recorded program
            self.error = f"{type(e).__name__}: {e}"

    def _note(self) -> None:
        statm = _statm()
        if statm == self.last_statm:
            return
        self.last_statm = statm
        spans, top = _maps()
        if top is None:
            return  # no CUDA context yet: the driver has placed nothing
        if self.context_top is None:
            self.context_top = top
        fresh = [(s, e) for s, e in _subtract(_gaps_above(spans, self.context_top), self.known) if e - s >= PAGE]
        if not fresh:
            return
        allocs = int(self.torch.cuda.memory_stats().get("allocation.all.allocated", 0))
        self.freed.extend([allocs, s, e] for s, e in fresh)
        self.known = _merge(self.known, fresh)

    def to_json(self) -> dict[str, Any] | None:
        if self.context_top is None and self.error is None:
            return None
        return {
            "what": "host ranges above the CUDA context freed while modules moved: [allocations made by then, start, end]",
            "context_top": self.context_top,
            "freed": self.freed,
            "error": self.error,
        }
