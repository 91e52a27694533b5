"""Session 34 serving runs of hundreds of thousands of requests (issue 29 item 1: "record more
long serving and generate runs ... hundreds of thousands of requests"). Small decoders, meant to
answer that many requests in a few minutes on one GPU (they did not: about 67 requests a second
were answered under the recorder, see research/heldout/README.md, session 34); every `generate` call is
a batch of 1-32 requests (sequences) with prompts of 16-600 tokens and 1-6 new tokens (greedy),
the shapes changing from call to call as a server's do:
- llama_serve_many: a Llama-style fp16 decoder (2 layers, hidden 256, grouped-query attention);
- neox_serve_many: a GPT-NeoX-style bf16 decoder (2 layers, hidden 256, rotary).
Seed 0, random.Random(0); each answers requests until SECONDS have passed or REQUESTS requests
(sequences, not calls) are answered, then prints how many it answered and its peak reserved.
Usage: python workloads_s34.py NAME SECONDS [REQUESTS]"""
import os, random, sys, time
import torch


def requests(vocab, rng, until, limit, batch=(1, 32), prompt=(16, 600), new=(1, 6)):
    """The batches a run answers (also workloads_s35.py's and, wider, workloads_s36.py's): prompt
    token ids (`batch` requests of `prompt` tokens, bounds included) and the number of new
    tokens (`new`), until `until` or `limit` requests."""
    served = 0
    while time.time() < until and (limit is None or served < limit):
        bs = rng.randint(*batch); n = rng.randint(*prompt); m = rng.randint(*new)
        yield torch.randint(0, vocab, (bs, n), device="cuda"), m
        served += bs


def serve(model, vocab, rng, until, limit):
    served = calls = 0
    with torch.no_grad():
        for x, m in requests(vocab, rng, until, limit):
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=False)
            served += x.shape[0]; calls += 1
    return served, calls


def llama_model():
    """The Llama-style fp16 decoder on the GPU, and its vocabulary size (also workloads_s35.py's)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=32000, max_position_embeddings=1024)
    return LlamaForCausalLM(cfg).cuda().half().eval(), cfg.vocab_size


def neox_model():
    """The GPT-NeoX-style bf16 decoder on the GPU, and its vocabulary size (also workloads_s35.py's)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    cfg = GPTNeoXConfig(hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4,
                        vocab_size=50432, max_position_embeddings=1024)
    return GPTNeoXForCausalLM(cfg).cuda().to(torch.bfloat16).eval(), cfg.vocab_size


def llama_serve_many(rng, until, limit):
    return serve(*llama_model(), rng, until, limit)


def neox_serve_many(rng, until, limit):
    return serve(*neox_model(), rng, until, limit)


def main(workloads, counted):
    """Runs the workload named on the command line (NAME SECONDS [REQUESTS]) and prints what it
    counted (`counted`: the names of the counts it returns) and its peak reserved."""
    name, seconds = sys.argv[1], float(sys.argv[2])
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else None
    torch.manual_seed(0); rng = random.Random(0); torch.cuda.init()
    t0 = time.time()
    counts = workloads[name](rng, t0 + seconds, limit)
    torch.cuda.synchronize()
    ms = torch.cuda.memory_stats()
    print(name, "wall", round(time.time() - t0, 1), *(x for pair in zip(counted, counts) for x in pair),
          "peak_reserved", ms.get("reserved_bytes.all.peak"), flush=True)


if __name__ == "__main__":
    main(globals(), ("requests", "generate_calls"))
