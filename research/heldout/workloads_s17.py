"""Session 17 held-out workloads (never recorded by the project before): a GPT-NeoX-style fp16
server answering generate calls (batch 1-24, prompts 16-512 tokens, 8-64 new tokens), a Phi-style
bf16 sampler (top-k sampling, batch 1-8, prompts 32-700) and a BLOOM-style fp16 beam search
(4 beams, batch 1-4). Seed 0, random.Random(0); each runs requests until SECONDS have passed.
Usage: python wl.py NAME SECONDS"""
import random, sys, time
import torch


def gptneox_serve(rng, until):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    cfg = GPTNeoXConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=16, num_attention_heads=16, vocab_size=50304, max_position_embeddings=2048)
    model = GPTNeoXForCausalLM(cfg).cuda().half().eval()
    with torch.no_grad():
        while time.time() < until:
            bs = rng.randint(1, 24); n = rng.randint(16, 512); m = rng.randint(8, 64)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=False)


def phi_sample(rng, until):
    from transformers import PhiConfig, PhiForCausalLM
    cfg = PhiConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=16, vocab_size=51200, max_position_embeddings=2048)
    model = PhiForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    with torch.no_grad():
        while time.time() < until:
            bs = rng.choice([1, 2, 4, 8]); n = rng.randint(32, 700); m = rng.randint(16, 128)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=True, top_k=50)


def bloom_beam(rng, until):
    from transformers import BloomConfig, BloomForCausalLM
    cfg = BloomConfig(hidden_size=1024, n_layer=12, n_head=16, vocab_size=50000)
    model = BloomForCausalLM(cfg).cuda().half().eval()
    with torch.no_grad():
        while time.time() < until:
            bs = rng.randint(1, 4); n = rng.randint(16, 400); m = rng.randint(8, 48)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, num_beams=4, do_sample=False)


if __name__ == "__main__":
    name, seconds = sys.argv[1], float(sys.argv[2])
    torch.manual_seed(0); rng = random.Random(0); torch.cuda.init()
    t0 = time.time(); globals()[name](rng, t0 + seconds); torch.cuda.synchronize()
    ms = torch.cuda.memory_stats()
    print(name, "wall", round(time.time() - t0, 1), "peak_reserved", ms.get("reserved_bytes.all.peak"), flush=True)
