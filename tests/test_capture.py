"""`allocreplay capture` and `allocreplay.capture()` on the CPU.

CI has no GPU, so the PyTorch path runs against ``tests/fake_torch``: a stand-in ``torch`` with
the API surface the hook uses (lazy CUDA initialization with queued calls,
``_record_memory_history``, ``_snapshot``, ``memory_stats``, ``set_per_process_memory_fraction``)
that returns a REAL snapshot of the shared captures once recording is on. That checks the
plumbing — the hook is injected into the child, recording starts inside CUDA's initialization
and before the first allocation, the snapshot and metadata are written at exit (also after an
exception, an OOM or ``sys.exit``), the child's exit code comes back, one trace per device —
and the truth the resulting traces are validated against is the real runs' own
``memory_stats()`` (their ``.json``). The real frameworks are captured on the GPU machine by
``scripts/capture_examples.sh``.

TensorFlow's path runs for real on the CPU (``TF_CPU_ALLOCATOR_USE_BFC=true``) where
tensorflow is installed (CI installs ``tensorflow-cpu``); elsewhere those tests are skipped
with the reason shown in pytest's summary.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import allocreplay
from conftest import TRACES, run_clirunner, shared

FAKE_TORCH = Path(__file__).resolve().parent / "fake_torch"
HAS_TF = importlib.util.find_spec("tensorflow") is not None
needs_tf = pytest.mark.skipif(
    not HAS_TF,
    reason="tensorflow is not installed here: the TensorFlow capture path (CPU BFC) is tested only where it is (pip install tensorflow-cpu; CI installs it)",
)

TORCH_SCRIPT = """
import sys
import torch
mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if mode == "capped":
    torch.cuda.set_per_process_memory_fraction(16927914803 / 150109880320)
torch.cuda.allocate(1024)
if mode == "oom":
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
if mode == "exit3":
    sys.exit(3)
