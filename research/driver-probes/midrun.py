"""A small transformer LM trained in steps; `midrun`: warm-up steps, empty_cache, then
_record_memory_history (how the PyTorch docs tell people to record); `emptycache`: history from
the start, with torch.cuda.empty_cache() between steps."""
import json, lzma, os, pickle, random, sys
import torch
mode, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0); rng = random.Random(0)
torch.cuda.init()
V, D = 8192, 512
class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        layer = torch.nn.TransformerEncoderLayer(D, 8, 4 * D, batch_first=True, norm_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 4)
        self.head = torch.nn.Linear(D, V)
    def forward(self, x):
        return self.head(self.enc(self.emb(x), is_causal=True, mask=torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)))
def step(model, opt):
    bs, seq = rng.choice([(8, 128), (16, 256), (4, 512), (12, 384)])
    x = torch.randint(0, V, (bs, seq), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, V), x.view(-1))
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
meta = {"mode": mode, "torch": torch.__version__, "device_name": torch.cuda.get_device_name(0),
        "device_total_bytes": torch.cuda.get_device_properties(0).total_memory, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
if mode == "emptycache":
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, context=None)
model = LM().cuda(); opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
if mode == "midrun":
    for _ in range(3):
        step(model, opt)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    meta["stats_at_record_start"] = {k: v for k, v in torch.cuda.memory_stats().items() if k.startswith(("allocated_bytes.all", "reserved_bytes.all", "segment.all", "active.all", "allocation.all"))}
    meta["segments_at_record_start"] = [{"address": s["address"], "total_size": s["total_size"], "allocated_size": s["allocated_size"], "stream": s["stream"], "segment_type": s["segment_type"],
        "blocks": [(b["size"], b["requested_size"], b["state"]) for b in s["blocks"]]} for s in torch.cuda.memory_snapshot()]
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, context=None)
    for i in range(4):
        step(model, opt)
else:
    for i in range(6):
        step(model, opt)
        if i in (1, 3):
            torch.cuda.synchronize(); torch.cuda.empty_cache()
torch.cuda.synchronize()
meta["memory_stats"] = dict(torch.cuda.memory_stats())
snap = torch.cuda.memory._snapshot()
meta["trace_entries"] = sum(len(t) for t in snap["device_traces"])
with lzma.open(out + ".pickle.xz", "wb") as f:
    pickle.dump(snap, f)
json.dump(meta, open(out + ".json", "w"), indent=1, default=str)
ms = meta["memory_stats"]
print(mode, "entries", meta["trace_entries"], "peak_reserved", ms["reserved_bytes.all.peak"], "peak_alloc", ms["allocated_bytes.all.peak"], "retries", ms["num_alloc_retries"])
