"""Property tests (Hypothesis) of the Python entry points on arbitrary input (issue 14,
docs/bad-inputs.md): a policy spec, a capacity or a file's bytes either work or raise one of
the documented typed errors — an ``allocreplay.errors`` class that is a ``ValueError``
(``PolicySpecError``, ``InvalidArgumentError``, ``TraceFormatError`` and its subclasses) —
never anything else: not a ``TypeError``, not an ``OverflowError``, not an ``InternalError``
(a panic of the core), not pyo3's ``PanicException``.

Example counts are modest so the suite stays fast; Hypothesis's database (.hypothesis/) keeps
failing examples between runs."""

from __future__ import annotations

import lzma
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import allocreplay
from allocreplay import errors
from conftest import REPO, TRACES

SMALL_PICKLE = TRACES / "two_streams__default.pickle.xz"
SMALL_SIDECAR = TRACES / "two_streams__default.json"
SMALL_ARROW = TRACES / "torch_oom.arrow"
SMALL_PB = REPO / "fuzz" / "seeds" / "xplane" / "four_bfc_events.xplane.pb"

# Function-scoped fixtures (tmp_path) are reused across examples on purpose: each example
# writes its own file name.
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def expect_typed(call):
    """Runs ``call``; returns its result, or None when it raised a documented typed error.
    Anything else fails the test (with the exception chained)."""
    try:
        return call()
    except errors.InternalError as e:
        pytest.fail(f"a panic reached the user: {e}")
    except errors.AllocReplayError as e:
        if not isinstance(e, ValueError):
            pytest.fail(f"{type(e).__name__} is not a ValueError: {e}")
        assert str(e), "a typed error says what is wrong"
        return None
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        pytest.fail(f"untyped {type(e).__module__}.{type(e).__name__}: {e}")


@pytest.fixture(scope="module")
def small_trace() -> allocreplay.Trace:
    assert SMALL_ARROW.is_file(), f"missing fixture {SMALL_ARROW}"
    return allocreplay.load(SMALL_ARROW)


POLICIES = allocreplay.policies()
assert POLICIES, "the registry lists no policy"

garbage = st.text(alphabet=string.printable + "ÿ€\x00", max_size=12)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-1", "1e30", "0.0", "1.5", "2**64", "18446744073709551616", "nan", "inf", ""]),
)
lists = st.lists(st.tuples(st.sampled_from(["64", "256", ">", "0", "-3", "x"]), numbers), max_size=3).map(
    lambda items: "[" + ",".join(f"{a}:{b}" for a, b in items) + "]"
)
words = st.sampled_from(["True", "False", "true", "false", "1", "0", "yes", "platform", "bfc", "cuda_malloc_async", "backend"])


def option_value(option) -> st.SearchStrategy[str]:
    """Values an option of this type takes, plausible or extreme, as text."""
    known = [*option.search, *option.choices, *([] if option.unset else [option.default])]
    by_type = {
        "bool": st.sampled_from(["True", "False", "true", "false", "1", "0", "yes", "off"]),
        "integer": st.one_of(st.integers(-2, 4096).map(str), st.sampled_from(["21", "32", "64", "1024", str(2**63), str(2**64)])),
        "bytes": st.one_of(st.integers(0, 2**40).map(str), st.sampled_from(["0", "max", "1MiB", "2GiB", "0.5", "1.0", "100GiB", "16EiB"])),
        "fraction": st.one_of(st.floats(-0.5, 1.5).map(repr), st.sampled_from(["0", "0.0", "1", "1.0", "0.001", "0.999"])),
        "float": st.floats(-10, 10).map(repr),
        "choice": st.sampled_from(option.choices or ["x"]),
        "list": st.one_of(st.sampled_from(["1", "2", "4", "8", "16", "3"]), lists),
    }
    base = by_type.get(option.type, garbage)
    return st.one_of(st.sampled_from(known), base) if known else base


@st.composite
def policy_specs(draw) -> str:
    """A registry name with options: half the time its own options with values of their type
    (extremes included), else option names (and aliases) or garbage with any values."""
    info = draw(st.sampled_from(POLICIES))
    sep = ":" if info.syntax == "conf" else "="
    mode = draw(st.sampled_from(["typed", "typed", "mixed", "garbage"]))
    if mode == "garbage":
        return info.name + draw(st.sampled_from(["", ":", "::", ":recorded", ":,", "="])) + draw(garbage)
    if mode == "typed":
        options = draw(st.lists(st.sampled_from(info.options), max_size=4, unique_by=lambda o: o.name)) if info.options else []
        items = [o.name + sep + draw(option_value(o)) for o in options]
        return info.name + (":" + ",".join(items) if items else "")
    names = [n for o in info.options for n in (o.name, *o.aliases)]
    known_values = [v for o in info.options for v in (*o.search, *o.choices, *([] if o.unset else [o.default]))]
    items = []
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(names) if names and draw(st.booleans()) else garbage)
        value = draw(st.one_of(st.sampled_from(known_values) if known_values else words, numbers, lists, words, garbage))
        items.append(name + draw(st.sampled_from([sep, sep, ":", "=", ""])) + value)
    joiner = draw(st.sampled_from([",", ",", ";", " ", ""]))
    return info.name + (":" + joiner.join(items) if items or draw(st.booleans()) else "")


