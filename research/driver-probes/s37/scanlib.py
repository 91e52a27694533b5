"""Session 37 (issue 29): where the driver's own allocations are. At each change of the driver's
own memory that capture's hook notes (`_driver_memory` -> `_hostva.note_driver_change`), and once
at exit, every allocation the CUDA driver knows inside the process's mappings is listed with
`cuMemGetAddressRange` (probed every 2 MiB of each mapping; an address in an unallocated tail of
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
    return _cuda.cuMemGetAddressRange_v2


def scan():
    f = _get()
    found = {}
    probes = 0
    with open("/proc/self/maps") as fh:
        spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in fh]
    for a, b in spans:
        p = (a + STEP - 1) // STEP * STEP
        while p < b and probes < 400_000:
            probes += 1
            base, size = ctypes.c_uint64(), ctypes.c_size_t()
            if f(ctypes.byref(base), ctypes.byref(size), p) == 0 and size.value:
                found[base.value] = size.value
                p = max(p + STEP, (base.value + size.value + STEP - 1) // STEP * STEP)
            else:
                p += STEP
    return sorted(found.items())


def note(index):
    try:
        _scans.append([index, scan()])
    except Exception as e:  # never break the recorded program
        _scans.append([index, f"{type(e).__name__}: {e}"])


def dump():
    out = {"scans": _scans}
    try:
        import torch

        out["final"] = scan()
        out["segments"] = sorted([s["address"], s["total_size"]] for s in torch.cuda.memory_snapshot())
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    with open(os.environ["SCAN_OUT"], "w") as fh:
        json.dump(out, fh)
