"""`ideal` and `offline` as replay policies: on every real PyTorch capture,
ideal <= offline <= the run's recorded peak reserved (its .json), offline within 5% of ideal."""

from __future__ import annotations

import pytest

import allocreplay
from conftest import shared_pytorch_pickles, sidecar


@pytest.mark.parametrize("path", shared_pytorch_pickles(), ids=lambda p: p.name.split(".")[0])
def test_offline_bounds_bracket_the_real_peak(path):
    rows = allocreplay.replay(path, ["ideal", "offline"], placements=False).summary
    meta = sidecar(path)
    for dev in rows["device"].unique():
        by = {r["policy"]: r for r in rows.filter(rows["device"] == dev).iter_rows(named=True)}
        stats = meta["memory_stats_per_device"][str(dev)] if "memory_stats_per_device" in meta else meta["memory_stats"]
        ideal, offline = by["ideal"]["peak_reserved_bytes"], by["offline"]["peak_reserved_bytes"]
        assert ideal <= offline <= stats["reserved_bytes.all.peak"]
        assert offline <= ideal * 1.05


def test_offline_options_are_checked():
    with pytest.raises(allocreplay.PolicySpecError, match="alignment"):
        allocreplay.replay(shared_pytorch_pickles()[0], ["offline:align=3"])
