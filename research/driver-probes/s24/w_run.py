"""Runs one workload of research/driver-probes/w.py (the cudaMallocAsync calibration set) without
w.py's own history recording, so the capture hook's recording is the one written: w.py ends with
_record_memory_history(enabled=None), which would clear the hook's history. Same seed and order of
calls as w.py's __main__. Usage: w_run.py NAME STEPS"""
import os, random, sys, time
import torch
src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "w.py")).read()
exec(compile(src[: src.index("\nname,steps,out=")], "w.py", "exec"))
name, steps = sys.argv[1], int(sys.argv[2])
seed = 0; torch.manual_seed(seed); rng = random.Random(seed); torch.cuda.init()
t0 = time.time(); globals()[name](steps, rng); wall = time.time() - t0
ms = torch.cuda.memory_stats()
print(name, "wall", round(wall, 1), "peak_alloc", ms.get("allocated_bytes.all.peak"), "peak_reserved", ms.get("reserved_bytes.all.peak"), flush=True)
