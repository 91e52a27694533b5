"""A vision transformer trained from scratch: ViT-Base/16 (transformers' ViTConfig defaults:
12 layers, 768 wide, 12 heads, 224x224 images in 16x16 patches) with a 1000-class head, built
from a config (no download). Plain float32, SGD with momentum, random images and labels,
cross-entropy on the logits.

A plain user script: it knows nothing of allocreplay. Runs --steps steps and exits 0; out of
memory, torch.OutOfMemoryError propagates (non-zero exit, the error on stderr)."""

import argparse

import torch
import torch.nn.functional as F
from transformers import ViTConfig, ViTForImageClassification


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    config = ViTConfig(image_size=224, patch_size=16, num_labels=1000)
    model = ViTForImageClassification(config).to("cuda")
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(args.steps):
        images = torch.randn(args.batch_size, 3, 224, 224, device="cuda")
        labels = torch.randint(0, config.num_labels, (args.batch_size,), device="cuda")
        logits = model(pixel_values=images).logits
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
