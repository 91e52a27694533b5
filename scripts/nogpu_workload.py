"""One workload, run as the real captures ran it (seed 0, torch.cuda.init() first), for
``allocreplay capture --no-gpu``: python scripts/nogpu_workload.py NAME STEPS.

gpt2_train, resnet50_train, llama_generate: ../shared/capture/torch_run.py (the script of the
real captures). densenet121_train, qwen2_train: scripts/nogpu_heldout.py (captured for real on
an H200 into traces/nogpu/). convnext_train: research/driver-probes/w.py's (traces/cuda/). efficientnet_train, mobilenet_train,
swin_train: research/driver-probes/asyncheld/workloads.py's (traces/cuda/). Both copied here: nothing in
scripts/ reads research/ (tests/test_research_is_out.py).
"""

import os
import random
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "shared", "capture"))


def convnext_train(steps: int, rng: random.Random) -> None:
    # research/driver-probes/w.py, convnext_train (the script of traces/cuda/convnext_train__*).
    import torchvision

    model = torchvision.models.convnext_tiny().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lossf = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        bs = rng.choice([32, 64, 96])
        x = torch.randn(bs, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (bs,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


# research/driver-probes/asyncheld/workloads.py's _vision_train, efficientnet_train, mobilenet_train
# and swin_train (the script of traces/cuda/NAME__default: real runs), the same code.
def _vision_train(model: torch.nn.Module, steps: int, rng: random.Random, sizes: list[int], opt: torch.optim.Optimizer, autocast: bool) -> None:
    lossf = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        bs = rng.choice(sizes)
        x = torch.randn(bs, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (bs,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def efficientnet_train(steps: int, rng: random.Random) -> None:
    import torchvision

    model = torchvision.models.efficientnet_b0().cuda()
    _vision_train(model, steps, rng, [32, 64, 128], torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), False)


def mobilenet_train(steps: int, rng: random.Random) -> None:
    import torchvision

    model = torchvision.models.mobilenet_v3_large().cuda()
    _vision_train(model, steps, rng, [64, 128, 192], torch.optim.AdamW(model.parameters(), lr=1e-3), True)


def swin_train(steps: int, rng: random.Random) -> None:
    import torchvision

    model = torchvision.models.swin_t().cuda()
    _vision_train(model, steps, rng, [16, 32, 64], torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), False)


def main() -> None:
    name, steps = sys.argv[1], int(sys.argv[2])
    import nogpu_heldout

    workloads = {
        "densenet121_train": nogpu_heldout.densenet121_train,
        "qwen2_train": nogpu_heldout.qwen2_train,
        "convnext_train": convnext_train,
        "efficientnet_train": efficientnet_train,
        "mobilenet_train": mobilenet_train,
        "swin_train": swin_train,
    }
    if name not in workloads:
        import torch_run

        workloads.update(torch_run.WORKLOADS)
    torch.manual_seed(0)
    rng = random.Random(0)
    torch.cuda.init()
    workloads[name](steps, rng)


if __name__ == "__main__":
    main()
