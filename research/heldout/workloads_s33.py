"""Session 33 held-out workloads (model families the project never recorded, and never profiled
or tuned on), for issue 30's "recordings you did not tune on" (the speed work of sessions 32-33
was profiled on gptj_sample and falcon_serve only):
- mixtral_serve: a Mixtral-style bf16 mixture of experts (8 experts, top-2 routing: each layer's
  tensors per expert vary with the tokens routed to it) answering greedy requests (batch 1-12,
  prompts 16-700 tokens, 8-64 new tokens): a serving run with many small, varied requests;
- bart_beam: a BART-style fp16 encoder-decoder summarising with beam search (2 beams, batch 1-8,
  sources 32-900 tokens, 8-64 new tokens): a generate run.
Seed 0, random.Random(0); each runs requests until SECONDS have passed or REQUESTS are answered
(what-if runs under other allocator settings then make the same requests);
WORKLOAD_MEMORY_FRACTION sets torch.cuda.set_per_process_memory_fraction first (a cap).
Usage: python workloads_s33.py NAME SECONDS [REQUESTS]"""
import os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads_s29 import main  # noqa: E402


def mixtral_serve(rng, requests):
    from transformers import MixtralConfig, MixtralForCausalLM
    cfg = MixtralConfig(hidden_size=768, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=12, num_key_value_heads=4,
                        num_local_experts=8, num_experts_per_tok=2, vocab_size=32000, max_position_embeddings=4096)
    model = MixtralForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    with torch.no_grad():
        while requests.more():
            bs = rng.randint(1, 12); n = rng.randint(16, 700); m = rng.randint(8, 64)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, do_sample=False)


def bart_beam(rng, requests):
    from transformers import BartConfig, BartForConditionalGeneration
    cfg = BartConfig(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12, decoder_attention_heads=12,
                     encoder_ffn_dim=3072, decoder_ffn_dim=3072, vocab_size=50265, max_position_embeddings=1024)
    model = BartForConditionalGeneration(cfg).cuda().half().eval()
    with torch.no_grad():
        while requests.more():
            bs = rng.randint(1, 8); n = rng.randint(32, 900); m = rng.randint(8, 64)
            x = torch.randint(3, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, num_beams=2, do_sample=False)


if __name__ == "__main__":
    main(globals())