print("script done")
"""


class Done:
    def __init__(self, p: subprocess.CompletedProcess, tmp: Path, log: Path) -> None:
        self.code, self.out, self.err, self.tmp = p.returncode, p.stdout, p.stderr, tmp
        self.log = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def events(self, name: str) -> list[dict]:
        return [e for e in self.log if e["event"] == name]


def fake_env(tmp: Path, capture: str = "two_streams__default", **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAKE_TORCH), env.get("PYTHONPATH")) if p)
    env["FAKE_TORCH_SNAPSHOT"] = str(shared(f"{capture}.pickle.xz"))
    env["FAKE_TORCH_META"] = str(shared(f"{capture}.json"))
    env["FAKE_TORCH_LOG"] = str(tmp / "log.jsonl")
    env.update(extra)
    return env


def capture(tmp: Path, *args: str, env: dict[str, str] | None = None, script: str = TORCH_SCRIPT) -> Done:
    (tmp / "train.py").write_text(script)
    cmd = [sys.executable, "-m", "allocreplay", "capture", *args]
    p = subprocess.run(cmd, cwd=tmp, env=env if env is not None else fake_env(tmp), capture_output=True, text=True, timeout=600)
    return Done(p, tmp, tmp / "log.jsonl")


def validate(path: Path) -> dict:
    p = subprocess.run([sys.executable, "-m", "allocreplay", "validate", str(path), "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    return json.loads(p.stdout)


def truth(name: str) -> dict:
    return json.loads(shared(f"{name}.json").read_text())


# --- PyTorch plumbing (fake torch, real snapshots) ------------------------------------------


def test_pytorch_records_from_cuda_init_and_the_trace_validates(tmp_path):
    run = capture(tmp_path, "-o", "run.arrow", "--keep-raw", "--", sys.executable, "train.py")
    assert run.code == 0, run.err
    assert "script done" in run.out
    # Recording was switched on inside CUDA's lazy initialization, before the first
    # allocation, with the defaults (Python stacks, 1,000,000 entries), and switched off after
    # the snapshot.
    order = [e["event"] for e in run.log]
    assert order[:3] == ["cuda_init", "record_memory_history", "allocate"], order
    assert "record_before_init" not in order
    rec = run.events("record_memory_history")[0]
    assert (rec["enabled"], rec["context"], rec["stacks"], rec["max_entries"]) == ("all", "all", "python", 1_000_000)
    assert run.events("snapshot") == [{"event": "snapshot", "pid": rec["pid"], "recording": True}]
    assert run.events("record_memory_history")[-1]["enabled"] is None

    out = tmp_path / "run.arrow"
    report = validate(out)
    stats = truth("two_streams__default")["memory_stats"]
    assert report["ok"] is True and report["address_match"] == 1.0
    assert report["peak_reserved_replayed"] == stats["reserved_bytes.all.peak"] == 3011510272
    assert report["peak_allocated_replayed"] == stats["allocated_bytes.all.peak"]

    md = allocreplay.load(out).metadata
    assert md["source"] == "pytorch" and md["source_version"] == "2.11.0+fake"
    assert md["devices"] == [{"index": 0, "name": "NVIDIA H200 (fake)", "total_memory": 150109880320, "memory_cap": None}]
    cap = md["extra"]["capture"]
    assert cap["captured_by"] == "allocreplay capture" and cap["argv"] == ["train.py"]
    assert cap["device_total_bytes"] == 150109880320 and cap["cap_bytes"] == 0 and cap["error"] is None
    assert cap["allocator_backend"] == "native" and cap["compute_capability"] == "9.0"

    # --keep-raw: the pickle, the per-device metadata and the manifest, under run.raw/.
    raw = sorted(p.name for p in (tmp_path / "run.raw").iterdir())
    pid = rec["pid"]
    assert raw == [f"manifest-{pid}.json", f"torch-{pid}-dev0.json", f"torch-{pid}.pickle"], raw
    meta = json.loads((tmp_path / "run.raw" / f"torch-{pid}-dev0.json").read_text())
    assert meta["memory_stats"] == stats and meta["memory_stats_per_device"] == {"0": stats}
    assert md["source_path"] == os.path.join("run.raw", f"torch-{pid}.pickle")


def test_options_reach_record_memory_history(tmp_path):
    run = capture(tmp_path, "-o", "a.arrow", "--stacks", "none", "--max-entries", "123", "--", sys.executable, "train.py")
    assert run.code == 0, run.err
    rec = run.events("record_memory_history")[0]
    assert (rec["context"], rec["max_entries"]) == (None, 123)
    run = capture(tmp_path, "-o", "b.arrow", "--stacks", "all", "--", sys.executable, "train.py")
    assert run.code == 0, run.err
    rec = [e for e in run.events("record_memory_history") if e["enabled"]][-1]
    assert (rec["context"], rec["stacks"]) == ("all", "all")
    assert not (tmp_path / "b.raw").exists()  # raw files are temporary without --keep-raw


def test_memory_fraction_becomes_the_cap(tmp_path):
    # gpt2_train__default_capped.json: cap 16,927,914,803 bytes of 150,109,880,320, 3 retries.
    env = fake_env(tmp_path, "gpt2_train__default_capped", CUDA_VISIBLE_DEVICES="0")
    run = capture(tmp_path, "-o", "capped.arrow", "--", sys.executable, "train.py", "capped", env=env)
    assert run.code == 0, run.err
    md = allocreplay.load(tmp_path / "capped.arrow").metadata
    real = truth("gpt2_train__default_capped")
    assert md["devices"][0]["memory_cap"] == real["cap_bytes"] == 16927914803
    assert md["extra"]["capture"]["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    report = validate(tmp_path / "capped.arrow")
    assert report["ok"] is True and report["capacity"] == 16927914803
    assert report["num_alloc_retries_replayed"] == real["memory_stats"]["num_alloc_retries"] == 3


@pytest.mark.parametrize("mode,code", [("oom", 1), ("exit3", 3)])
def test_the_trace_is_written_when_the_script_fails_and_its_exit_code_comes_back(tmp_path, mode, code):
    run = capture(tmp_path, "-o", "fail.arrow", "--", sys.executable, "train.py", mode)
    assert run.code == code, run.err
    assert (tmp_path / "fail.arrow").is_file()
    assert f"the command exited with code {code}" in run.err
    error = allocreplay.load(tmp_path / "fail.arrow").metadata["extra"]["capture"]["error"]
    if mode == "oom":
        assert "Traceback" in run.err  # the script's own traceback is untouched
        assert error == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    else:
        assert error is None
    assert validate(tmp_path / "fail.arrow")["ok"] is True


def test_one_trace_per_device_across_processes(tmp_path):
    # A launcher starting one Python process per rank (as torchrun does): each records itself
    # through the injected sitecustomize. Truth: shared/traces/README.md, ddp2gpu ranks.
    launcher = textwrap.dedent(
        """
        import os, subprocess, sys
        procs = []
        for rank in (0, 1):
            env = dict(os.environ, FAKE_TORCH_DEVICE=str(rank),
                       FAKE_TORCH_SNAPSHOT=os.environ["SNAP"] % rank, FAKE_TORCH_META=os.environ["META"] % rank)
            procs.append(subprocess.Popen([sys.executable, "-c", "import torch; torch.cuda.allocate(1)"], env=env))
        sys.exit(max(p.wait() for p in procs))
        """
    )
    env = fake_env(tmp_path, "ddp2gpu__default_rank0")
    env["SNAP"] = env["FAKE_TORCH_SNAPSHOT"].replace("rank0", "rank%d")
    env["META"] = env["FAKE_TORCH_META"].replace("rank0", "rank%d")
    run = capture(tmp_path, "-o", "ddp.arrow", "--", sys.executable, "train.py", env=env, script=launcher)
    assert run.code == 0, run.err
    assert not (tmp_path / "ddp.arrow").exists()
    for rank, (peak_alloc, peak_reserved) in enumerate([(10075877888, 10815012864), (11199406592, 13895729152)]):
        path = tmp_path / f"ddp.dev{rank}.arrow"
        assert allocreplay.load(path).info().devices == [rank]
        report = validate(path)
        stats = truth(f"ddp2gpu__default_rank{rank}")["memory_stats_per_device"][str(rank)]
        assert report["ok"] is True
        assert report["peak_reserved_replayed"] == stats["reserved_bytes.all.peak"] == peak_reserved
        assert report["peak_allocated_replayed"] == stats["allocated_bytes.all.peak"] == peak_alloc


def test_a_shadowed_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nopen(os.path.join(os.environ['MARK_DIR'], 'ran'), 'w').close()\n")
    env = fake_env(tmp_path, MARK_DIR=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join((str(site), env["PYTHONPATH"]))
    run = capture(tmp_path, "-o", "s.arrow", "--", sys.executable, "train.py", env=env)
    assert run.code == 0, run.err
    assert (tmp_path / "ran").exists() and (tmp_path / "s.arrow").is_file()


def test_in_process_capture(tmp_path):
    script = textwrap.dedent(
        """
        import json, sys
        import allocreplay
        with allocreplay.capture("in.arrow") as cap:
            import torch                      # imported inside the block: the import hook
            torch.cuda.allocate(1)
        first = [t.path for t in cap.traces]
        try:
            with allocreplay.capture("oom.arrow", stacks="none") as cap2:   # CUDA already up
                raise torch.OutOfMemoryError("CUDA out of memory. boom")
        except torch.OutOfMemoryError:
            propagated = True
        try:
            with allocreplay.capture("none.arrow", framework="jax"):
                pass
        except allocreplay.CaptureError as e:
            none = str(e)
        print(json.dumps({"first": first, "second": [t.path for t in cap2.traces], "propagated": propagated, "none": none}))
        """
    )
    (tmp_path / "inproc.py").write_text(script)
    p = subprocess.run([sys.executable, "inproc.py"], cwd=tmp_path, env=fake_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res == {"first": ["in.arrow"], "second": ["oom.arrow"], "propagated": True, "none": "no trace captured: the block never used jax"}
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    recs = [e for e in log if e["event"] == "record_memory_history" and e["enabled"]]
    assert [r["context"] for r in recs] == ["all", None]
    assert allocreplay.load(tmp_path / "oom.arrow").metadata["extra"]["capture"]["error"] == "OutOfMemoryError: CUDA out of memory. boom"
    for name in ("in.arrow", "oom.arrow"):
        report = validate(tmp_path / name)
        assert report["ok"] is True and report["peak_reserved_replayed"] == 3011510272


# --- bad use: one line, exit code 2 ---------------------------------------------------------


def _missing_framework() -> tuple[str, str] | None:
    for fw, module in (("jax", "jax"), ("tf", "tensorflow"), ("pytorch", "torch")):
        if importlib.util.find_spec(module) is None:
            return fw, module
    return None


def bad_uses(tmp: Path) -> dict[str, tuple[list[str], dict[str, str], str]]:
    (tmp / "adir").mkdir(exist_ok=True)
    py = sys.executable
    cases = {
        "no_script": (["-o", "x.arrow"], {}, "no script given"),
        "missing_dir": (["-o", "no/such/dir/x.arrow", "--", py, "train.py"], {}, "output not writable"),
        "directory": (["-o", "adir", "--", py, "train.py"], {}, "is a directory"),
        "no_command": (["-o", "x.arrow", "--", "no-such-command-xyz"], {}, "command not found"),
        "no_python": (["-o", "x.arrow", "--", "sh", "-c", "true"], {}, "hook never ran"),
        "no_gpu": (["-o", "x.arrow", "--", py, "-c", "import torch"], {"FAKE_TORCH_GPU": "0"}, "no GPU: torch.cuda.is_available() is False"),
        "nothing_used": (["-o", "x.arrow", "--", py, "-c", "pass"], {}, "never imported torch, jax or tensorflow"),
        "bad_framework": (["-o", "x.arrow", "--framework", "mxnet", "--", py, "train.py"], {}, "mxnet"),
    }
    missing = _missing_framework()
    if missing:
        fw, module = missing
        cases["not_installed"] = (["-o", "x.arrow", "--framework", fw, "--", py, "train.py"], {}, f"framework {fw} not installed: {py} cannot import {module}")
    return cases


@pytest.mark.parametrize(
    "case", ["no_script", "missing_dir", "directory", "no_command", "no_python", "no_gpu", "nothing_used", "bad_framework", "not_installed"]
)
def test_bad_use_is_one_line_and_exit_code_2(tmp_path, case):
    cases = bad_uses(tmp_path)
    if case not in cases:
        pytest.skip("torch, jax and tensorflow are all installed here: no framework to be missing")
    args, extra, words = cases[case]
    run = capture(tmp_path, *args, env=fake_env(tmp_path, **extra))
    assert run.code == 2, (run.code, run.err)
    last = run.err.strip().splitlines()[-1]
    assert last.startswith("error: ") and words in last, run.err
    assert "Traceback" not in run.err
    assert not (tmp_path / "x.arrow").exists()


def test_bad_use_through_clirunner():
    r = run_clirunner("capture", "-o", "x.arrow")
    assert r.code == 2 and r.err.strip() == "error: no script given: put the command to run after --, e.g. allocreplay capture -o run.arrow -- python train.py"


def test_python_api_errors_are_typed(tmp_path):
    with pytest.raises(allocreplay.CaptureError, match="output not writable"), allocreplay.capture(tmp_path / "no" / "dir" / "x.arrow"):
        pass
    with pytest.raises(allocreplay.errors.CaptureError, match="unknown framework"):
        allocreplay.capture("x.arrow", framework="mxnet")
    assert issubclass(allocreplay.CaptureError, allocreplay.AllocReplayError)


# --- TensorFlow on the CPU, for real ----------------------------------------------------------

TF_SCRIPT = """
import sys
import numpy as np
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Input((16, 16, 3)), tf.keras.layers.Conv2D(8, 3, activation="relu"),
                             tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
