"""Session 25 held-out workloads (never recorded by the project before), for issue 30's "recordings
you did not tune on" and issue 29's new serving captures: a Mistral-style fp16 server with grouped
KV heads answering greedy generate calls (batch 1-16, prompts 16-900 tokens, 8-64 new tokens), and
a GPT-2-style fp16 beam search (3 beams, batch 1-6, prompts 16-600, 8-48 new tokens). Seed 0,
random.Random(0); each runs requests until SECONDS have passed.
Usage: python workloads_s25.py NAME SECONDS"""
import random, sys, time
import torch


def mistral_serve(rng, until):
    from transformers import MistralConfig, MistralForCausalLM
    cfg = MistralConfig(hidden_size=1024, intermediate_size=3584, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)
    model = MistralForCausalLM(cfg).cuda().half().eval()
    with torch.no_grad():
        while time.time() < until:
            bs = rng.randint(1, 16); n = rng.randint(16, 900); m = rng.randint(8, 64)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=False)


def gpt2_beam(rng, until):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_embd=1024, n_layer=16, n_head=16, vocab_size=50257, n_positions=1024)
    model = GPT2LMHeadModel(cfg).cuda().half().eval()
    with torch.no_grad():
        while time.time() < until:
            bs = rng.randint(1, 6); n = rng.randint(16, 600); m = rng.randint(8, 48)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, num_beams=3, do_sample=False)


if __name__ == "__main__":
    name, seconds = sys.argv[1], float(sys.argv[2])
    torch.manual_seed(0); rng = random.Random(0); torch.cuda.init()
    t0 = time.time(); globals()[name](rng, t0 + seconds); torch.cuda.synchronize()
    ms = torch.cuda.memory_stats()
    print(name, "wall", round(time.time() - t0, 1), "peak_reserved", ms.get("reserved_bytes.all.peak"), flush=True)
