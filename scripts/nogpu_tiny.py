"""A small training step that exercises what `capture --no-gpu` models beyond the tensors: a
residual block of resnet50's layer1 (cuDNN workspaces, the autograd engine's in-place
gradient accumulation at the residual), a Linear layer's bias gradient over 2,048 rows (the
reduction's global staging buffer) and bfloat16 flash attention's backward (its scratch).

    python scripts/nogpu_tiny.py --record OUT   # on a GPU: OUT.pickle.xz (history) + OUT.json
    allocreplay capture --no-gpu -o run.arrow -- python scripts/nogpu_tiny.py

traces/nogpu/tiny_step__default.pickle.xz is this script's real run on an H200 (torch 2.11.0);
tests/test_nogpu.py compares the no-GPU trace with it request by request.
"""

from __future__ import annotations

import argparse
import json
import lzma
import pickle

import torch


def step() -> None:
    torch.manual_seed(0)
    conv1 = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).cuda()
    bn = torch.nn.BatchNorm2d(64).cuda()
    conv2 = torch.nn.Conv2d(64, 256, 1, bias=False).cuda()
    proj = torch.nn.Linear(768, 768).cuda()
    x = torch.randn(16, 64, 56, 56, device="cuda", requires_grad=True)
    h = torch.relu(bn(conv1(x))) + x  # x's gradient is accumulated: the residual
    y = conv2(h)
    t = torch.randn(2048, 768, device="cuda", requires_grad=True)
    z = proj(t)
    q = torch.randn(4, 8, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    loss = y.sum() + z.sum() + a.float().sum()
    loss.backward()
    torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", help="record the allocator's history (on a GPU) into RECORD.pickle.xz and RECORD.json")
    a = ap.parse_args()
    torch.cuda.init()
    if a.record:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, context=None)
    step()
    if a.record:
        snap = torch.cuda.memory._snapshot()
        with lzma.open(a.record + ".pickle.xz", "wb") as f:
            pickle.dump(snap, f)
        meta = {
            "workload": "scripts/nogpu_tiny.py",
            "device_name": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(),
            "memory_stats": dict(torch.cuda.memory_stats()),
        }
        with open(a.record + ".json", "w") as f:
            json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