opt = tf.keras.optimizers.Adam(1e-3)
lossf = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

@tf.function
def step(x, y):
    with tf.GradientTape() as t:
        loss = lossf(y, model(x, training=True))
    opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss

rng = np.random.default_rng(0)
for bs in (8, 16, 8):
    step(tf.constant(rng.standard_normal((bs, 16, 16, 3), dtype=np.float32)), tf.constant(rng.integers(0, 10, bs))).numpy()
if len(sys.argv) > 1:
    raise MemoryError("simulated failure after training")
print("tf done", tf.__version__)
"""


def tf_env(tmp: Path, bfc: bool = True) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    if bfc:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    else:
        env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    return env


@needs_tf
def test_tf_cpu_capture_replays_event_exact(tmp_path):
    run = capture(tmp_path, "-o", "tf.arrow", "--framework", "tf", "--", sys.executable, "train.py", env=tf_env(tmp_path), script=TF_SCRIPT)
    assert run.code == 0, run.err
    version = run.out.split("tf done ")[1].strip()
    trace = allocreplay.load(tmp_path / "tf.arrow")
    md = trace.metadata
    assert md["source"] == "xplane" and md["source_version"] == version
    assert md["extra"]["allocator"] == "bfc_cpu_allocator_for_gpu"
    assert md["extra"]["capture"]["env"]["TF_CPU_ALLOCATOR_USE_BFC"] == "true"
    # The profiler ran from `import tensorflow` on: nothing was allocated before it.
    assert md["seeded"] is False
    # Truth: the allocator's own bytes in use and chunk size recorded with every event.
    report = validate(tmp_path / "tf.arrow")
    assert report["ok"] is True
    assert report["chunk_match"] == 1.0 and report["in_use_match"] == 1.0
    assert report["peak_in_use_replayed"] == report["peak_in_use_recorded"] > 0
    assert report["events"] == trace.info().events > 100


@needs_tf
def test_tf_capture_survives_a_failing_script_and_in_process(tmp_path):
    run = capture(tmp_path, "-o", "fail.arrow", "--", sys.executable, "train.py", "fail", env=tf_env(tmp_path), script=TF_SCRIPT)
    assert run.code == 1, run.err
    assert allocreplay.load(tmp_path / "fail.arrow").metadata["extra"]["capture"]["error"] == "MemoryError: simulated failure after training"
    assert validate(tmp_path / "fail.arrow")["ok"] is True

    # In-process, entered after `import tensorflow` but before the model exists.
    inproc = TF_SCRIPT.replace(
        "import tensorflow as tf\n", "import tensorflow as tf\nimport allocreplay\ncap = allocreplay.capture('in.arrow', framework='tf')\ncap.__enter__()\n"
    ).replace('print("tf done"', 'cap.__exit__(None, None, None)\nprint("tf done"')
    (tmp_path / "inproc.py").write_text(inproc)
    p = subprocess.run([sys.executable, "inproc.py"], cwd=tmp_path, env=tf_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert allocreplay.load(tmp_path / "in.arrow").metadata["seeded"] is False
    report = validate(tmp_path / "in.arrow")
    assert report["ok"] is True and report["chunk_match"] == 1.0 and report["in_use_match"] == 1.0


@needs_tf
def test_tf_without_gpu_or_bfc_says_so(tmp_path):
    run = capture(tmp_path, "-o", "x.arrow", "--", sys.executable, "train.py", env=tf_env(tmp_path, bfc=False), script=TF_SCRIPT)
    assert run.code == 2
    last = run.err.strip().splitlines()[-1]
    assert last.startswith("error: no trace captured") and "TF_CPU_ALLOCATOR_USE_BFC=true" in last


# --- the captures shipped in traces/ (made on the GPU machine by scripts/capture_examples.sh) -


def _recorded_stats(md: dict) -> dict:
    (stats,) = md["extra"]["recorded_stats"].values()
    return stats


@pytest.mark.parametrize("name", ["torch_train", "torch_train__expandable", "torch_oom"])
def test_shipped_pytorch_captures_validate_against_their_runs_memory_stats(name):
    path = TRACES / f"{name}.arrow"
    md = allocreplay.load(path).metadata
    cap = md["extra"]["capture"]
    assert cap["captured_by"] == "allocreplay capture" and md["devices"][0]["name"] == "NVIDIA H200"
    assert cap["alloc_conf"] == ("expandable_segments:True" if "expandable" in name else "")
    truth = _recorded_stats(md)  # torch.cuda.memory_stats() of the real run, at its exit
    report = validate(path)
    assert report["ok"] is True and report["address_match"] == 1.0 and report["segment_events_match"] is True
    assert report["peak_reserved_replayed"] == truth["reserved_bytes.all.peak"]
    assert report["peak_allocated_replayed"] == truth["allocated_bytes.all.peak"]
    assert report["num_alloc_retries_replayed"] == truth["num_alloc_retries"]
    assert report["num_ooms_replayed"] == truth["num_ooms"]
    if name == "torch_oom":
        # The run died of an OOM under its 1 GiB cap (set_per_process_memory_fraction): the
        # trace was still written, and the replay fails the same request after one retry.
        assert md["devices"][0]["memory_cap"] == 1 << 30 and report["capacity"] == 1 << 30
        assert cap["error"].startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 48.00 MiB")
        assert truth["num_ooms"] == 1 and truth["num_alloc_retries"] == 1


@pytest.mark.parametrize("rank", [0, 1])
def test_shipped_ddp_captures_one_trace_per_device(rank):
    # torchrun --nproc_per_node 2 on two H200s, captured with one command: each worker
    # recorded its own device, the launcher (torch imported, no CUDA) nothing.
    path = TRACES / f"torch_ddp.dev{rank}.arrow"
    md = allocreplay.load(path).metadata
    assert [d["index"] for d in md["devices"]] == [rank]
    assert md["extra"]["capture"]["env"]["LOCAL_RANK"] == str(rank)
    truth = _recorded_stats(md)
    report = validate(path)
    assert report["ok"] is True and report["device"] == rank and report["address_match"] == 1.0
    assert report["peak_reserved_replayed"] == truth["reserved_bytes.all.peak"]
    assert report["peak_allocated_replayed"] == truth["allocated_bytes.all.peak"]


@pytest.mark.parametrize("name", ["jax_train", "jax_train__noprealloc"])
def test_shipped_jax_captures_validate_event_by_event(name):
    path = TRACES / f"{name}.arrow"
    trace = allocreplay.load(path)
    md = trace.metadata
    assert md["source"] == "xplane" and md["extra"]["allocator"] == "GPU_0_bfc"
    assert md["seeded"] is False  # recorded from before the first allocation
    truth = _recorded_stats(md)  # jax Device.memory_stats() of the real run, at its exit
    report = validate(path)
    assert report["ok"] is True and report["chunk_match"] == 1.0 and report["in_use_match"] == 1.0
    assert report["events"] == trace.info().events == 2092
    assert report["peak_in_use_replayed"] == truth["peak_bytes_in_use"]
    assert report["pool_bytes_replayed"] == truth["pool_bytes"]
    # Preallocation takes the whole BFC limit up front; growing on demand takes what is used.
    assert (truth["pool_bytes"] == truth["bytes_limit"]) == (name == "jax_train")


def test_shipped_jax_capture_comes_with_its_programs():
    dump = TRACES / "jax_train.xla_dump"
    programs = sorted(p.name.split(".sm_")[0] for p in dump.glob("*.hlo.pb"))
    assert programs == ["module_129013.jit_train_step", "module_9947.jit_train_step"]  # batch 256 and 512


def test_the_allocator_settings_come_from_the_variable_torch_reads_first(monkeypatch):
    # c10/cuda/CUDAAllocatorConfig.h, CUDAAllocatorConfig::instance(): PYTORCH_CUDA_ALLOC_CONF,
    # else PYTORCH_ALLOC_CONF (torch 2.9's name). The no-GPU snapshot reads the same one.
    from allocreplay.capture._recorder import alloc_conf

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    assert alloc_conf() == (None, "")
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert alloc_conf() == ("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    assert alloc_conf() == ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
