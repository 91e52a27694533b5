"""``allocreplay.devices()`` and ``allocreplay devices``: the device catalogue as rows."""

from __future__ import annotations

from typing import Any

import polars as pl

from allocreplay.capture._devices import DEVICES, GIB, Device, lookup

__all__ = ["device_row", "device_rows", "devices", "lookup"]


def device_row(d: Device) -> dict[str, Any]:
    """One device as a flat dict: memory in bytes and GiB, and where each number comes from."""
    return {
        "key": d.key,
        "name": d.name,
        "total_bytes": d.total_bytes,
        "total_gib": round(d.total_bytes / GIB, 3),
        "context_bytes": d.context_bytes,
        "context_gib": round(d.context_bytes / GIB, 3),
        "usable_bytes": d.usable_bytes,
        "usable_gib": round(d.usable_bytes / GIB, 3),
        "compute_capability": f"{d.compute_capability[0]}.{d.compute_capability[1]}",
        "sms": d.sms,
        "source_total": d.source_total,
        "source_context": d.source_context,
    }


def device_rows(keys: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The named devices (every one when ``keys`` is empty), in catalogue order. Raises
    ValueError for an unknown key, naming the known ones."""
    chosen = [lookup(k) for k in keys] if keys else list(DEVICES.values())
    return [device_row(d) for d in chosen]


def devices() -> pl.DataFrame:
    """The device catalogue, one row per card: ``key``, ``name``, ``total_bytes`` (what
    ``torch.cuda.get_device_properties(0).total_memory`` reports), ``context_bytes`` (the CUDA
    context and libraries' share, outside the caching allocator), ``usable_bytes`` (the
    difference: where ``cudaMalloc`` starts failing), each also in GiB, ``compute_capability``,
    ``sms``, and ``source_total`` / ``source_context`` (where the numbers come from)."""
    return pl.DataFrame(device_rows())
