"""Issue 29 item 2, second run: the pattern of the public course-assignment snapshots, in our
own code. One process benchmarks several context lengths in turn; for each it builds the model
and optimizer, starts torch.cuda.memory._record_memory_history (so the history starts mid-run,
after the model exists: its parameters are seeded from the final state), calls
torch.cuda.empty_cache() (releasing what the previous context length left cached) and runs one
forward pass or one full training step, then dumps the snapshot. Optionally a small ring buffer.
Usage: course.py OUTDIR forward|train fp32|bf16 MAX_ENTRIES SIZE"""
import json, os, pickle, sys, time
import torch, torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trunc import LM, SIZES, VOCAB

def bench(out, mode, dtype, max_entries, size, ctx):
    d, ff, L, h = SIZES[size]
    model = LM(d, ff, L, h, ctx).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, VOCAB, (4, ctx)).cuda()
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16")
    with amp:
        torch.cuda.memory._record_memory_history(max_entries=max_entries)
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        if mode == "forward":
            logits = model(x)
        else:
            opt.zero_grad()
            logits = model(x)
            F.cross_entropy(logits.view(-1, VOCAB).float(), x.view(-1)).backward()
            opt.step()
        torch.cuda.synchronize()
    name = f"{out}/course_{mode}_{dtype}_{size}_ctx{ctx}" + (f"_ring{max_entries}" if max_entries < 100000 else "")
    snap = torch.cuda.memory._snapshot()
    with open(name + ".pickle", "wb") as f:
        pickle.dump(snap, f)
    torch.cuda.memory._record_memory_history(enabled=None)
    ms = torch.cuda.memory_stats()
    json.dump({"workload": "course_lm", "mode": mode, "dtype": dtype, "size": size, "ctx": ctx, "max_entries": max_entries, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
               "torch": torch.__version__, "device_total_bytes": torch.cuda.get_device_properties(0).total_memory, "device_name": torch.cuda.get_device_name(0),
               "trace_entries": len(snap["device_traces"][0]), "memory_stats": dict(ms)}, open(name + ".json", "w"), indent=1, default=str)
    print(os.path.basename(name), "entries", len(snap["device_traces"][0]), "segs", len(snap["segments"]), "peak_res", ms["reserved_bytes.all.peak"], flush=True)

if __name__ == "__main__":
    out, mode, dtype, me, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    torch.manual_seed(0); torch.cuda.init()
    for ctx in (128, 256, 512):
        bench(out, mode, dtype, me, size, ctx)
