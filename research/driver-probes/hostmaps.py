"""Issue 29 item 1: the host side of the driver's placement during a CPU-built model's .cuda().
Before every tensor's copy to the GPU (Tensor.cuda inside Module._apply) record the process's
mappings (>= 64 KiB) and the allocator's counters; afterwards the recorded segment addresses.
Output NAME.json. Usage: hostmaps.py NAME opt350|gemma [steps]"""
import json, random, sys, time
import torch

def maps():
    out = []
    for line in open("/proc/self/maps"):
        p = line.split()
        a, b = (int(x, 16) for x in p[0].split("-"))
        if b - a >= (1 << 20):
            out.append((a, b, p[1], p[5] if len(p) > 5 else ""))
    return out

def main():
    name, which = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    torch.manual_seed(0); rng = random.Random(0); torch.cuda.init()
    rec = {"after_init": maps(), "moves": []}
    from transformers import OPTConfig, OPTForCausalLM, GemmaConfig, GemmaForCausalLM
    if which == "opt350":
        cfg = OPTConfig(hidden_size=1024, ffn_dim=4096, num_hidden_layers=24, num_attention_heads=16, vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=512)
        model = OPTForCausalLM(cfg)
    else:
        cfg = GemmaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=8, num_key_value_heads=2, head_dim=128, vocab_size=32000, max_position_embeddings=4096)
        model = GemmaForCausalLM(cfg)
    rec["after_build"] = maps()
    torch.cuda.memory._record_memory_history(max_entries=10_000_000)
    orig = torch.Tensor.cuda
    def cuda(t, *a, **k):
        s = torch.cuda.memory_stats()
        rec["moves"].append({"allocs": s.get("allocation.all.allocated", 0), "segs": s.get("segment.all.allocated", 0), "nbytes": t.untyped_storage().nbytes(), "maps": maps()})
        return orig(t, *a, **k)
    torch.Tensor.cuda = cuda
    model = model.cuda()
    torch.Tensor.cuda = orig
    rec["after_cuda"] = maps()
    model = model.half() if which == "opt350" else model.to(torch.bfloat16)
    model.eval()
    with torch.no_grad():
        for _ in range(steps):
            bs = rng.randint(1, 32); n = rng.randint(16, 600); m = rng.randint(4, 40)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=False)
    torch.cuda.synchronize()
    rec["end"] = maps()
    snap = torch.cuda.memory._snapshot()
    rec["segment_events"] = [(i, e["action"], e["addr"], e["size"]) for i, e in enumerate(snap["device_traces"][0]) if e["action"].startswith("segment")]
    rec["n_entries"] = len(snap["device_traces"][0])
    json.dump(rec, open(name + ".json", "w"))
    print(name, "moves", len(rec["moves"]), "segment events", len(rec["segment_events"]), flush=True)

main()
