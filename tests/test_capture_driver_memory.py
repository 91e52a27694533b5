"""The capture hook's notes of the device memory the CUDA driver takes for itself
(``allocreplay/capture/_driver_memory.py``, issue 29 item 1), driven by a stand-in for torch
that plays back what an H100 showed in gpt2_small_train (research/driver-probes/s23/): free
memory falling by more than PyTorch's reserved memory rose is the driver's, noted with the index
of the allocation it came before; a segment alone notes nothing; nothing is read while a CUDA
graph is being captured."""

from __future__ import annotations

from typing import Any

import pytest

from allocreplay.capture import _driver_memory

MIB = 1 << 20


class FakeCuda:
    def __init__(self) -> None:
        self.free = 80_000 * MIB
        self.reserved = 0
        self.allocated = 0
        self.capturing = False
        self.reads = 0

    device = 0

    def current_device(self) -> int:
        return self.device

    def memory_stats(self, device: int) -> dict[str, int]:
        return {"allocation.all.allocated": self.allocated}

    def mem_get_info(self, device: int) -> tuple[int, int]:
        self.reads += 1
        return self.free, 80_000 * MIB

    def memory_reserved(self, device: int) -> int:
        return self.reserved

    def is_current_stream_capturing(self) -> bool:
        return self.capturing


class FakeCudart:
    """``torch.cuda.cudart()``: the binding the hook reads free memory through."""

    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    def cudaMemGetInfo(self, device: int) -> tuple[int, int]:
        return self.cuda.mem_get_info(device)


class FakeCudaWithCudart(FakeCuda):
    def cudart(self) -> FakeCudart:
        return FakeCudart(self)


class FakeTorch:
    def __init__(self, cudart: bool = False) -> None:
        self.cuda = FakeCudaWithCudart() if cudart else FakeCuda()


def alloc(torch: Any, notes: _driver_memory.DriverMemory, segment: int = 0, driver: int = 0) -> None:
    """One allocation of the caching allocator: the driver's memory taken since the last one,
    then a segment if the allocation needed one, then the callback."""
    cuda = torch.cuda
    cuda.free -= driver + segment
    cuda.reserved += segment
    cuda.allocated += 1
    notes.on_alloc(0)


@pytest.mark.parametrize("cudart", [False, True], ids=["mem_get_info", "cudart"])
def test_the_driver_memory_is_noted_before_the_allocation_that_sees_it(cudart: bool) -> None:
    torch = FakeTorch(cudart)
    notes = _driver_memory.DriverMemory(torch)
    alloc(torch, notes, segment=64 * MIB)  # index 0: the first segment, the baseline
    for _ in range(76):
        alloc(torch, notes)
    alloc(torch, notes, driver=2 * MIB)  # index 77
    alloc(torch, notes, driver=90 * MIB, segment=20 * MIB)  # index 78, with a segment
    alloc(torch, notes, segment=26 * MIB)  # a segment alone: nothing
    assert notes.changes == [[77, 2 * MIB], [78, 90 * MIB]]
    out = notes.to_json()
    assert out is not None and out["changes"] == notes.changes and out["error"] is None and out["device"] == 0


def test_nothing_is_read_while_a_graph_is_captured_but_allocations_are_counted() -> None:
    torch = FakeTorch()
    notes = _driver_memory.DriverMemory(torch)
    alloc(torch, notes, segment=20 * MIB)
    torch.cuda.capturing = True
    reads = torch.cuda.reads
    alloc(torch, notes, driver=8 * MIB)  # index 1, inside the capture: not read
    assert torch.cuda.reads == reads
    torch.cuda.capturing = False
    alloc(torch, notes)  # index 2 sees it
    assert notes.changes == [[2, 8 * MIB]]


def test_another_devices_allocations_are_not_counted() -> None:
    torch = FakeTorch()
    notes = _driver_memory.DriverMemory(torch)
    alloc(torch, notes, segment=20 * MIB)  # index 0 on device 0
    torch.cuda.device = 1
    alloc(torch, notes, driver=8 * MIB)  # device 1's: not counted, not read
    torch.cuda.device = 0
    alloc(torch, notes)  # index 1 on device 0 sees the free memory that fell
    assert notes.changes == [[1, 8 * MIB]]


def test_a_failing_read_stops_the_notes_and_says_why() -> None:
    torch = FakeTorch()
    notes = _driver_memory.DriverMemory(torch)
    alloc(torch, notes, segment=20 * MIB)

    def broken(device: int) -> tuple[int, int]:
        raise RuntimeError("cudaMemGetInfo failed")

    torch.cuda.mem_get_info = broken  # type: ignore[method-assign]
    alloc(torch, notes, driver=2 * MIB)
    alloc(torch, notes)
    out = notes.to_json()
    assert out is not None and out["error"] == "RuntimeError: cudaMemGetInfo failed" and out["changes"] == []


