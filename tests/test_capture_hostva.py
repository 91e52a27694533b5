"""The capture hook's notes of the host ranges freed while a model moves to the GPU
(``allocreplay/capture/_hostva.py``, issue 29 item 1): which ranges it reads from
``/proc/self/maps`` and which it notes as new. The layout below is the shape of a real one (an
H200 process of torch 2.11: the CUDA context's ``/dev/nvidia*`` mappings, CPU tensors above them,
the loader under the stack, the ASLR span between), with round numbers."""

from __future__ import annotations

from allocreplay.capture import _hostva

MIB = 1 << 20
CONTEXT = 0x7F00_0000_0000
LOADER = 0x7F80_0000_0000


class FakeCuda:
    """``torch.cuda`` as the note reads it: initialized, one allocation made."""

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def memory_stats() -> dict[str, int]:
        return {"allocation.all.allocated": 1}


def maps(*extra: tuple[int, int, str]) -> str:
    rows = [
        (CONTEXT - 512 * MIB, CONTEXT - 256 * MIB, "/dev/nvidia-uvm"),
        (CONTEXT - 256 * MIB, CONTEXT, "/dev/nvidiactl"),
        (LOADER, LOADER + 0x2000, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
        (LOADER + 0x2000, LOADER + 0x3000, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
        (0x7FFC_0000_0000, 0x7FFC_0002_1000, "[stack]"),
        *extra,
    ]
    return "\n".join(f"{lo:x}-{hi:x} rw-p 00000000 00:00 0    {path}" for lo, hi, path in sorted(rows)) + "\n"


def test_the_window_is_below_the_loader() -> None:
    tensors = [(CONTEXT + i * 100 * MIB, CONTEXT + (i + 1) * 100 * MIB, "") for i in range(4)]
    spans, top, loader = _hostva.parse_maps(maps(*tensors))
    assert (top, loader) == (CONTEXT, LOADER)
    # Below the context, and above the tensors up to the loader; the ASLR span above the
    # loader, and the stack, are outside the window.
    assert _hostva.gaps_between(spans, 0, loader) == [(0, CONTEXT - 512 * MIB), (CONTEXT + 400 * MIB, LOADER)]


def test_ranges_freed_by_a_move_are_noted_once() -> None:
    tensors = [(CONTEXT + i * 100 * MIB, CONTEXT + (i + 1) * 100 * MIB, "") for i in range(4)]
    spans, top, loader = _hostva.parse_maps(maps(*tensors))
    assert top is not None and loader is not None
    known = _hostva.gaps_between(spans, 0, loader)
    # Tensors 1 and 2 freed (their copies made on the GPU): one range of 200 MiB is new.
    spans, _, _ = _hostva.parse_maps(maps(tensors[0], tensors[3]))
    fresh = _hostva.subtract(_hostva.gaps_between(spans, 0, loader), known)
    assert fresh == [(CONTEXT + 100 * MIB, CONTEXT + 300 * MIB)]
    known = _hostva.merge(known, fresh)
    # Then tensor 3: it joins the free space above; only its own range is new.
    spans, _, _ = _hostva.parse_maps(maps(tensors[0]))
    fresh = _hostva.subtract(_hostva.gaps_between(spans, 0, loader), known)
    assert fresh == [(CONTEXT + 300 * MIB, CONTEXT + 400 * MIB)]
    assert _hostva.merge(known, fresh) == [(0, CONTEXT - 512 * MIB), (CONTEXT + 100 * MIB, LOADER)]


def test_the_hook_file_travels_with_the_capture_hook() -> None:
    from allocreplay.capture._runner import HOOK_FILES

    assert "_hostva.py" in HOOK_FILES


def test_the_hook_notes_before_each_tensor_of_the_outermost_move_only(monkeypatch) -> None:
    # A stand-in for torch's Module._apply (children first, then each tensor through `fn`, as
    # torch/nn/modules/module.py does) and for the allocator's counters.
    class Module:
        def __init__(self, tensors: list[str], children: list[Module]) -> None:
            self.tensors, self.children = tensors, children

        def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
            for c in self.children:
                c._apply(fn)
            self.tensors = [fn(t) for t in self.tensors]
            return self

    class Torch:
        class nn:
            pass

        cuda = FakeCuda

    Torch.nn.Module = Module  # type: ignore[attr-defined]
    hv = _hostva.HostVA(Torch)
    notes: list[int] = []
    monkeypatch.setattr(hv, "note", lambda: notes.append(hv.depth))
    hv.install()
    model = Torch.nn.Module(["w1", "b1"], [Torch.nn.Module(["w2"], []), Torch.nn.Module(["w3", "w4"], [])])  # type: ignore[attr-defined]
    model._apply(str.upper)
    assert sorted(model.children[1].tensors + model.children[0].tensors + model.tensors) == ["B1", "W1", "W2", "W3", "W4"]
    # One note before each of the five conversions (inside the move), one at its end (outside).
    assert notes == [2, 2, 2, 1, 1, 0]
    # A real note on this machine's /proc/self/maps: gaps below the loader are found.
    monkeypatch.undo()
    hv.note()
    assert hv.error is None and hv.mmap_base is not None and hv.changes


def test_the_hosts_ranges_at_a_driver_change_are_noted_apart() -> None:
    # On this machine's /proc/self/maps: a first note sets the window; an anonymous mapping made
    # then (as the driver's reservations are) is noted as taken at the driver change's index,
    # and as freed once unmapped; the module notes (`changes`, which replays apply) are left as
    # they were.
    import ctypes
    import mmap

    class Torch:
        cuda = FakeCuda

    hv = _hostva.HostVA(Torch)
    hv.note_driver_change(5)  # before any module note: the window is unknown, nothing noted
    assert hv.driver_changes == []
    hv.note()
    assert hv.error is None and hv.mmap_base is not None
    changes = [list(c) for c in hv.changes]
    m = mmap.mmap(-1, 64 * MIB)
    start = ctypes.addressof(ctypes.c_char.from_buffer(m))
    hv.note_driver_change(7)
    taken = [c for c in hv.driver_changes if c[0] == 7 and c[3] == 0]
    assert any(s <= start and start + 64 * MIB <= e for _, s, e, _ in taken), (hex(start), hv.driver_changes)
    m.close()
    hv.note_driver_change(9)
    freed = [c for c in hv.driver_changes if c[0] == 9 and c[3] == 1]
    assert any(s <= start and start + 64 * MIB <= e for _, s, e, _ in freed), (hex(start), hv.driver_changes)
    assert hv.changes == changes and hv.driver_error is None
    out = hv.to_json()
    assert out is not None and out["driver_changes"] == hv.driver_changes and out["changes"] == changes
