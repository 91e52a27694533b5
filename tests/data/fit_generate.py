"""A generation loop for tests/test_fit.py: greedy decoding with a stopping test on the GPU's
values (`.item()`), as `generate` loops do; the KV cache grows with --batch-size."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
args = parser.parse_args()

torch.manual_seed(0)
vocab, width = 512, 256
emb = torch.nn.Embedding(vocab, width).to("cuda")
head = torch.nn.Linear(width, vocab).to("cuda")
tokens = torch.zeros(args.batch_size, 1, dtype=torch.long, device="cuda")
cache = []
with torch.no_grad():
    for _ in range(16):
        h = emb(tokens[:, -1:])
        cache.append(h.repeat(1, 1, 64))  # a KV cache that grows with the batch
        nxt = head(h).argmax(-1)
        tokens = torch.cat([tokens, nxt], dim=1)
        if (nxt == 7).all().item():  # the stopping test reads a value computed on the GPU
            break
