"""Issue 29 item 2: recordings cut by max_entries that call empty_cache() often, as a course
assignment's memory profiling makes them (a Transformer LM, forward passes and full steps, fp32
and mixed precision, context lengths 128-512, torch.cuda.memory._record_memory_history with a
ring buffer far smaller than the run, empty_cache() between phases). Plain torch API, as the
people who committed such snapshots called it. Writes NAME.pickle and NAME.json (memory_stats:
the whole run's peaks, which the truncated history cannot show)."""
import argparse, json, math, os, pickle, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

SIZES = {"small": (768, 3072, 12, 12), "medium": (1024, 4096, 24, 16), "large": (1280, 5120, 36, 20),
         "xl": (1600, 6400, 48, 25), "2.7B": (2560, 10240, 32, 32)}
VOCAB = 10000

class RMSNorm(nn.Module):
    def __init__(s, d): super().__init__(); s.w = nn.Parameter(torch.ones(d))
    def forward(s, x): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * s.w

class Block(nn.Module):
    def __init__(s, d, ff, h):
        super().__init__(); s.h = h
        s.n1, s.n2 = RMSNorm(d), RMSNorm(d)
        s.q, s.k, s.v, s.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        s.w1, s.w2, s.w3 = nn.Linear(d, ff, bias=False), nn.Linear(ff, d, bias=False), nn.Linear(d, ff, bias=False)
    def forward(s, x):
        b, t, d = x.shape; y = s.n1(x)
        q, k, v = (m(y).view(b, t, s.h, d // s.h).transpose(1, 2) for m in (s.q, s.k, s.v))
        # the assignment's own attention: softmax(QK^T/sqrt(d)) V with a causal mask, no fused kernel
        att = q @ k.transpose(-1, -2) / math.sqrt(d // s.h)
        att = att.masked_fill(torch.triu(torch.ones(t, t, device=x.device, dtype=torch.bool), 1), float("-inf"))
        x = x + s.o((att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        y = s.n2(x)
        return x + s.w2(F.silu(s.w1(y)) * s.w3(y))

class LM(nn.Module):
    def __init__(s, d, ff, L, h, ctx):
        super().__init__(); s.emb = nn.Embedding(VOCAB, d); s.blocks = nn.ModuleList(Block(d, ff, h) for _ in range(L))
        s.nf = RMSNorm(d); s.head = nn.Linear(d, VOCAB, bias=False)
    def forward(s, x):
        x = s.emb(x)
        for b in s.blocks: x = b(x)
        return s.head(s.nf(x))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name"); ap.add_argument("--size", default="medium"); ap.add_argument("--mode", choices=["forward", "train"], default="train")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32"); ap.add_argument("--ctx", default="128,256,512")
    ap.add_argument("--batch", type=int, default=4); ap.add_argument("--warmup", type=int, default=2); ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--max-entries", type=int, required=True); ap.add_argument("--empty-every-step", action="store_true")
    ap.add_argument("--start", choices=["begin", "after-warmup"], default="begin")
    a = ap.parse_args()
    torch.manual_seed(0); dev = "cuda"; torch.cuda.init()
    d, ff, L, h = SIZES[a.size]; ctxs = [int(c) for c in a.ctx.split(",")]
    if a.start == "begin":
        torch.cuda.memory._record_memory_history(max_entries=a.max_entries)
    model = LM(d, ff, L, h, max(ctxs)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if a.mode == "train" else None
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if a.dtype == "bf16" else torch.autocast("cuda", enabled=False)
    t0 = time.time()
    for ctx in ctxs:
        x = torch.randint(0, VOCAB, (a.batch, ctx), device=dev)
        for i in range(a.warmup + a.steps):
            if a.start == "after-warmup" and ctx == ctxs[-1] and i == a.warmup:
                torch.cuda.memory._record_memory_history(max_entries=a.max_entries)
            if a.mode == "forward":
                with torch.no_grad(), amp:
                    out = model(x)
                del out
            else:
                with amp:
                    loss = F.cross_entropy(model(x).float().view(-1, VOCAB), x.view(-1))
                loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); del loss
            torch.cuda.synchronize()
            if a.empty_every_step:
                torch.cuda.empty_cache()
        del x
        torch.cuda.empty_cache()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(a.name + ".pickle", "wb") as f:
        pickle.dump(snap, f)
    ms = torch.cuda.memory_stats()
    meta = {"workload": "trunc_lm", "args": vars(a), "max_entries": a.max_entries, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "torch": torch.__version__, "device_total_bytes": torch.cuda.get_device_properties(0).total_memory,
            "device_name": torch.cuda.get_device_name(0), "wall_s": time.time() - t0,
            "trace_entries": sum(len(t) for t in snap["device_traces"]), "segments": len(snap["segments"]), "memory_stats": dict(ms)}
    with open(a.name + ".json", "w") as f:
        json.dump(meta, f, indent=1, default=str)
    print(f"{a.name}: entries={meta['trace_entries']} segs={meta['segments']} live={sum(1 for s in snap['segments'] for b in s['blocks'] if b['state']=='active_allocated')} "
          f"peak_res={ms['reserved_bytes.all.peak']/2**30:.3f} peak_alloc={ms['allocated_bytes.all.peak']/2**30:.3f} wall={meta['wall_s']:.1f}", flush=True)

if __name__ == "__main__":
    main()
