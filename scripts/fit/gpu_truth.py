"""The real-GPU ground truth for `allocreplay fit` (issue 26): for each case (workload, memory
cap, PYTORCH_CUDA_ALLOC_CONF, the parameter varied), the largest value that runs without
running out of memory on this GPU.

The search is fit's: try 1, 2, 4, ... (x2, the last try clamped to the case's max) until one
runs out of memory, then bisect on integers between the last success and the first failure
(a case with a step, like fit's --step, searches multiples of it: the sequence-length sweep,
step 64). Then, to see whether "fits" is monotone near the boundary B and repeatable, B-1, B+1
and B+2 (in steps) are run again as fresh probes ("check" phase) and recorded.

Each probe is a fresh process: `python probe.py CAP_BYTES WORKLOAD.py --param VALUE ...`, which
caps the caching allocator with torch.cuda.set_per_process_memory_fraction, runs the workload
script unchanged (runpy) and prints its peaks and counters as a JSON line. A probe that runs out
of memory (torch.OutOfMemoryError, exit 3) does not fit; any other failure (another exception,
a crash, a probe over --probe-timeout-s, an out-of-memory while the device itself was nearly
full, meaning the caps of the concurrent probes were over-committed) aborts the whole run with
its stderr printed, exit status 2: it must not be read as "does not fit".

Independent cases run concurrently (--parallel), as long as the sum of their caps plus
--overhead-gib per process for CUDA contexts fits in the device's memory. After --budget-s no
new probe starts (nor one the case's slowest probe so far would not finish in time); cases left
are reported "incomplete" or "not_run". The output (-o) is rewritten after every probe, so
`--resume` picks up where a run stopped (probes already there are reused, not rerun).

    python scripts/fit/gpu_truth.py --cases bars -o fit_truth.json
    python scripts/fit/gpu_truth.py --cases quick -o /tmp/quick.json     # smoke test, ~2 min
    python scripts/fit/gpu_truth.py --cases bars --list
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROBE = HERE / "probe.py"
MARKER = "GPU_TRUTH_PROBE"
EXIT_OOM = 3
GIB = 1 << 30

SEARCH = (
    "try s, 2s, 4s, ... (s = the case's step, 1 unless given; x2, the last clamped to max) until one runs out of memory; "
    "bisect on multiples of s between the last success lo and the first failure hi, trying lo + s + s * (((hi - lo) // s - 1) // 2) "
    "(allocreplay fit's middle with one job); boundary B = the last success; then B-s, B+s, B+2s rerun as fresh probes (phase 'check')"
)


@dataclasses.dataclass(frozen=True)
class Case:
    workload: str  # scripts/fit/<workload>.py
    param: str  # the varied argument: "batch_size" or "seq_len"
    cap_gib: float
    alloc_conf: str  # PYTORCH_CUDA_ALLOC_CONF; "" = the defaults (the variable unset)
    max_value: int
    fixed: tuple[tuple[str, int], ...] = ()  # other arguments: (("seq_len", 512),)
    step: int = 1  # values are multiples of step (fit --step), from step

    @property
    def cap_bytes(self) -> int:
        return int(self.cap_gib * GIB)

    @property
    def conf_name(self) -> str:
        return {"": "default", "expandable_segments:True": "expandable"}.get(self.alloc_conf, self.alloc_conf.replace(":", "_").replace(",", "+"))

    @property
    def id(self) -> str:
        fixed = "".join(f".{k.replace('_', '')}{v}" for k, v in self.fixed)
        return f"{self.workload}.{self.param}.{self.cap_gib:g}GiB{fixed}.{self.conf_name}"

    def argv(self, value: int) -> list[str]:
        args = [str(HERE / f"{self.workload}.py")]
        for k, v in (*self.fixed, (self.param, value)):
            args += [f"--{k.replace('_', '-')}", str(v)]
        return args


CONFS = ("", "expandable_segments:True")


def _both(workload: str, param: str, cap_gib: float, max_value: int, step: int = 1, **fixed: int) -> list[Case]:
    return [Case(workload, param, cap_gib, conf, max_value, tuple(fixed.items()), step) for conf in CONFS]


# Longest first: the scheduler starts cases in this order.
CASE_LISTS: dict[str, list[Case]] = {
    "bars": [
        *_both("llama1b", "batch_size", 40, 256, seq_len=512),
        *_both("hf_decoder", "seq_len", 24, 16384, step=64, batch_size=8),
        *_both("vit", "batch_size", 24, 1024),
        *_both("hf_decoder", "batch_size", 24, 1024, seq_len=512),
    ],
    # Not in the bars: other caps and a sequence sweep of the 1 B model.
    "more": [
        *_both("llama1b", "seq_len", 40, 2048, step=64, batch_size=8),
        *_both("llama1b", "batch_size", 32, 256, seq_len=512),
        *_both("hf_decoder", "batch_size", 40, 1024, seq_len=512),
        *_both("vit", "batch_size", 40, 1024),
    ],
    "quick": [Case("hf_decoder", "batch_size", 4, "", 64, (("seq_len", 128), ("steps", 1)))],
}


class Abort(Exception):
    """A probe failed for another reason than running out of memory."""


class OutOfBudget(Exception):
    pass


def log(msg: str) -> None:
    now = dt.datetime.now()
    print(f"[{now:%H:%M:%S} +{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


T0 = time.monotonic()


def gib(n: Any) -> str:
    return f"{n / GIB:.2f} GiB" if isinstance(n, int) else "?"


def environment(python: str) -> dict[str, Any]:
    """Versions and the device, asked of a fresh process (this one never touches CUDA)."""
    code = r"""
