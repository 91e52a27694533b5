"""Session 23 (issue 29 item 1): what frees the range at the model's VA_TOP in some PyTorch runs?
Runs a research/band/band_workloads.py workload under a TorchDispatchMode that, after every op,
synchronizes and compares the drop in cudaMemGetInfo's free memory with the rise in PyTorch's
reserved memory. Where they differ (memory the driver took or gave back for itself), it prints the
op, the allocator's allocation counter (allocation.all.allocated: the trace's alloc index) and the
changes of /proc/self/maps within 64 GiB below / 2 GiB above the first segment.
Usage: python watch.py NAME"""
import os, random, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "band"))
import torch
from torch.utils._python_dispatch import TorchDispatchMode
import band_workloads as bw

MiB = 1 << 20


def maps():
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()
            s, e = (int(x, 16) for x in p[0].split("-"))
            out.add((s, e, p[1], p[5] if len(p) > 5 else ""))
    return out


class Watch(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.first = None
        self.last = maps()
        self.free = torch.cuda.mem_get_info()[0]
        self.res = torch.cuda.memory_reserved()
        self.n = 0
        self.events = 0

    def check(self, what):
        torch.cuda.synchronize()
        free = torch.cuda.mem_get_info()[0]
        res = torch.cuda.memory_reserved()
        extra = (self.free - free) - (res - self.res)
        if self.first is None and res > 0:
            self.first = min(s["address"] for s in torch.cuda.memory_snapshot())
            print("first segment", hex(self.first), "at op", self.n, what, flush=True)
        self.free, self.res = free, res
        if extra != 0:
            self.events += 1
            idx = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
            cur = maps()
            f0 = self.first or 0
            near = lambda m: self.first is None or (m[1] > f0 - (64 << 30) and m[0] < f0 + (2 << 30))
            rel = lambda a: (a - f0) / MiB
            print(f"DRIVER op#{self.n} {what} alloc_index={idx} extra={extra / MiB:+.1f} MiB reserved={res / MiB:.0f} MiB", flush=True)
            for s, e, perm, path in sorted(m for m in self.last - cur if near(m)):
                print(f"   gone [{rel(s):.1f}, {rel(e):.1f}) MiB {perm} {path}")
            for s, e, perm, path in sorted(m for m in cur - self.last if near(m)):
                print(f"   new  [{rel(s):.1f}, {rel(e):.1f}) MiB {perm} {path}")
            self.last = cur

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.n += 1
        self.check(str(func))
        return out


if __name__ == "__main__":
    name = sys.argv[1]
    torch.manual_seed(0); rng = random.Random(0); torch.cuda.init()
    snap = os.environ.get("SNAPSHOT")
    if snap:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=5_000_000)
    w = Watch()
    t0 = time.time()
    with w:
        getattr(bw, name)(rng)
    w.check("end")
    print(name, "ops", w.n, "driver events", w.events, "wall", round(time.time() - t0, 1), "peak_reserved", torch.cuda.memory_stats().get("reserved_bytes.all.peak"), flush=True)
    if snap:
        torch.cuda.memory._dump_snapshot(snap)
    segs = sorted((s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot())
    print("segments now (MiB rel first):", [(round((a - w.first) / MiB, 1), t // MiB) for a, t in segs][:80])
