"""Session 13 workloads, never seen by the project before: a generate run of a model family the
project has not recorded (Gemma, bf16) and a serving-style run (a 350 M-parameter fp16 OPT-like
decoder answering generate calls with batch 1-32, prompts 16-600 tokens). Same conventions as
research/driver-probes/asyncheld/workloads.py: seed 0, random.Random(0), fixed output lengths.
Usage: python workloads_new.py NAME STEPS [STATS.json]"""
import json, os, random, sys, time
import torch


def gemma_generate(steps, rng):
    try:
        from transformers import GemmaConfig, GemmaForCausalLM
        cfg = GemmaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=8, num_key_value_heads=2, head_dim=128, vocab_size=32000, max_position_embeddings=4096)
        model = GemmaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    except ImportError:
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=8, num_key_value_heads=2, vocab_size=32000, max_position_embeddings=4096)
        model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    with torch.no_grad():
        for _ in range(steps):
            bs = rng.choice([1, 2, 4, 8, 16]); n = rng.randint(32, 800); m = rng.randint(64, 192)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=False)
    torch.cuda.synchronize()


def opt350_serve(steps, rng):
    from transformers import OPTConfig, OPTForCausalLM
    cfg = OPTConfig(hidden_size=1024, ffn_dim=4096, num_hidden_layers=24, num_attention_heads=16, vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=512)
    model = OPTForCausalLM(cfg).cuda().half().eval()
    with torch.no_grad():
        for _ in range(steps):
            bs = rng.randint(1, 32); n = rng.randint(16, 600); m = rng.randint(4, 40)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=False)
    torch.cuda.synchronize()


if __name__ == "__main__":
    name, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0); rng = random.Random(0); torch.cuda.init()
    t0 = time.time(); globals()[name](steps, rng); wall = time.time() - t0
    ms = torch.cuda.memory_stats()
    if len(sys.argv) > 3:
        json.dump({"workload": name, "steps": steps, "seed": 0, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "torch": torch.__version__, "wall_s": wall, "memory_stats": ms}, open(sys.argv[3], "w"), indent=1, default=str)
    print(name, "wall", round(wall, 1), "peak_alloc", ms.get("allocated_bytes.all.peak"), "peak_reserved", ms.get("reserved_bytes.all.peak"), flush=True)
