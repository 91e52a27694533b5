"""The JAX runtime's allocations for a compiled program (`plan --runtime`), replayed under JAX's
allocator: for jaxlm's train_step the peak in use must reach the program's own
memory_analysis() peak (16,654,169,364 bytes: ../shared/traces/README.md) and stay under the
real run's peak_bytes_in_use (16,726,397,696: jaxlm__default.json), which also held the input
batches."""

from __future__ import annotations

import pytest

import allocreplay
from conftest import REPO, run_subprocess

DUMP = REPO.parent / "shared" / "traces" / "jax" / "jaxlm_xla_dump"
MEMORY_ANALYSIS_PEAK = 16_654_169_364
REAL_PEAK_IN_USE = 16_726_397_696


def test_runtime_trace_replays_to_the_programs_peak(tmp_path):
    assert DUMP.is_dir(), f"missing fixture {DUMP}"
    out = tmp_path / "step.arrow"
    run = run_subprocess("plan", DUMP, "--runtime", out, "--calls", "4")
    assert run.code == 0, run.err
    trace = allocreplay.load(out)
    rows = allocreplay.replay(trace, ["bfc:allow_growth=true", "ideal"], placements=False).summary
    by = {r["policy"]: r for r in rows.iter_rows(named=True)}
    # Live bytes: arguments (or last outputs) + new outputs + temp arena, within 0.001% of
    # XLA's own peak estimate (which adds small constants the runtime allocates elsewhere).
    assert abs(by["ideal"]["peak_reserved_bytes"] - MEMORY_ANALYSIS_PEAK) / MEMORY_ANALYSIS_PEAK < 1e-5
    assert MEMORY_ANALYSIS_PEAK * 0.9999 <= by["bfc:allow_growth=true"]["peak_allocated_bytes"] <= REAL_PEAK_IN_USE


def test_runtime_program_must_exist():
    with pytest.raises(allocreplay.InvalidArgumentError, match="no program matching"):
        allocreplay.xla_runtime(DUMP, program="no_such_program")