@SETTINGS
@given(spec=policy_specs(), capacity=st.sampled_from([None, "1GiB", "64MiB", "0.5"]))
def test_any_policy_spec_replays_or_is_a_typed_error(small_trace, spec, capacity):
    result = expect_typed(lambda: allocreplay.replay(small_trace, [spec], capacity, timeline_points=10, placements=False))
    if result is not None:
        summary = result.summary
        assert summary.height == len(small_trace.info().devices)
        assert summary["policy"].to_list()[0] is not None


capacities = st.one_of(
    st.none(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.integers(min_value=0, max_value=1 << 36),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0.0, max_value=2.0),
    st.booleans(),
    st.builds(
        lambda n, unit: f"{n}{unit}",
        st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", ".", "1.", ".5"])),
        st.sampled_from(["", "B", "b", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "KB", "MB", "GB", "TB", "k", "K", "M", "G", "%", " GiB", "gib", "x"]),
    ),
    st.sampled_from(["2GiB", "0.75", "1e9", "0x10", "80 GiB", "-1", "", " ", "inf", "nan", "1_000", "٣GiB"]),
    garbage,
)


@SETTINGS
@given(capacity=capacities)
def test_any_capacity_replays_or_is_a_typed_error(small_trace, capacity):
    result = expect_typed(lambda: allocreplay.replay(small_trace, ["pytorch", "cuda-malloc"], capacity, timeline_points=10, placements=False))
    if result is not None:
        assert result.summary.height == 2 * len(small_trace.info().devices)
    if isinstance(capacity, str):
        parsed = expect_typed(lambda: allocreplay.parse_capacity(capacity))
        assert parsed is None or isinstance(parsed, (int, float))


def real_bytes(suffix: str) -> bytes:
    path = {".pickle": SMALL_PICKLE, ".pickle.xz": SMALL_PICKLE, ".arrow": SMALL_ARROW, ".json": SMALL_SIDECAR, ".pb": SMALL_PB}[suffix]
    assert path.is_file(), f"missing fixture {path}"
    data = path.read_bytes()
    return lzma.decompress(data) if suffix == ".pickle" else data


SUFFIXES = [".pickle", ".pickle.xz", ".arrow", ".json", ".pb"]
ORIGINALS = {s: real_bytes(s) for s in SUFFIXES}


@st.composite
def file_contents(draw) -> tuple[str, bytes]:
    """A suffix and bytes for it: random, or the real small file of that kind mutated (bytes
    flipped, a range cut out or repeated, truncated)."""
    suffix = draw(st.sampled_from(SUFFIXES))
    if draw(st.integers(0, 3)) == 0:
        return suffix, draw(st.binary(max_size=512))
    data = bytearray(ORIGINALS[suffix])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "repeat", "truncate"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[i] = draw(st.sampled_from([0, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
        elif kind == "cut":
            del data[i : i + draw(st.integers(1, 64))]
        elif kind == "repeat":
            data[i:i] = data[i : i + draw(st.integers(1, 64))] * draw(st.integers(1, 4))
        else:
            del data[i:]
    return suffix, bytes(data)


@SETTINGS
@given(case=file_contents(), lenient=st.booleans())
def test_loading_any_bytes_loads_or_is_a_typed_error(tmp_path: Path, case, lenient):
    suffix, data = case
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(data)
    trace = expect_typed(lambda: allocreplay.load(path, lenient=lenient))
    if trace is not None:
        # What loads is a usable trace.
        assert len(trace) >= 0
        expect_typed(lambda: allocreplay.replay(trace, ["pytorch"], "1GiB", timeline_points=10, placements=False))
    if suffix == ".json":
        # A PyTorch snapshot's sidecar is read beside it (NAME.json next to NAME.pickle.xz).
        (tmp_path / "trace.pickle.xz").write_bytes(ORIGINALS[".pickle.xz"])
        expect_typed(lambda: allocreplay.load(tmp_path / "trace.pickle.xz", lenient=lenient))
