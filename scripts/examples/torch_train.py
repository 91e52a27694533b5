"""A small PyTorch training run for `allocreplay capture`'s examples: a 2-layer transformer
language model, AdamW, bf16 autocast, and a new batch shape every step (the dynamic shapes that
fragment the caching allocator's cache). Nothing in it knows about allocreplay:

    allocreplay capture -o torch_train.arrow -- python scripts/examples/torch_train.py
"""

import argparse
import random

import torch
from torch import nn


class LM(nn.Module):
    def __init__(self, vocab: int = 8000, d: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d_model=d, nhead=4, dim_feedforward=4 * d, batch_first=True)
        self.body = nn.TransformerEncoder(layer, num_layers=layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.head(self.body(self.emb(x), mask=mask, is_causal=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    model = LM().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(a.steps):
        bs, seq = rng.choice([4, 8, 16]), rng.randint(32, 256)
        x = torch.randint(0, 8000, (bs, seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: batch {bs}x{seq} loss {loss.item():.3f}", flush=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
