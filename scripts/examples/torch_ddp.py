"""DistributedDataParallel training of the example LM on every GPU, one process per GPU, for
`allocreplay capture`'s multi-GPU path (one trace per device):

    allocreplay capture -o ddp.arrow -- python -m torch.distributed.run --nproc_per_node 2 scripts/examples/torch_ddp.py
"""

import os
import random

import torch
import torch.distributed as dist
from torch import nn
from torch_train import LM


def main() -> None:
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    rng = random.Random(rank)
    model = nn.parallel.DistributedDataParallel(LM().cuda(), device_ids=[rank])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _step in range(3):
        bs, seq = rng.choice([4, 8]), rng.randint(32, 128)
        x = torch.randint(0, 8000, (bs, seq), device="cuda")
        loss = nn.functional.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