def test_nothing_is_written_when_nothing_was_allocated() -> None:
    assert _driver_memory.DriverMemory(FakeTorch()).to_json() is None


def test_the_recorder_installs_each_note_or_logs_why_not(capsys: pytest.CaptureFixture[str]) -> None:
    from allocreplay.capture import _pytorch

    class Module:
        def _apply(self, fn: Any) -> Any:
            return self

    class Torch:
        nn = type("nn", (), {"Module": Module})

    original = Module._apply
    rec = _pytorch.TorchRecorder.__new__(_pytorch.TorchRecorder)
    rec.torch = Torch
    host_va = rec._install("host ranges", "_hostva", "HostVA")
    assert host_va is not None and Module._apply is not original  # wrapped by HostVA.install()
    assert rec._install("the driver's memory", "_no_such_module", "DriverMemory") is None
    assert "not noting the driver's memory: ModuleNotFoundError" in capsys.readouterr().err


def test_each_change_noted_is_passed_on_with_its_index() -> None:
    # The recorder hands each change's index to `_hostva`'s `note_driver_change` this way.
    torch = FakeTorch()
    notes = _driver_memory.DriverMemory(torch)
    seen: list[int] = []
    notes.on_change = seen.append
    alloc(torch, notes, segment=20 * MIB)  # index 0: the baseline
    alloc(torch, notes, driver=2 * MIB)  # index 1
    alloc(torch, notes, segment=20 * MIB)  # a segment alone: no change, no call
    alloc(torch, notes, driver=64 * MIB)  # index 3
    assert seen == [1, 3] and [c[0] for c in notes.changes] == seen


def maps_line(lo: int, hi: int, path: str) -> str:
    return f"{lo:x}-{hi:x} rw-s 00000000 00:01 1234 {path}"


def test_the_drivers_pinned_host_mappings_are_noted_before_the_allocation_that_sees_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # densenet121_train on an H100 (research/driver-probes/s38/): an 8.25 MiB `/dev/zero
    # (deleted)` mapping at a region hole's base came with the first cuBLAS call, beside the
    # context's 2 MiB ones mapped before the first segment.
    base = 0x7F124FE00000
    state = {"maps": [maps_line(base + 106 * MIB, base + 108 * MIB, _driver_memory.PINNED)], "shared": "100", "reads": 0}

    def read_maps() -> str:
        state["reads"] += 1
        return "\n".join(state["maps"]) + "\n"

    monkeypatch.setattr(_driver_memory, "read_maps", read_maps)
    monkeypatch.setattr(_driver_memory, "read_shared_pages", lambda: state["shared"])
    torch = FakeTorch()
    notes = _driver_memory.DriverMemory(torch)
    alloc(torch, notes, segment=20 * MIB)  # index 0: what is mapped now is known, not noted
    alloc(torch, notes)  # free memory unchanged: nothing read
    assert state["reads"] == 1
    lo = base - 5930 * MIB
    state["maps"] += [
        maps_line(lo, lo + 8_654_848, _driver_memory.PINNED),
        # The host's own shared mappings end at a gap's top, not at a 2 MiB boundary.
        maps_line(base - 77 * MIB - 4096, base - 70 * MIB - 4096, _driver_memory.PINNED),
        maps_line(lo - 64 * MIB, lo, ""),
    ]
    state["shared"] = "2213"
    alloc(torch, notes, segment=32 * MIB)  # index 2: a segment, and the shared pages moved
    assert notes.host == [[2, 8_654_848]]
    # A segment with the shared pages unchanged reads nothing; the driver's device memory always does.
    reads = state["reads"]
    alloc(torch, notes, segment=32 * MIB)
    assert state["reads"] == reads
    state["maps"].append(maps_line(base - 498 * MIB, base - 496 * MIB, _driver_memory.PINNED))
    alloc(torch, notes, driver=64 * MIB)  # index 4
    assert notes.host == [[2, 8_654_848], [4, 2 * MIB]]
    out = notes.to_json()
    assert out is not None and out["host"] == notes.host and out["host_error"] is None


def test_a_failing_maps_read_stops_the_pinned_notes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> str:
        raise PermissionError("/proc/self/maps")

    monkeypatch.setattr(_driver_memory, "read_maps", broken)
    torch = FakeTorch()
    notes = _driver_memory.DriverMemory(torch)
    alloc(torch, notes, segment=20 * MIB)
    alloc(torch, notes, driver=2 * MIB)
    out = notes.to_json()
    assert out is not None and out["host_error"] == "PermissionError: /proc/self/maps"
    assert out["changes"] == [[1, 2 * MIB]] and out["error"] is None
