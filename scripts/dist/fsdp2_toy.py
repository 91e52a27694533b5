"""A small FSDP2 training job (``torch.distributed.fsdp.fully_shard``), for ``capture --no-gpu
--world-size N`` and its real one-GPU run (traces/dist/fsdp2toy1gpu__*): four blocks of
LayerNorm, Linear(256, 1024), Linear(1024, 256) and a Linear(256, 37) whose 37 rows divide
evenly by no world size above 1 (FSDP2 pads the shards to ceil(37 / N) rows, the last rank's
optimizer state holds only its own rows), each block sharded, AdamW, 3 steps of batch 8 x 128.

    torchrun --standalone --nproc_per_node 1 scripts/dist/record.py OUT scripts/dist/fsdp2_toy.py
    allocreplay capture --no-gpu --world-size 8 --all-ranks -o run.arrow -- python scripts/dist/fsdp2_toy.py
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

dist.init_process_group("nccl")
rank, ws = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.up = torch.nn.Linear(d, h)  # h rows: 4*d
        self.down = torch.nn.Linear(h, d)
        self.odd = torch.nn.Linear(d, 37, bias=False)  # 37 rows: uneven over 2 and 8 ranks
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x)))) + self.odd(x).sum(-1, keepdim=True)


model = torch.nn.Sequential(*[Block(256, 1024) for _ in range(4)]).cuda()
for b in model:
    fully_shard(b)
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _step in range(3):
    x = torch.randn(8, 128, 256, device="cuda")
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
dist.barrier()
dist.destroy_process_group()
