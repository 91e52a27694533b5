"""A PyTorch run that runs out of memory: under a 1 GiB cap
(``torch.cuda.set_per_process_memory_fraction``) it keeps growing a cache of activations, as a
generation loop's KV cache does, until the caching allocator raises OutOfMemoryError. The
capture is written anyway (the hook dumps the snapshot at exit), with the cap in its metadata.
"""

import torch

CAP = 1 << 30
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(CAP / total)
cache = []
step = 0
while True:
    # 24 MiB of new state per step and a temporary twice that size, freed each step.
    cache.append(torch.empty(6 << 20, dtype=torch.float32, device="cuda"))
    tmp = torch.empty(12 << 20, dtype=torch.float32, device="cuda")
    del tmp
    step += 1
    print(f"step {step}: {torch.cuda.memory_allocated() / 2**20:.0f} MiB allocated", flush=True)
