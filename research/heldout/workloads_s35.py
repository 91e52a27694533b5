"""Session 35 serving runs meant to reach hundreds of thousands of requests (issue 29 item 1).
Session 34's runs (workloads_s34.py, `generate`) answered about 67 requests a second: each
decoding step paused 35-60 ms. Here each batch is decoded by a plain loop (the model's forward
with its KV cache, greedy argmax, the tokens returned to the host once per batch as a server
does), so a step costs what the model's kernels cost. Batches of 1-32 requests, prompts of
16-600 tokens, 1-6 new tokens, the shapes changing from call to call:
- llama_serve_loop, neox_serve_loop: session 34's two decoders (workloads_s34.py: Llama-style
  fp16 and GPT-NeoX-style bf16, 2 layers, hidden 256).
Seed 0, random.Random(0); each answers requests until SECONDS have passed or REQUESTS requests
are answered, then prints how many it answered, its steps and its peak reserved.
Usage: python workloads_s35.py NAME SECONDS [REQUESTS]"""
import torch
from workloads_s34 import llama_model, main, neox_model, requests  # session 34's models, requests and report


def serve(model, vocab, rng, until, limit, batches=requests, **forward):
    """Answers `batches(vocab, rng, until, limit)` (also workloads_s36.py's, with `forward`
    passed to each of the model's calls)."""
    served = calls = steps = 0
    with torch.inference_mode():
        for x, m in batches(vocab, rng, until, limit):
            out = model(input_ids=x, use_cache=True, **forward)
            tok = out.logits[:, -1].argmax(-1, keepdim=True); toks = [tok]
            for _ in range(m - 1):
                out = model(input_ids=tok, past_key_values=out.past_key_values, use_cache=True, **forward)
                tok = out.logits[:, -1].argmax(-1, keepdim=True); toks.append(tok)
            del out
            torch.cat(toks, 1).tolist()  # the answer goes back to the host
            served += x.shape[0]; calls += 1; steps += m
    return served, calls, steps


def llama_serve_loop(rng, until, limit):
    return serve(*llama_model(), rng, until, limit)


def neox_serve_loop(rng, until, limit):
    return serve(*neox_model(), rng, until, limit)


if __name__ == "__main__":
    main(globals(), ("requests", "calls", "steps"))
