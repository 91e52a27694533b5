"""Session 39 held-out workloads for issue 30's "recordings you did not tune on": two model
families the project never recorded, profiled nor tuned on (this session's speed work was
profiled on traces/large/opt350_serve__default only):
- starcoder2_serve: a StarCoder2-style fp16 decoder (grouped-query attention, sliding window)
  answering sampled requests (batch 1-16, prompts 16-800 tokens, 8-48 new tokens, top-k 50): a
  serving run with many small, varied requests;
- marian_beam: a Marian-style fp16 encoder-decoder translating with beam search (3 beams, batch
  1-6, sources 16-400 tokens, 8-48 new tokens): a generate run.
Seed 0, random.Random(0); each runs requests until SECONDS have passed or REQUESTS are answered.
Usage: python workloads_s39.py NAME SECONDS [REQUESTS]"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads_s29 import main  # noqa: E402


def starcoder2_serve(rng, requests):
    from transformers import Starcoder2Config, Starcoder2ForCausalLM
    cfg = Starcoder2Config(hidden_size=1024, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=4,
                           vocab_size=49152, max_position_embeddings=4096, sliding_window=512)
    model = Starcoder2ForCausalLM(cfg).cuda().half().eval()
    with torch.no_grad():
        while requests.more():
            bs = rng.randint(1, 16); n = rng.randint(16, 800); m = rng.randint(8, 48)
            x = torch.randint(0, cfg.vocab_size, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0,
                           do_sample=True, top_k=50)


def marian_beam(rng, requests):
    from transformers import MarianConfig, MarianMTModel
    cfg = MarianConfig(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
                       encoder_ffn_dim=2048, decoder_ffn_dim=2048, vocab_size=58101, decoder_vocab_size=58101, max_position_embeddings=512,
                       pad_token_id=58100, decoder_start_token_id=58100)
    model = MarianMTModel(cfg).cuda().half().eval()
    with torch.no_grad():
        while requests.more():
            bs = rng.randint(1, 6); n = rng.randint(16, 400); m = rng.randint(8, 48)
            x = torch.randint(0, 58000, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, num_beams=3, do_sample=False)


if __name__ == "__main__":
    main(globals())
