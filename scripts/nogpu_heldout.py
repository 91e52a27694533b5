"""Held-out workloads for allocreplay capture --no-gpu (not tuned on): a torchvision CNN and a
Hugging Face decoder. Same conventions as shared/capture/torch_run.py (seed 0, random.Random).
This is the script the real captures in traces/nogpu/ ran (as device/nogpu/heldout.py), formatted."""

import random
import sys

import torch


def densenet121_train(steps, rng):
    import torchvision

    model = torchvision.models.densenet121().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        bs = rng.choice([16, 32, 48])
        x = torch.randn(bs, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (bs,), device="cuda")
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def qwen2_train(steps, rng):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=8,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=32000,
        max_position_embeddings=4096,
    )
    model = Qwen2ForCausalLM(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        bs = rng.choice([2, 4, 8])
        seq = rng.randint(128, 1024)
        x = torch.randint(0, cfg.vocab_size, (bs, seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    name, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    rng = random.Random(0)
    {"densenet121_train": densenet121_train, "qwen2_train": qwen2_train}[name](steps, rng)
