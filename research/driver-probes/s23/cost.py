"""Session 23: what the capture's driver-memory note costs per allocation (the gpu_trace
allocation callback plus cudaMemGetInfo). Allocates and frees 1 KiB tensors N times with and
without the note. Usage: python cost.py N"""
import sys, time
import torch
import importlib.util
spec = importlib.util.spec_from_file_location("_driver_memory", "python/allocreplay/capture/_driver_memory.py")
_driver_memory = importlib.util.module_from_spec(spec); spec.loader.exec_module(_driver_memory)

n = int(sys.argv[1])
x = torch.empty(1, device="cuda")


def loop():
    t = time.perf_counter()
    for _ in range(n):
        y = torch.empty(256, device="cuda")
        del y
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


base = min(loop() for _ in range(3))
notes = _driver_memory.DriverMemory(torch)
notes.install()
noted = min(loop() for _ in range(3))
print(f"per allocation: {base:.2f} us without, {noted:.2f} us with the note (+{noted - base:.2f} us); changes {len(notes.changes)}, error {notes.error}")
