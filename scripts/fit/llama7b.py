"""A 7 B-parameter Llama decoder trained from scratch: Llama-2-7B's config (32 layers, 4096
wide, MLP 11008, 32 heads, vocabulary 32000), built with
LlamaForCausalLM(LlamaConfig(...)) on the CPU and moved with .to("cuda"), as users do. Float32
weights, AdamW (PyTorch's default foreach path), torch.autocast("cuda", dtype=torch.bfloat16)
around the forward and the loss; backward and the optimizer step outside it.

A plain user script: it knows nothing of allocreplay. Runs --steps steps and exits 0; out of
memory, torch.OutOfMemoryError propagates (non-zero exit, the error on stderr)."""

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        vocab_size=32000,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model = model.to("cuda")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(args.steps):
        input_ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
