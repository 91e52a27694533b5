"""The device catalogue: named cards, their memory as PyTorch sees it, and the share of it a
PyTorch process cannot give its caching allocator.

``total_bytes`` is what ``torch.cuda.get_device_properties(0).total_memory`` reports on the card
(``cudaGetDeviceProperties``' ``totalGlobalMem``, also ``deviceQuery``'s "Total amount of global
memory" in bytes). It is less than the card's nominal size and less than ``nvidia-smi``'s
``memory.total`` (the driver keeps some), and it moves by a few tens of MiB between drivers;
each entry says which report it comes from. Where only torch's print is public
(``total_memory=NNNNNMB``: MiB, floored) the bytes are ``NNNNN × 1,048,576``.

``context_bytes`` is the memory the CUDA context and the libraries PyTorch loads on first use
(cuBLAS, cuBLASLt, the attention kernels) take outside the caching allocator: ``usable_bytes``
is where ``cudaMalloc`` starts failing for a PyTorch process. Measured on the project's H200
(the replay engine's ``PYTORCH_CUDA_CONTEXT_BYTES``); the other cards use that measurement,
which is larger than the public context-only figures for torch with lazy module loading (see
``CONTEXT_ESTIMATE``): an estimate on the larger side, so that a workload said to fit does.

Only the standard library: this file is copied beside ``_nogpu`` into the recorded process.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30

# tests/data/va-h200-580.159.txt (`footprint`), rust/allocreplay-core/src/replay.rs.
H200_CONTEXT_BYTES = 726_466_560
H200_CONTEXT = (
    "measured on the project's H200 (driver 580.159.04, torch 2.11.0+cu130): total - free - reserved after "
    "torch.cuda.init(), a matmul, a bf16 matmul and SDPA; filling the device then stopped at total - 726,466,560 "
    "(tests/data/va-h200-580.159.txt)"
)
CONTEXT_ESTIMATE = (
    "not measured on this card: the H200's 726,466,560 (context + cuBLAS/cuBLASLt + SDPA kernels), taken as a "
    "larger-side estimate; public context-only figures for torch with lazy module loading are smaller "
    "(287,047,680 B: pytorch/pytorch#86509; ~300-400 MB: pytorch/pytorch#107667, #109888); CUDA < 11.7 or "
    "CUDA_MODULE_LOADING=EAGER loads every kernel and takes >1 GB (#107667): pass --capacity then"
)


@dataclass(frozen=True)
class Device:
    """One card: ``key`` (the catalogue's name), ``name`` (as torch reports it), memory in bytes
    and where each number comes from."""

    key: str
    name: str
    total_bytes: int
    context_bytes: int
    compute_capability: tuple[int, int]
    sms: int
    source_total: str
    source_context: str

    @property
    def usable_bytes(self) -> int:
        """What the caching allocator can get: ``total_bytes - context_bytes``."""
        return self.total_bytes - self.context_bytes


def _device(key: str, name: str, total: int, cc: tuple[int, int], sms: int, source_total: str) -> Device:
    return Device(key, name, total, H200_CONTEXT_BYTES, cc, sms, source_total, CONTEXT_ESTIMATE)


_ENTRIES = (
    Device(
        "h200",
        "NVIDIA H200",
        150_109_880_320,
        H200_CONTEXT_BYTES,
        (9, 0),
        132,
        "measured: torch.cuda.get_device_properties(0).total_memory on the project's H200, driver 580.159.04 "
        "(tests/data/va-h200-580.159.txt, shared/traces/pytorch)",
        H200_CONTEXT,
    ),
    _device(
        "h100-80gb",
        "NVIDIA H100 80GB HBM3",
        85_045_477_376,
        (9, 0),
        132,
        "deviceQuery, driver 12.7: 85045477376 bytes (github thamada/nvidia-smi nvsim/H100SXMx8_deviceQuery.py); torch prints 81082-81090 MiB on other drivers",
    ),
    _device(
        "h100-pcie",
        "NVIDIA H100 PCIe",
        81_008 * MIB,
        (9, 0),
        114,
        "torch print total_memory=81008MB, multi_processor_count=114 (public GitHub text; MiB floored, x 1,048,576)",
    ),
    _device(
        "a100-80gb",
        "NVIDIA A100-SXM4-80GB",
        85_100_068_864,
        (8, 0),
        108,
        "deviceQuery, driver 12.5: 85100068864 bytes (github thamada/nvidia-smi A100SXMx4_deviceQuery.py); 84987740160 with driver 12.2",
    ),
    _device(
        "a100-40gb",
        "NVIDIA A100-SXM4-40GB",
        42_298_834_944,
        (8, 0),
        108,
        "deviceQuery, driver 12.2: 42298834944 bytes (github bottlerocket-os/bottlerocket#3873); torch prints 40536MB with older drivers",
    ),
    _device(
        "l40s",
        "NVIDIA L40S",
        47_803_596_800,
        (8, 9),
        142,
        "deviceQuery, driver 12.4: 47803596800 bytes (github thamada/nvidia-smi nvsim/L40S_deviceQuery.py); torch prints 45589MB",
    ),
    _device(
        "l4",
        "NVIDIA L4",
        23_570_219_008,
        (8, 9),
        58,
        "deviceQuery, driver 12.4: 23570219008 bytes (github thamada/nvidia-smi gls/L4_deviceQuery.py); 23612293120 with driver 12.0",
    ),
    _device(
        "a10g",
        "NVIDIA A10G",
        22_587 * MIB,
        (8, 6),
        80,
        "torch 2.x print total_memory=22587MB, multi_processor_count=80 (public GitHub text; MiB floored, x 1,048,576)",
    ),
    _device(
        "a6000",
        "NVIDIA RTX A6000",
        51_160_023_040,
        (8, 6),
        84,
        "deviceQuery, driver 12.7: 51160023040 bytes, 84 SMs (public GitHub text); torch prints 48676MB with older drivers",
    ),
    _device(
        "rtx4090",
        "NVIDIA GeForce RTX 4090",
        25_386_352_640,
        (8, 9),
        128,
        "deviceQuery, Linux, driver 12.4: 25386352640 bytes (github thamada/nvidia-smi gls/RTX4090_deviceQuery.py); "
        "a card driving a display or under Windows (WDDM) has less",
    ),
    _device(
        "rtx3090",
        "NVIDIA GeForce RTX 3090",
        25_286_672_384,
        (8, 6),
        82,
        "cudaGetDeviceProperties: 25286672384 bytes (github Jumperkables/cuda-benchmarking 00_deviceQuery/README.md); torch prints 24259-24268MB",
    ),
    _device(
        "v100-32gb",
        "Tesla V100-SXM2-32GB",
        34_072_559_616,
        (7, 0),
        80,
        "deviceQuery, driver 12.9: 34072559616 bytes (public GitHub text); 34089926656 with drivers 11.6-13.0",
    ),
    _device(
        "v100-16gb",
        "Tesla V100-SXM2-16GB",
        16_160 * MIB,
        (7, 0),
        80,
        "torch print total_memory=16160MB, multi_processor_count=80 (ultralytics YOLOv5 logs; MiB floored, x 1,048,576)",
    ),
    _device(
        "t4",
        "Tesla T4",
        15_095 * MIB,
        (7, 5),
        40,
        "Colab, driver 12.4: deviceQuery 15095 MBytes (github sylvia-ymlin/cuda-kernels-from-scratch README.md) and "
        "torch 2.x print total_memory=15095MB; x 1,048,576; other drivers 14930-15109 MiB",
    ),
)

# Every key, with the names people also write.
ALIASES = {
    "h100": "h100-80gb",
    "h100-sxm": "h100-80gb",
    "h100-sxm5": "h100-80gb",
    "h100-80gb-hbm3": "h100-80gb",
    "a100-80g": "a100-80gb",
    "a100-40g": "a100-40gb",
    "a100-sxm4-80gb": "a100-80gb",
    "a100-sxm4-40gb": "a100-40gb",
    "h200-141gb": "h200",
    "rtx-4090": "rtx4090",
    "rtx-3090": "rtx3090",
    "rtx-a6000": "a6000",
    "rtxa6000": "a6000",
    "v100-32g": "v100-32gb",
    "v100-16g": "v100-16gb",
    "tesla-t4": "t4",
}

DEVICES: dict[str, Device] = {d.key: d for d in _ENTRIES}


def _normal(key: str) -> str:
    return "-".join(key.strip().lower().replace("_", " ").replace("-", " ").split())


def lookup(key: str) -> Device:
    """The device named ``key`` (``h200``, ``A100_80GB``, ``rtx 4090``...: case, ``_`` and spaces
    do not matter). Raises ValueError naming the known keys."""
    k = _normal(key)
    k = ALIASES.get(k, k)
    if k in DEVICES:
        return DEVICES[k]
    # "nvidia h200", or the name torch reports.
    for d in _ENTRIES:
        if _normal(d.name) == k or _normal(d.name).removeprefix("nvidia-") == k:
            return d
    raise ValueError(f"unknown device {key!r}; known: {', '.join(DEVICES)}")
