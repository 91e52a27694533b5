"""The device catalogue (capture/_devices.py), `allocreplay devices` and allocreplay.devices()."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import allocreplay
from allocreplay.capture import _devices, _nogpu, _runner

REPO = Path(__file__).resolve().parent.parent
H200_TOTAL = 150_109_880_320
H200_CONTEXT = 726_466_560  # PYTORCH_CUDA_CONTEXT_BYTES in rust/allocreplay-core/src/replay.rs


def test_every_entry_is_sane():
    assert {"h200", "a100-40gb", "a100-80gb", "h100-80gb", "h100-pcie", "l4", "a10g", "rtx4090", "rtx3090", "v100-16gb", "v100-32gb", "t4"} <= set(
        _devices.DEVICES
    )
    for key, d in _devices.DEVICES.items():
        assert d.key == key == key.lower()
        assert 0 < d.context_bytes < d.usable_bytes < d.total_bytes
        assert d.usable_bytes == d.total_bytes - d.context_bytes
        assert d.source_total and d.source_context
        assert d.sms > 0 and d.compute_capability[0] >= 7
        # The context share is never below the H200's measurement: a too-small share says "fits" when it does not.
        assert d.context_bytes >= H200_CONTEXT


def test_h200_is_the_measured_one():
    d = _devices.lookup("h200")
    assert (d.total_bytes, d.context_bytes, d.usable_bytes) == (H200_TOTAL, H200_CONTEXT, H200_TOTAL - H200_CONTEXT)
    assert "measured" in d.source_total and "measured" in d.source_context


def test_context_matches_the_rust_constant():
    text = (REPO / "rust" / "allocreplay-core" / "src" / "replay.rs").read_text()
    assert f"PYTORCH_CUDA_CONTEXT_BYTES: u64 = {H200_CONTEXT:_};" in text
    assert _devices.H200_CONTEXT_BYTES == H200_CONTEXT


@pytest.mark.parametrize("spelling", ["A100-80GB", "a100_80gb", " A100 80GB ", "a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB"])
def test_keys_resolve_case_and_separator_insensitively(spelling):
    assert _devices.lookup(spelling).key == "a100-80gb"


def test_aliases_and_names():
    assert _devices.lookup("RTX 4090").key == "rtx4090"
    assert _devices.lookup("Tesla T4").key == "t4"
    assert _devices.lookup("nvidia h200").key == "h200"
    for key in _devices.DEVICES:
        assert _devices.lookup(key.upper().replace("-", "_")).key == key


def test_unknown_key_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown device 'b300'.*h200.*a100-80gb"):
        _devices.lookup("b300")


def test_nogpu_uses_the_catalogue():
    for key, d in _devices.DEVICES.items():
        assert _nogpu.parse_device(key) == (d.name, d.total_bytes, d.compute_capability, d.sms)
    assert _nogpu.parse_device("A100_40GB")[1] == _devices.DEVICES["a100-40gb"].total_bytes
    assert _nogpu.parse_device(None)[1] == H200_TOTAL
    assert _nogpu.parse_device("16GiB") == ("NVIDIA H200 (17179869184 bytes)", 16 << 30, (9, 0), 132)


def test_devices_module_is_standard_library_only_and_shipped_with_the_hook():
    assert "_devices.py" in _runner.HOOK_FILES
    code = (
        "import sys, importlib.util; sys.modules.pop('polars', None)\n"
        f"spec = importlib.util.spec_from_file_location('d', {str(REPO / 'python/allocreplay/capture/_devices.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['d'] = m; spec.loader.exec_module(m)\n"
        "assert not any(n.startswith(('allocreplay', 'polars', 'torch')) for n in sys.modules), sorted(sys.modules)\n"
        "print(m.lookup('h200').usable_bytes)\n"
    )
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) == H200_TOTAL - H200_CONTEXT


def test_python_api():
    df = allocreplay.devices()
    assert isinstance(df, pl.DataFrame)
    assert df.height == len(_devices.DEVICES)
    h200 = df.filter(pl.col("key") == "h200").row(0, named=True)
    assert h200["usable_bytes"] == H200_TOTAL - H200_CONTEXT
    assert {"total_gib", "context_gib", "usable_gib", "source_total", "source_context"} <= set(df.columns)
    assert "devices" in allocreplay.__all__


def test_cli_json(run_cli):
    r = run_cli("devices", "--json")
    assert r.code == 0, r.err
    rows = {row["key"]: row for row in json.loads(r.out)}
    assert set(rows) == set(_devices.DEVICES)
    assert rows["h200"]["usable_bytes"] == H200_TOTAL - H200_CONTEXT
    assert rows["h200"]["total_bytes"] == H200_TOTAL and rows["h200"]["context_bytes"] == H200_CONTEXT
    assert all(row["source_total"] and row["source_context"] for row in rows.values())


def test_cli_table_and_selection(run_cli):
    r = run_cli("devices", "H200", "rtx_4090")
    assert r.code == 0, r.err
    assert "149,383,413,760" in r.out and "NVIDIA GeForce RTX 4090" in r.out
    assert "a100" not in r.out
    assert "context of h200: measured" in r.out


def test_cli_unknown_device_exits_2_naming_the_known_ones(run_cli):
    r = run_cli("devices", "b300")
    assert r.code == 2
    line = r.err.strip().splitlines()[-1]
    assert line.startswith("error: unknown device 'b300'") and "h200" in line and "t4" in line


def test_docs_table_is_up_to_date():
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "devices_table.py"), "--check"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_the_h200_numbers_are_those_of_the_probe_log_the_catalogue_cites():
    # tests/data/va-h200-580.159.txt, `### footprint.txt`: torch's total_memory, and the memory the
    # CUDA context and the libraries took (after a matmul, a bf16 matmul and SDPA; the same when
    # filling the device stopped).
    log = (REPO / "tests" / "data" / "va-h200-580.159.txt").read_text()
    footprint = json.loads(log.split("### footprint.txt\n", 1)[1].split("\n###", 1)[0])
    assert footprint["total_memory"] == H200_TOTAL == _devices.DEVICES["h200"].total_bytes
    assert footprint["after_sdpa"]["used_outside_torch"] == footprint["at_fill"]["used_outside_torch"] == H200_CONTEXT
    for d in _devices.DEVICES.values():
        for cited in re.findall(r"tests/data/[\w.-]+\.txt", d.source_total + d.source_context):
            assert (REPO / cited).is_file(), f"{d.key} cites {cited}, which is not there"
