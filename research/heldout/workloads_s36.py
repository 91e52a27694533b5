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
from workloads_s34 import llama_model, main, neox_model, requests  # session 34's models, requests and report
from workloads_s35 import serve  # session 35's decoding loop


def wide_requests(vocab, rng, until, limit):
    """Batches of 64-1,024 requests of 16-256 prompt tokens, 1-6 new tokens each."""
    return requests(vocab, rng, until, limit, batch=(64, 1024), prompt=(16, 256))


def llama_serve_wide(rng, until, limit):
    return serve(*llama_model(), rng, until, limit, wide_requests, logits_to_keep=1)


def neox_serve_wide(rng, until, limit):
    return serve(*neox_model(), rng, until, limit, wide_requests, logits_to_keep=1)


if __name__ == "__main__":
    main(globals(), ("requests", "calls", "steps"))
