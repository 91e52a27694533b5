# `make test`: the Rust core's tests, then the Python package built into a virtualenv and its
# tests. Needs Rust (cargo; cargo-nextest if present) and Python >= 3.10 with venv.

PYTHON ?= python3
# Not the README's .venv: `pip install .` there installs the release wheel for users' commands,
# `make test` the dev build beside the sources; neither replaces the other.
VENV ?= .venv-dev
VENV_ABS := $(abspath $(VENV))
PY := $(VENV_ABS)/bin/python

.PHONY: test test-rust test-python venv test-extras develop wheel bench lint format fuzz

test: test-rust test-python

# The workspace's default members hold only the pure-Rust core: the PyO3 crate is built by
# maturin, not by cargo test.
test-rust:
	@if cargo nextest --version >/dev/null 2>&1; then cargo nextest run; else cargo test; fi

$(PY):
	$(PYTHON) -m venv $(VENV)

# Optional packages some tests need (CI: tensorflow-cpu, for the TensorFlow capture tests on the
# CPU; torch and transformers, for capture --no-gpu); without them those tests are skipped, and
# pytest's summary says why (under CI=true the --no-gpu tests fail instead).
TEST_EXTRAS ?=

venv: $(PY)
	$(PY) -m pip install --quiet "maturin>=1.5,<2" "pytest>=7" "polars>=1.10" "pyarrow>=15" "click>=8.1" "plotly>=5" "ruff==0.17.6" "mypy==2.4.1" "hypothesis>=6.100" "pytest-xdist>=3.5"
	@if [ -n "$(TEST_EXTRAS)" ]; then $(MAKE) --no-print-directory test-extras; fi

# The optional packages, without pip's cache (torch's CUDA wheels would otherwise take twice their
# 5 GB), tried twice. Under CI=true a failure stops the run here with pip's own error and the
# free disk, not later in pytest with only the names of the missing packages.
test-extras: $(PY)
	@for attempt in 1 2; do \
		if $(PY) -m pip install --quiet --no-cache-dir $(TEST_EXTRAS) >$(VENV_ABS)/test-extras.log 2>&1; then exit 0; fi; \
		tail -n 40 $(VENV_ABS)/test-extras.log; \
		echo "pip install $(TEST_EXTRAS) failed (attempt $$attempt of 2); free disk:"; df -h . "$${TMPDIR:-/tmp}" || true; \
	done; \
	if [ "$${CI:-}" = true ]; then echo "error: could not install $(TEST_EXTRAS), which the tests need under CI=true (see pip's error above)" >&2; exit 1; fi; \
	echo "warning: could not install $(TEST_EXTRAS): the tests that need it will be skipped"

# Builds the extension (dev profile: dependencies at opt-level 2, shared with `cargo test`)
# and installs the package into the virtualenv.
develop: venv
	VIRTUAL_ENV=$(VENV_ABS) PATH="$(VENV_ABS)/bin:$$PATH" $(VENV_ABS)/bin/maturin develop

# Two workers, each test file on one (its module fixtures built once): with CI's extras (torch's
# --no-gpu captures, which spend most of their time importing torch in a child process) pytest
# took 660 s instead of 917 s on the 2-core machine (session 36; 565 passed either way).
PYTEST_WORKERS ?= 2
test-python: develop
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile tests

# A release wheel in dist/ (what `pip install .` builds).
wheel: venv
	$(VENV_ABS)/bin/maturin build --release --out dist

# `make lint`: formatting, clippy with warnings as errors (both crates, every target), ruff,
# the Rust core's layering and function lengths (docs/architecture.md), mypy (strict) and stubtest
# (python/allocreplay/_core.pyi against the built extension). CI runs it.
lint: develop
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(PY) scripts/structure.py
	$(PY) scripts/long_functions.py
	$(VENV_ABS)/bin/ruff check python tests scripts
	$(VENV_ABS)/bin/ruff format --check python tests scripts
	$(VENV_ABS)/bin/mypy
	$(PY) -m mypy.stubtest allocreplay._core --mypy-config-file python/stubtest.ini

# `make format`: what `make lint` checks, rewritten in place.
format: venv
	cargo fmt --all
	$(VENV_ABS)/bin/ruff check --fix python tests scripts
	$(VENV_ABS)/bin/ruff format python tests scripts

# Import speed (see benches/RESULTS.md).
bench:
	cargo bench -p allocreplay-core --bench import

# Fuzz every importer and policy for FUZZ_SECONDS each (needs nightly and cargo-fuzz; see
# docs/bad-inputs.md).
FUZZ_SECONDS ?= 60
fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS)
