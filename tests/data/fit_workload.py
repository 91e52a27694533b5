"""A small training loop for tests/test_fit.py: memory grows with --batch-size (each row of
the batch is --width float32 values, 256 KiB by default, through two linear layers and their
saved activations; AdamW)."""

import argparse
import os
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
parser.add_argument("--width", type=int, default=1 << 16)
args = parser.parse_args()
# tests/test_fit.py's Ctrl-C test: candidates above the first one take long.
if args.batch_size > 1:
    time.sleep(float(os.environ.get("FIT_WORKLOAD_SLEEP", "0")))

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)).to("cuda")
opt = torch.optim.AdamW(model.parameters())
for _ in range(2):
    x = torch.randn(args.batch_size * (args.width // 256), 256, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
