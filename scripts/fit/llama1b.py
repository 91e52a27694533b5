"""A ~1.1 B-parameter Llama decoder trained from scratch: TinyLlama-1.1B's config (22 layers,
2048 wide, MLP 5632, 32 heads, 4 key-value heads, vocabulary 32000), built with
LlamaForCausalLM(LlamaConfig(...)) on the CPU and moved with .to("cuda"), as users do
(`--config llama2-7b`: Llama-2-7B's shape, 32 layers, 4096 wide, MLP 11008, 32 heads). Float32
weights, AdamW (PyTorch's default foreach path), torch.autocast("cuda", dtype=torch.bfloat16)
around the forward and the loss; backward and the optimizer step outside it.

A plain user script: it knows nothing of allocreplay. Runs --steps steps and exits 0; out of
memory, torch.OutOfMemoryError propagates (non-zero exit, the error on stderr)."""

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "tinyllama-1.1b": {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4},
    "llama2-7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--config", choices=sorted(SHAPES), default="tinyllama-1.1b")
    args = parser.parse_args()

    torch.manual_seed(0)
    config = LlamaConfig(
        **SHAPES[args.config],
        vocab_size=32000,
        max_position_embeddings=2048,
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
