"""Measures cuDNN's convolution workspaces on a GPU, for `capture --no-gpu`'s model of them.

    python research/nogpu/probe_cudnn.py OUT.json [--models resnet50,...] [--batches 32,64,96]

For each model (torchvision, random weights), batch size and precision (float32, and autocast
to bfloat16 and to float16), one training step (forward and backward, PyTorch's defaults: cuDNN
heuristics, TF32 allowed) collects every
convolution the model runs (aten::convolution and aten::convolution_backward with their
shapes, strides, padding, dilation, groups and output mask); then each distinct convolution is
run alone, once per direction (forward; backward for the input gradient only; backward for the
weight gradient only), with the allocator's history recorded, and every request it makes is
written out in order: its outputs, and the workspaces it frees before returning (Conv_v8.cpp,
run_single_conv).

The models measured here are the ones the workspace table is built from; the no-GPU
comparison's held-out workloads (densenet121, convnext_tiny) are deliberately not among the
defaults (docs/no-gpu.md).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torchvision
from torch.utils._python_dispatch import TorchDispatchMode

DEFAULT_MODELS = "resnet18,resnet34,resnet50,resnet101,wide_resnet50_2,resnext50_32x4d,vgg11,efficientnet_b0,mobilenet_v3_large,regnet_y_400mf"
aten = torch.ops.aten


class Collect(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, dict] = {}
        self.model = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func is aten.convolution.default:
            x, w, b, stride, padding, dilation, transposed, out_pad, groups = args
            self.add("forward", x, w, b is not None, stride, padding, dilation, transposed, out_pad, groups)
        elif func is aten.convolution_backward.default:
            _go, x, w, _bias_sizes, stride, padding, dilation, transposed, out_pad, groups, mask = args
            if mask[0]:
                self.add("data", x, w, False, stride, padding, dilation, transposed, out_pad, groups)
            if mask[1]:
                self.add("filter", x, w, False, stride, padding, dilation, transposed, out_pad, groups)
        return func(*args, **kwargs)

    def add(self, direction, x, w, bias, stride, padding, dilation, transposed, out_pad, groups):  # type: ignore[no-untyped-def]
        c = {
            "direction": direction,
            "x": list(x.shape),
            "w": list(w.shape),
            "dtype": str(x.dtype).replace("torch.", ""),
            "channels_last": bool(x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()),
            "stride": list(stride),
            "padding": list(padding),
            "dilation": list(dilation),
            "transposed": bool(transposed),
            "output_padding": list(out_pad),
            "groups": int(groups),
            "bias": bool(bias),
        }
        row = self.seen.setdefault(json.dumps(c, sort_keys=True), {**c, "models": []})
        if self.model not in row["models"]:
            row["models"].append(self.model)


def requests(fn) -> list[list]:  # type: ignore[no-untyped-def]
    """The requests fn makes and frees while it runs, in order: ["alloc"|"free", size]; the
    outputs it returns are allocated and not freed."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000, context=None, stacks="python")
    keep = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    del keep
    trace = snap["device_traces"][torch.cuda.current_device()]
    return [[e["action"], e["size"]] for e in trace if e["action"] in ("alloc", "free_requested")]


def measure(c: dict) -> list[list]:
    dt = getattr(torch, c["dtype"])
    fmt = torch.channels_last if c["channels_last"] else torch.contiguous_format
    x = torch.randn(c["x"], device="cuda", dtype=dt).contiguous(memory_format=fmt)
    w = torch.randn(c["w"], device="cuda", dtype=dt).contiguous(memory_format=fmt)
    b = torch.randn(c["w"][0], device="cuda", dtype=dt) if c["bias"] else None
    args = (c["stride"], c["padding"], c["dilation"], c["transposed"], c["output_padding"], c["groups"])
    y = aten.convolution(x, w, b, *args)
    go = torch.randn_like(y)
    if c["direction"] == "forward":
        fn = lambda: aten.convolution(x, w, b, *args)  # noqa: E731
    else:
        mask = [c["direction"] == "data", c["direction"] == "filter", False]
        fn = lambda: aten.convolution_backward(go, x, w, None, *args, mask)  # noqa: E731
    fn()  # the plan cache warmed as in a run's later steps (the first call's plan is the same)
    return requests(fn)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--batches", default="16,32,64,96,128")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--autocast", default="none,bfloat16,float16", help="steps run in float32 (none) and under these autocast dtypes")
    a = ap.parse_args()
    torch.manual_seed(0)
    collect = Collect()
    for name in a.models.split(","):
        model = getattr(torchvision.models, name)().cuda()
        collect.model = name
        for bs in (int(b) for b in a.batches.split(",")):
            for cast in a.autocast.split(","):
                x = torch.randn(bs, 3, a.size, a.size, device="cuda")
                with collect, torch.autocast("cuda", dtype=getattr(torch, cast) if cast != "none" else torch.bfloat16, enabled=cast != "none"):
                    model(x).float().sum().backward()
                model.zero_grad(set_to_none=True)
        del model
        torch.cuda.empty_cache()
        print(f"{name}: {len(collect.seen)} convolutions so far", flush=True)
    rows = []
    t0 = time.time()
    for c in collect.seen.values():
        rows.append({**c, "requests": measure({k: v for k, v in c.items() if k != "models"})})
        torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(0)
    meta = {
        "device": props.name,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "models": a.models.split(","),
        "batches": [int(b) for b in a.batches.split(",")],
        "autocast": a.autocast.split(","),
        "seconds": round(time.time() - t0, 1),
    }
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "convolutions": rows}, f)
    print(f"{len(rows)} convolutions measured in {meta['seconds']} s -> {a.out}")


if __name__ == "__main__":
    main()
