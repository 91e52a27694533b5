"""Session 36 serving runs of hundreds of thousands of requests (issue 29 item 1). Session 35's
plain decoding loop (workloads_s35.py) answered 13,900 requests in 200 s under the recorder:
about 70 ms a decoding step whatever the batch, so a run answers many requests only where each
step answers many. Here a step decodes a wide batch, as a server batching hundreds of sequences
does (vLLM's default `max_num_seqs` is 256): batches of 64-1,024 requests with prompts of
16-256 tokens and 1-6 new tokens, the shapes changing from call to call; only the last
position's logits are computed (`logits_to_keep=1`, as `generate` does), so memory stays that
of the KV cache.
- llama_serve_wide, neox_serve_wide: session 34's two decoders (workloads_s34.py: Llama-style
  fp16 and GPT-NeoX-style bf16, 2 layers, hidden 256).
Seed 0, random.Random(0); each answers requests until SECONDS have passed or REQUESTS requests
are answered, then prints how many it answered, its calls and steps, and its peak reserved.
Usage: python workloads_s36.py NAME SECONDS [REQUESTS]"""
import time

import torch
from workloads_s34 import llama_model, main, neox_model  # session 34's models and report


def wide_requests(vocab, rng, until, limit):
    """Batches of 64-1,024 requests of 16-256 prompt tokens, 1-6 new tokens each."""
    served = 0
    while time.time() < until and (limit is None or served < limit):
        bs = rng.randint(64, 1024); n = rng.randint(16, 256); m = rng.randint(1, 6)
        yield torch.randint(0, vocab, (bs, n), device="cuda"), m
        served += bs


def serve(model, vocab, rng, until, limit):
    served = calls = steps = 0
    with torch.inference_mode():
        for x, m in wide_requests(vocab, rng, until, limit):
            out = model(input_ids=x, use_cache=True, logits_to_keep=1)
            tok = out.logits[:, -1].argmax(-1, keepdim=True); toks = [tok]
            for _ in range(m - 1):
                out = model(input_ids=tok, past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
                tok = out.logits[:, -1].argmax(-1, keepdim=True); toks.append(tok)
            del out
            torch.cat(toks, 1).tolist()  # the answers go back to the host
            served += x.shape[0]; calls += 1; steps += m
    return served, calls, steps


def llama_serve_wide(rng, until, limit):
    return serve(*llama_model(), rng, until, limit)


def neox_serve_wide(rng, until, limit):
    return serve(*neox_model(), rng, until, limit)


if __name__ == "__main__":
    main(globals(), ("requests", "calls", "steps"))
