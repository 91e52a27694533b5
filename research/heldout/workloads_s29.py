"""Session 29 held-out workloads (model families the project never recorded), for issue 30's
"recordings you did not tune on" and issue 29's new serving captures:
- gptj_sample: a GPT-J-style bf16 decoder (rotary, parallel attention/MLP) sampling with top-p
  0.9 and temperature 0.8 (batch 1-20, prompts 16-800 tokens, 8-96 new tokens): a generate run;
- falcon_serve: a Falcon-style fp16 decoder (multi-query attention) answering many small greedy
  requests (batch 1-4, prompts 8-256 tokens, 4-32 new tokens): a serving run.
Seed 0, random.Random(0); each runs requests until SECONDS have passed, or (session 32) until
REQUESTS requests are answered, so that runs under other allocator settings make the same
requests (what-ifs replayed from one recording are compared with the others' real runs).
WORKLOAD_MEMORY_FRACTION sets torch.cuda.set_per_process_memory_fraction first (a cap).
Usage: python workloads_s29.py NAME SECONDS [REQUESTS]"""
import os, random, sys, time
import torch


class Requests:
    """Whether to answer another request: before `until` and, when `limit` is set, fewer than it."""

    def __init__(self, until, limit):
        self.until, self.left = until, limit

    def more(self):
        if self.left is not None:
            if self.left <= 0:
                return False
            self.left -= 1
        return time.time() < self.until


def gptj_sample(rng, requests):
    from transformers import GPTJConfig, GPTJForCausalLM
    cfg = GPTJConfig(n_embd=1024, n_layer=16, n_head=16, rotary_dim=32, vocab_size=50400, n_positions=2048)
    model = GPTJForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    with torch.no_grad():
        while requests.more():
            bs = rng.randint(1, 20); n = rng.randint(16, 800); m = rng.randint(8, 96)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=True, top_p=0.9, temperature=0.8)


def falcon_serve(rng, requests):
    from transformers import FalconConfig, FalconForCausalLM
    cfg = FalconConfig(hidden_size=1024, num_hidden_layers=12, num_attention_heads=16, multi_query=True, parallel_attn=True, vocab_size=65024, max_position_embeddings=2048)
    model = FalconForCausalLM(cfg).cuda().half().eval()
    with torch.no_grad():
        while requests.more():
            bs = rng.randint(1, 4); n = rng.randint(8, 256); m = rng.randint(4, 32)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=False)


def main(workloads):
    """Runs the workload named by argv[1] (a function of `workloads`) for argv[2] seconds or argv[3]
    requests, then prints its wall time and peak reserved bytes."""
    name, seconds = sys.argv[1], float(sys.argv[2])
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else None
    torch.manual_seed(0); rng = random.Random(0); torch.cuda.init()
    if os.environ.get("WORKLOAD_MEMORY_FRACTION"):
        torch.cuda.set_per_process_memory_fraction(float(os.environ["WORKLOAD_MEMORY_FRACTION"]))
    t0 = time.time(); requests = Requests(t0 + seconds, limit); workloads[name](rng, requests); torch.cuda.synchronize()
    ms = torch.cuda.memory_stats()
    print(name, "wall", round(time.time() - t0, 1), "requests left", requests.left, "peak_reserved", ms.get("reserved_bytes.all.peak"), flush=True)


if __name__ == "__main__":
    main(globals())
