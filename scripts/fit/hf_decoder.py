"""A Hugging Face decoder LM trained from scratch: GPT-2 small's shape (12 layers, 768 wide,
12 heads, vocabulary 50257), built from a config (no download), with room for 16,384
positions so that sequence lengths can be swept. Plain float32 (no autocast), AdamW, random
token batches; loss = model(input_ids, labels=input_ids).loss.

A plain user script: it knows nothing of allocreplay. Runs --steps steps and exits 0; out of
memory, torch.OutOfMemoryError propagates (non-zero exit, the error on stderr)."""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=16384)
    model = GPT2LMHeadModel(config).to("cuda")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(args.steps):
        input_ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device="cuda")
        loss = model(input_ids, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
