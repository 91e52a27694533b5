"""Shared fixtures: the traces shipped in traces/ and the real captures in ../shared/traces.

The shared captures live beside the repository (CI copies shared/ next to the clone). A test
that needs one FAILS when it is missing: a silent skip would hide that the bars were not
checked.
"""

from __future__ import annotations

import importlib.util
import json
import lzma
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from allocreplay.cli import cli

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "traces"
SHARED_PYTORCH = REPO.parent / "shared" / "traces" / "pytorch"


def shared_pytorch_pickles() -> list[Path]:
    pickles = sorted(SHARED_PYTORCH.glob("*.pickle.xz"))
    # Collected at import time: fail collection loudly rather than parametrizing over nothing.
    assert pickles, f"no PyTorch captures under {SHARED_PYTORCH}: shared/ must sit beside the repository"
    return pickles


def shared(name: str) -> Path:
    p = SHARED_PYTORCH / name
    assert p.is_file(), f"missing fixture {p}: shared/ must sit beside the repository"
    return p


def load_snapshot(path: Path) -> dict:
    # These are our own captures (trusted fixtures), so the test may use Python's pickle on
    # them to count entries independently of allocreplay's own (non-executing) parser.
    with lzma.open(path) as f:
        return pickle.load(f)


def sidecar(path: Path) -> dict:
    return json.loads(path.with_name(path.name.split(".")[0] + ".json").read_text())


class Run:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


def run_subprocess(*args: str) -> Run:
    p = subprocess.run([sys.executable, "-m", "allocreplay", *map(str, args)], capture_output=True, text=True, timeout=300)
    return Run(p.returncode, p.stdout, p.stderr)


def run_clirunner(*args: str) -> Run:
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()
    r = runner.invoke(cli, list(map(str, args)))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return Run(r.exit_code, r.stdout, r.stderr)


@pytest.fixture(params=["subprocess", "clirunner"])
def run_cli(request):
    """Runs the CLI both as a real process and through click's CliRunner."""
    return run_subprocess if request.param == "subprocess" else run_clirunner


# Optional packages some tests need. Locally a missing one skips those tests (pytest's summary
# says why); in CI (CI=true, .ci/run installs them) a missing one fails the whole run at once.
CI_PACKAGES = ("tensorflow", "torch", "matplotlib", "ray", "plotly")


def pytest_configure(config: pytest.Config) -> None:
    import importlib.util
    import os

    if os.environ.get("CI") == "true":
        missing = [m for m in CI_PACKAGES if importlib.util.find_spec(m) is None]
        if not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")):
            missing.append("chromium (the report's browser tests)")
        if missing:
            raise pytest.UsageError(f"CI=true but {', '.join(missing)} not installed: .ci/run must install them (TEST_EXTRAS; chromium by apt)")


def real_torch() -> bool:
    """Whether the real torch is importable (``tests/fake_torch`` stands in for it elsewhere)."""
    spec = importlib.util.find_spec("torch")
    return spec is not None and "fake_torch" not in str(spec.origin)


def require_torch_for_module(what: str) -> None:
    """At a test module's top: without torch, fail in CI (which installs it) and skip elsewhere."""
    if real_torch():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"torch is not installed: CI must install it (.ci/run's TEST_EXTRAS) to test {what}", pytrace=False)
    pytest.skip(f"torch is not installed here: {what} is tested where it is (CI installs it)", allow_module_level=True)
