"""Session 37 (issue 29): where the driver's own allocations are. At each change of the driver's
own memory that capture's hook notes (`_driver_memory` -> `_hostva.note_driver_change`), and once
at exit, every allocation the CUDA driver knows inside the process's mappings is listed with
`cuMemGetAddressRange` (probed every 2 MiB of each anonymous or device-file mapping, from the top; an address in an unallocated tail of
a region is not found), so the allocations that are not the caching allocator's segments, which
no snapshot records, can be told apart afterwards. Loaded by cap_scan.sh's sitecustomize; writes
$SCAN_OUT (JSON). Reads only: no allocation is made, so the recorded requests are unchanged."""
import ctypes
import json
import os

STEP = 2 << 20
_scans = []
_cuda = None


def _get():
    global _cuda
    if _cuda is None:
        _cuda = ctypes.CDLL("libcuda.so.1")
        _cuda.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
        _cuda.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    return _cuda.cuMemGetAddressRange_v2


def scan():
    """(allocations the driver knows: [base, size, memory type], and the process's mappings that
    are anonymous or of a device file: [start, end, path]). Memory type
    (`CU_POINTER_ATTRIBUTE_MEMORY_TYPE`): 1 host (pinned, mapped into the unified address
    space), 2 device, 0 unknown."""
    f = _get()
    attr = _cuda.cuPointerGetAttribute
    found = {}
    probes = 0
    maps = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split(maxsplit=5)
            a, b = (int(x, 16) for x in parts[0].split("-"))
            path = parts[5].strip() if len(parts) > 5 else ""
            if not path or path.startswith("/dev/"):
                maps.append([a, b, path])
    # Anonymous and device-file mappings only (no library's), from the top down: the caching
    # allocator's segments are in the mmap area near the top, and the probes are capped.
    for a, b, _path in reversed(maps):
        p = (a + STEP - 1) // STEP * STEP
        while p < b and probes < 400_000:
            probes += 1
            base, size = ctypes.c_uint64(), ctypes.c_size_t()
            if f(ctypes.byref(base), ctypes.byref(size), p) == 0 and size.value:
                kind = ctypes.c_uint(0)
                if attr(ctypes.byref(kind), 2, base.value) != 0:
                    kind.value = 0
                found[base.value] = (size.value, kind.value)
                p = max(p + STEP, (base.value + size.value + STEP - 1) // STEP * STEP)
            else:
                p += STEP
    return [[a, n, k] for a, (n, k) in sorted(found.items())], maps


def note(index):
    try:
        allocs, maps = scan()
        _scans.append([index, allocs, maps])
    except Exception as e:  # never break the recorded program
        _scans.append([index, f"{type(e).__name__}: {e}", []])


def dump():
    out = {"scans": _scans}
    try:
        import torch

        out["final"], out["final_maps"] = scan()
        out["segments"] = sorted([s["address"], s["total_size"]] for s in torch.cuda.memory_snapshot())
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    with open(os.environ["SCAN_OUT"], "w") as fh:
        json.dump(out, fh)