import json, platform, sys, torch
info = {"python": sys.version.split()[0], "platform": platform.platform(), "torch": torch.__version__,
        "torch_cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
try:
    import transformers; info["transformers"] = transformers.__version__
except Exception as e:
    info["transformers"] = None
p = torch.cuda.get_device_properties(0)
info.update(gpu_name=p.name, gpu_total_memory=p.total_memory, gpu_capability=f"{p.major}.{p.minor}",
            gpu_multiprocessors=p.multi_processor_count, device_count=torch.cuda.device_count())
try:
    info["cuda_driver_api_version"] = torch._C._cuda_getDriverVersion()
except Exception:
    pass
print(json.dumps(info))
"""
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"gpu_truth.py: cannot query the device:\n{out.stderr}")
    info: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
        )
        info["nvidia_smi"] = smi.stdout.strip()
        info["driver"] = smi.stdout.strip().splitlines()[0].split(",")[1].strip()
    except Exception as e:
        info["driver"] = None
        info["nvidia_smi"] = f"unavailable: {e}"
    info["hostname"] = os.uname().nodename
    info["cpu_count"] = os.cpu_count()
    return info


class Run:
    def __init__(self, args: argparse.Namespace, cases: list[Case], env_info: dict[str, Any], previous: dict[str, Any] | None) -> None:
        self.args = args
        self.cases = cases
        self.env_info = env_info
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.abort = threading.Event()
        self.abort_reason: str | None = None
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.deadline = time.monotonic() + args.budget_s
        self.started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.total = int(env_info["gpu_total_memory"])
        self.mem_free = self.total - int(args.reserve_gib * GIB)
        self.running = 0
        self.pending = list(cases)
        self.results: dict[str, dict[str, Any]] = {}
        cache: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}
        for c in (previous or {}).get("cases", []):
            for p in c.get("probes", []):
                if p.get("result") in ("ok", "oom"):
                    kind = "check" if p["phase"] == "check" else "search"
                    cache.setdefault(c["id"], {})[(kind, p["value"])] = p
        self.cache = cache
        for case in cases:
            self.results[case.id] = {
                "id": case.id,
                "workload": case.workload,
                "script": f"scripts/fit/{case.workload}.py",
                "param": case.param,
                "fixed": dict(case.fixed),
                "cap_gib": case.cap_gib,
                "cap_bytes": case.cap_bytes,
                "alloc_conf": case.alloc_conf,
                "max": case.max_value,
                "status": "not_run",
                "boundary": None,
                "max_fits": None,
                "checks": {},
                "monotone": None,
                "repeatable": None,
                "probes": [],
                "seconds": 0.0,
            }
        self.log_dir = Path(args.log_dir or (str(Path(args.output).with_suffix("")) + ".logs"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.threads = max(1, args.parallel)
        self.omp = str(max(1, (os.cpu_count() or 1) // self.threads))

    # -- output -------------------------------------------------------------------------
    def write(self, final: bool = False) -> None:
        with self.lock:
            doc = {
                "tool": "scripts/fit/gpu_truth.py",
                "argv": sys.argv,
                "started": self.started,
                "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "finished": final,
                "aborted": self.abort_reason,
                "search": SEARCH,
                "budget_s": self.args.budget_s,
                "parallel": self.args.parallel,
                "environment": self.env_info,
                "summary": {r["id"]: {"status": r["status"], "boundary": r["boundary"], "monotone": r["monotone"]} for r in self.results.values()},
                "cases": list(self.results.values()),
            }
            tmp = Path(self.args.output + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1) + "\n")
            os.replace(tmp, self.args.output)

    # -- one probe ------------------------------------------------------------------------
    def probe(self, case: Case, value: int, phase: str) -> bool:
        result = self.results[case.id]
        kind = "check" if phase == "check" else "search"
        cached = self.cache.get(case.id, {}).get((kind, value))
        if cached is not None:
            rec = dict(cached, phase=phase, reused=True)
            with self.lock:
                result["probes"].append(rec)
            log(f"{case.id}: {case.param}={value} {rec['result']} (reused from the previous output)")
            return bool(rec["result"] == "ok")
        if self.abort.is_set():
            raise Abort(self.abort_reason or "aborted")
        slowest = max((p["seconds"] for p in result["probes"] if not p.get("reused")), default=0.0)
        if time.monotonic() + slowest > self.deadline:
            raise OutOfBudget
        argv = [self.args.python, str(PROBE), str(case.cap_bytes), *case.argv(value)]
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.pop("PYTORCH_ALLOC_CONF", None)
        if case.alloc_conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = case.alloc_conf
        env.setdefault("OMP_NUM_THREADS", self.omp)
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
        stem = self.log_dir / f"{case.id}.{case.param}{value}.{phase}"
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        t = time.monotonic()
        with open(f"{stem}.stdout", "wb") as out, open(f"{stem}.stderr", "wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=str(HERE.parent.parent), start_new_session=True)
            with self.lock:
                self.children[proc.pid] = proc
            try:
                rc = proc.wait(timeout=self.args.probe_timeout_s)
            except subprocess.TimeoutExpired:
                kill(proc)
                rc = None
            finally:
                with self.lock:
                    self.children.pop(proc.pid, None)
        seconds = round(time.monotonic() - t, 2)
        stdout = Path(f"{stem}.stdout").read_text(errors="replace")
        stderr = Path(f"{stem}.stderr").read_text(errors="replace")
        record: dict[str, Any] = {}
        for line in stdout.splitlines():
            if line.startswith(MARKER + " "):
                record = json.loads(line[len(MARKER) + 1 :])
        rec: dict[str, Any] = {
            "value": value,
            "phase": phase,
            "result": None,
            "rc": rc,
            "seconds": seconds,
            "started": started,
            "max_memory_reserved": record.get("max_memory_reserved"),
            "max_memory_allocated": record.get("max_memory_allocated"),
            "num_alloc_retries": record.get("num_alloc_retries"),
            "num_ooms": record.get("num_ooms"),
            "num_device_alloc": record.get("num_device_alloc"),
            "device_free_at_end": record.get("device_free_at_end"),
            "script_seconds": record.get("script_seconds"),
            "error": record.get("error"),
            "log": str(stem),
        }
        failure = None
        if self.abort.is_set() and rc != 0 and rc != EXIT_OOM:
            failure = "killed: the run was aborted"
        elif rc is None:
            failure = f"ran past --probe-timeout-s {self.args.probe_timeout_s}"
        elif rc == 0 and record.get("status") == "ok":
            rec["result"] = "ok"
        elif rc == EXIT_OOM and record.get("status") == "oom":
            free = record.get("device_free_at_end")
            if isinstance(free, int) and free < int(self.args.contention_gib * GIB):
                failure = (
                    f"out of memory with only {gib(free)} of the device free: the device itself was full, not the cap "
                    "(lower --parallel or raise --overhead-gib)"
                )
            else:
                rec["result"] = "oom"
        else:
            failure = f"exit status {rc}, probe status {record.get('status')!r}: not an out-of-memory error"
        if failure:
            rec["result"] = "error"
            rec["stderr_tail"] = stderr[-4000:]
        with self.lock:
            result["probes"].append(rec)
            result["seconds"] = round(result["seconds"] + seconds, 2)
        self.write()
        extra = f", {rec['num_alloc_retries']} retries" if rec["num_alloc_retries"] else ""
        log(
            f"{case.id}: {case.param}={value} {rec['result']} ({phase}; reserved {gib(rec['max_memory_reserved'])}, "
            f"allocated {gib(rec['max_memory_allocated'])}{extra}; {seconds:.1f} s)"
        )
        if failure:
            raise Abort(f"{case.id}: {case.param}={value}: {failure}\n--- stderr ({stem}.stderr), last lines:\n{stderr[-4000:]}")
        return rec["result"] == "ok"

    # -- one case -------------------------------------------------------------------------
    def search(self, case: Case) -> None:
        result = self.results[case.id]
        result["status"] = "running"
        st = case.step
        lo, hi, v = 0, None, st
        while True:
            if self.probe(case, v, "double"):
                lo = v
            else:
                hi = v
                break
            if v >= case.max_value:
                break
            v = min(2 * v, case.max_value)
        if hi is not None:
            while hi - lo > st:
                # fit's middle (allocreplay.fit._search._split with one job): of the untried
                # lo+st .. hi-st, the one at index n // 2.
                mid = lo + st + st * (((hi - lo) // st - 1) // 2)
                if self.probe(case, mid, "bisect"):
                    lo = mid
                else:
                    hi = mid
        result["boundary"] = lo
        result["max_fits"] = hi is None
        searched = {p["value"]: p["result"] for p in result["probes"]}
        for delta in (-1, 1, 2):
            v = lo + delta * st
            if 1 <= v <= case.max_value:
                ok = self.probe(case, v, "check")
                result["checks"][f"{delta:+d}"] = {"value": v, "result": "ok" if ok else "oom", "search_result": searched.get(v)}
        checks = result["checks"]
        below_ok = lo - st < 1 or checks.get("-1", {}).get("result") == "ok"
        above_oom = all(c["result"] == "oom" for k, c in checks.items() if k != "-1")
        result["monotone"] = below_ok and above_oom
        result["repeatable"] = all(c["search_result"] in (None, c["result"]) for c in checks.values())
        result["status"] = "done"
        shown = ", ".join(f"{c['value']}:{c['result']}" for c in checks.values())
        log(
            f"{case.id}: BOUNDARY {case.param}={lo}{' (the max fits)' if hi is None else ''}; checks {shown}; "
            f"monotone={result['monotone']} repeatable={result['repeatable']}; {result['seconds']:.0f} probe-seconds"
        )

    # -- scheduling -----------------------------------------------------------------------
    def need(self, case: Case) -> int:
        return case.cap_bytes + int(self.args.overhead_gib * GIB)

    def take(self) -> Case | None:
        with self.cond:
            while True:
                if self.abort.is_set() or not self.pending:
                    return None
                if time.monotonic() > self.deadline:
                    return None
                for i, case in enumerate(self.pending):
                    if self.need(case) <= self.mem_free:
                        self.mem_free -= self.need(case)
                        return self.pending.pop(i)
                if self.running == 0:
                    case = self.pending.pop(0)
                    raise Abort(f"{case.id}: its cap plus --overhead-gib is more than the device's memory less --reserve-gib")
                self.cond.wait(timeout=5)

    def worker(self) -> None:
        while True:
            try:
                case = self.take()
            except Abort as e:
                self.fail(str(e))
                return
            if case is None:
                return
            with self.cond:
                self.running += 1
            log(f"{case.id}: start (cap {case.cap_gib:g} GiB, PYTORCH_CUDA_ALLOC_CONF={case.alloc_conf!r})")
            try:
                self.search(case)
            except OutOfBudget:
                self.results[case.id]["status"] = "incomplete"
                log(f"{case.id}: out of budget, stopped")
            except Abort as e:
                # The probe that failed, or one killed because another did.
                self.results[case.id]["status"] = "incomplete" if self.abort_reason else "error"
                self.fail(str(e))
            except Exception as e:
                self.results[case.id]["status"] = "error"
                self.fail(f"{case.id}: {type(e).__name__}: {e}")
            finally:
                with self.cond:
                    self.running -= 1
                    self.mem_free += self.need(case)
                    self.cond.notify_all()
                self.write()

    def fail(self, reason: str) -> None:
        with self.cond:
            if self.abort_reason is None:
                self.abort_reason = reason
            self.abort.set()
            children = list(self.children.values())
            self.cond.notify_all()
        for proc in children:
            kill(proc)

    def go(self) -> int:
        self.write()
        threads = [threading.Thread(target=self.worker, daemon=True) for _ in range(self.threads)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(timeout=1)
        except KeyboardInterrupt:
            self.fail("interrupted (SIGINT)")
            for t in threads:
                t.join(timeout=30)
        self.write(final=True)
        print(flush=True)
        for r in self.results.values():
            print(
                f"{r['id']:<55} {r['status']:<10} boundary={r['boundary']!s:<6} monotone={r['monotone']!s:<5} "
                f"repeatable={r['repeatable']!s:<5} probes={len(r['probes'])}"
            )
        log(f"wrote {self.args.output}")
        if self.abort_reason:
            print(f"\ngpu_truth.py: ABORTED: {self.abort_reason}", file=sys.stderr, flush=True)
            return 2
        unfinished = [r["id"] for r in self.results.values() if r["status"] != "done"]
        if unfinished:
            log(f"{len(unfinished)} case(s) not finished (out of budget): the same command with --resume goes on")
            return 1
        return 0


def kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill a probe we started, and what it started (its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="bars", help=f"a built-in case list: {', '.join(CASE_LISTS)} (comma-separated for several; default bars)")
    ap.add_argument("--only", action="append", default=[], metavar="SUBSTRING", help="keep the cases whose id contains SUBSTRING (repeatable: any)")
    ap.add_argument("-o", "--output", default="fit_truth.json", help="the JSON result, rewritten after every probe (default fit_truth.json)")
    ap.add_argument("--resume", action="store_true", help="reuse the probes already in --output (a run stopped by its budget or aborted)")
    ap.add_argument("--parallel", type=int, default=3, help="cases run at once (default 3), memory permitting")
    ap.add_argument("--budget-s", type=float, default=3600, help="no probe starts after this many seconds (default 3600)")
    ap.add_argument("--probe-timeout-s", type=float, default=300, help="a probe running longer aborts the run (default 300)")
    ap.add_argument("--overhead-gib", type=float, default=1.5, help="device memory per process beyond its cap (CUDA context, kernels); default 1.5")
    ap.add_argument("--reserve-gib", type=float, default=2.0, help="device memory the scheduler leaves unassigned (default 2)")
    ap.add_argument(
        "--contention-gib",
        type=float,
        default=0.5,
        help="an out-of-memory error while less than this is free on the device is an error, not a result (default 0.5)",
    )
    ap.add_argument("--python", default=sys.executable, help="the Python that runs the probes (default this one)")
    ap.add_argument("--log-dir", help="each probe's stdout and stderr (default OUTPUT_STEM.logs/)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit (no GPU needed)")
    args = ap.parse_args()

    cases: list[Case] = []
    for name in args.cases.split(","):
        if name not in CASE_LISTS:
            ap.error(f"--cases: {name!r} is not one of {', '.join(CASE_LISTS)}")
        cases += CASE_LISTS[name]
    if args.only:
        cases = [c for c in cases if any(s in c.id for s in args.only)]
    if not cases:
        ap.error("no case left")
    if args.list:
        for c in cases:
            print(
                f"{c.id:<55} {' '.join(c.argv(0)[1:-2])} --{c.param.replace('_', '-')} {c.step}..{c.max_value}{f' (multiples of {c.step})' if c.step > 1 else ''}"
            )
        return 0

    previous = None
    if args.resume and Path(args.output).exists():
        previous = json.loads(Path(args.output).read_text())
    log(f"{len(cases)} cases, --parallel {args.parallel}, budget {args.budget_s:g} s; asking the device for versions")
    env_info = environment(args.python)
    log(
        f"{env_info['gpu_name']}, {gib(env_info['gpu_total_memory'])}; torch {env_info['torch']} (CUDA {env_info['torch_cuda']}), "
        f"transformers {env_info.get('transformers')}, driver {env_info.get('driver')}"
    )
    if previous and previous.get("environment", {}).get("torch") not in (None, env_info["torch"]):
        raise SystemExit("gpu_truth.py: --resume: the previous output was made with another torch; start a new output")
    return Run(args, cases, env_info, previous).go()


if __name__ == "__main__":
    sys.exit(main())
