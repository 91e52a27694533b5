"""`allocreplay.capture()` in-process: only the training steps are recorded (the model and
optimizer state allocated before the block are seeds of the trace: live allocations whose
origin is not recorded)."""

import sys

import torch
from torch_train import LM

import allocreplay

out = sys.argv[1] if len(sys.argv) > 1 else "torch_inprocess.arrow"
torch.manual_seed(0)
model = LM().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
with allocreplay.capture(out) as cap:
    for bs, seq in [(8, 128), (16, 64), (4, 256)]:
        x = torch.randint(0, 8000, (bs, seq), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
for t in cap.traces:
    print(t.describe())
