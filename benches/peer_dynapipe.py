"""DynaPipe's TorchCachingAllocatorSimulator (awslabs/optimizing-multitask-training-through-dynamic-
pipelines @ d8666ad, dynapipe/memory_opt/allocation_simulator.py; not part of this repository)
side by side with allocreplay's `pytorch` policy on the same trace: events/s of each.

Get the peer's file once (it is Apache-2.0, but kept out of the repository):
    git clone https://github.com/awslabs/optimizing-multitask-training-through-dynamic-pipelines /tmp/dynapipe
    cp /tmp/dynapipe/dynapipe/memory_opt/allocation_simulator.py scratch/dynapipe_allocation_simulator.py

Events fed to DynaPipe: alloc -> malloc(size, stream), free_completed -> free(block); its simulator
has no free_requested / segment events, so the count is allocs + frees (what it processes).
python benches/peer_dynapipe.py TRACE [COPIES]   (DYNAPIPE_DIR: the folder holding dynapipe_allocation_simulator.py, default scratch/)
"""

import os
import sys
import time

sys.path.insert(0, os.environ.get("DYNAPIPE_DIR", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scratch")))
from dynapipe_allocation_simulator import TorchCachingAllocatorConfig, TorchCachingAllocatorSimulator

import allocreplay
from allocreplay import _core

tr = allocreplay.load(sys.argv[1])
copies = int(sys.argv[2]) if len(sys.argv) > 2 else 1
if copies > 1:
    tr = allocreplay.Trace(_core.tile(tr._inner, copies))
ev = tr.events
acts = ev["action"].cast(str).to_list()
ids = ev["alloc_id"].to_list()
sizes = ev["size"].to_list()
streams = ev["stream"].to_list()
ops = [(a == "alloc", i, s, st) for a, i, s, st in zip(acts, ids, sizes, streams) if a in ("alloc", "free_completed")]
best = float("inf")
for _ in range(3):
    # PyTorch's kSmallSize (1 MiB), where DynaPipe's default is 0; memory effectively unlimited.
    sim = TorchCachingAllocatorSimulator(1e9, TorchCachingAllocatorConfig(kSmallSize=1048576))
    live = {}
    t0 = time.perf_counter()
    for is_alloc, i, s, st in ops:
        if is_alloc:
            live[i] = sim.malloc(s, st)
        else:
            b = live.pop(i, None)
            if b is not None:
                sim.free(b)
    best = min(best, time.perf_counter() - t0)
n = len(ops)
print(f"dynapipe  {n:>10,} events (alloc+free) {n / best / 1e6:8.3f} M events/s  peak_reserved={sim.peak_backend_allocated_bytes:,}")
best = float("inf")
for _ in range(3):
    t0 = time.perf_counter()
    r = allocreplay.replay(tr, ["pytorch"], placements=False)
    best = min(best, time.perf_counter() - t0)
m = len(tr)
print(
    f"allocreplay pytorch {m:>10,} events (all rows) {m / best / 1e6:8.3f} M events/s, {n / best / 1e6:8.3f} M alloc+free/s  peak_reserved={r.summary['peak_reserved_bytes'][0]:,}"
)
