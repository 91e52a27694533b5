"""The search behind ``allocreplay fit``: which values of the varied workload parameters to try.

One parameter (``--vary batch_size=1:1024``) is searched as a user would by hand, assuming that
a larger value needs more memory: start at the low end and grow ×2 until a candidate does not
fit, then bisect between the largest value that fitted and the smallest that did not, on
integers (or on multiples of ``--step``). Several ``--vary`` make a grid: every parameter but
the last takes its listed values (or, for a range, its low end and its ×2 multiples up to the
high end), and the last is searched at each of their combinations; the answer is that
frontier. ``--values 8,12,16`` (or ``--vary NAME=8,12,16``) tries exactly those values, all of them.

Each *setting* (the defaults, ``--setting``, the best setting ``tune`` finds) has its own
boundary, but one capture serves them all: the searches of every setting run in lockstep and
a round captures the union of the values they ask for (up to ``jobs`` at once: with several
jobs, the ×2 phase looks ahead and the bisection splits its interval ``jobs + 1`` ways).

The answer never goes past a failure: a setting's answer is the largest value that fitted
below the smallest value that did not fit. A value that fits above one that did not is a break
of the monotonicity the search assumes; once every boundary is found, the two values above
each first failure are tried too (``check``), and every such pair among the values tried is
reported (:func:`monotonicity_breaks`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from allocreplay.errors import InvalidArgumentError

__all__ = ["Axis", "Search", "monotonicity_breaks", "parse_values", "parse_vary"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Axis:
    """One varied parameter: a range ``lo..hi`` searched on multiples of ``step`` from ``lo``,
    or an explicit list of ``values``."""

    name: str
    lo: int
    hi: int
    step: int = 1
    values: tuple[int, ...] | None = None

    def grid(self) -> list[int]:
        """The values a grid's outer parameter takes: the list, or ``lo`` and its ×2 multiples up
        to ``hi`` (``hi`` included)."""
        if self.values is not None:
            return list(self.values)
        out, v = [], self.lo
        while v < self.hi:
            out.append(v)
            v = self.snap(max(v * 2, v + self.step))
        out.append(self.hi)
        return sorted(set(out))

    def snap(self, v: int) -> int:
        """The largest point of the search grid (``lo + k * step``) at or below ``v``, within range."""
        v = min(max(v, self.lo), self.hi)
        return self.lo + (v - self.lo) // self.step * self.step

    def describe(self) -> str:
        if self.values is not None:
            return f"{self.name} in {', '.join(map(str, self.values))}"
        return f"{self.name} in {self.lo}..{self.hi}" + (f" (multiples of {self.step} from {self.lo})" if self.step != 1 else "")


def parse_values(text: str, what: str) -> tuple[int, ...]:
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            v = int(part)
        except ValueError:
            raise InvalidArgumentError(f"{what}: {part!r} is not an integer") from None
        if v < 0:
            raise InvalidArgumentError(f"{what}: {v} is negative")
        values.append(v)
    if not values:
        raise InvalidArgumentError(f"{what}: no value given")
    return tuple(sorted(set(values)))


def parse_vary(text: str, step: int | None = None) -> Axis:
    """``NAME=LO:HI`` (a range searched on integers, or on multiples of ``step``) or
    ``NAME=V1,V2,...`` (those values)."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not _NAME.fullmatch(name):
        raise InvalidArgumentError(f"--vary {text!r}: expected NAME=LO:HI (batch_size=1:1024) or NAME=V1,V2,... (seq_len=512,1024,2048)")
    rest = rest.strip()
    if ":" in rest:
        lo_s, _, hi_s = rest.partition(":")
        try:
            lo, hi = int(lo_s), int(hi_s)
        except ValueError:
            raise InvalidArgumentError(f"--vary {text!r}: LO and HI must be integers") from None
        if lo < 0 or hi < lo:
            raise InvalidArgumentError(f"--vary {text!r}: expected 0 <= LO <= HI")
        s = 1 if step is None else step
        if s < 1:
            raise InvalidArgumentError(f"--step must be at least 1, got {s}")
        if lo == 0 and s == 1:
            lo = 1 if hi >= 1 else 0
        return Axis(name, lo, hi, s)
    values = parse_values(rest, f"--vary {name}")
    return Axis(name, values[0], values[-1], 1, values)


Point = tuple[int, ...]
Fits = Callable[[Point], Mapping[str, bool]]


@dataclass
class _Line:
    """The search of the last axis at one combination of the others, for one setting."""

    outer: Point
    setting: str
    ok: int | None = None
    fail: int | None = None
    done: bool = False


@dataclass
class Search:
    """Runs the lockstep search. ``evaluate`` takes a batch of points (value tuples, in the
    order of ``axes``) and returns, per point, whether it fits under each setting."""

    axes: Sequence[Axis]
    settings: Sequence[str]
    jobs: int = 1
    check: bool = True
    """After the search, also try the two values above each first failure (``check_points``)."""
    results: dict[Point, dict[str, bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.axes:
            raise InvalidArgumentError("fit: nothing to vary: give --vary NAME=LO:HI")
        names = [a.name for a in self.axes]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"fit: --vary names a parameter twice: {', '.join(names)}")
        outers = list(itertools.product(*(a.grid() for a in self.axes[:-1])))
        self.lines = [_Line(tuple(o), s) for o in outers for s in self.settings]
        self._checked = False
        self._pending_checks: list[Point] = []

    @property
    def inner(self) -> Axis:
        return self.axes[-1]

    def _update(self, line: _Line) -> None:
        tried = sorted((p[-1], r[line.setting]) for p, r in self.results.items() if p[:-1] == line.outer and line.setting in r)
        fails = [v for v, fits in tried if not fits]
        line.fail = min(fails) if fails else None
        oks = [v for v, fits in tried if fits and (line.fail is None or v < line.fail)]
        line.ok = max(oks) if oks else None

    def _wanted(self, line: _Line, k: int) -> list[int]:
        """Up to ``k`` values of the last axis this line asks for next ([] once decided)."""
        ax = self.inner
        self._update(line)
        if ax.values is not None:
            # A list: every value is tried (the table shows them all).
            tried = {p[-1] for p, r in self.results.items() if p[:-1] == line.outer and line.setting in r}
            return [v for v in ax.values if v not in tried][:k]
        if line.ok is None and line.fail is None:
            return [ax.lo]
        if line.ok is None:
            # The low end did not fit (a failure below a larger success is not searched for).
            return []
        if line.fail is None:
            if line.ok >= ax.hi:
                return []
            out: list[int] = []
            v = line.ok
            while len(out) < k and v < ax.hi:
                v = ax.snap(max(v * 2, v + ax.step))
                out.append(v)
            return out
        lo_k = (line.ok - ax.lo) // ax.step + 1
        hi_k = (line.fail - ax.lo) // ax.step - 1
        if lo_k > hi_k:
            return []
        return [ax.lo + i * ax.step for i in _split(lo_k, hi_k, k)]

    def next_round(self) -> list[Point]:
        """The points to evaluate next (empty when every line is decided)."""
        per_line: list[list[Point]] = []
        for line in self.lines:
            if line.done:
                continue
            want = [(*line.outer, v) for v in self._wanted(line, max(1, self.jobs))]
            want = [p for p in want if p not in self.results or line.setting not in self.results[p]]
            if not want:
                line.done = True
                continue
            per_line.append(want)
        chosen: list[Point] = []
        for rank in itertools.count():
            added = False
            for want in per_line:
                if rank < len(want):
                    added = True
                    if want[rank] not in chosen and len(chosen) < max(1, self.jobs):
                        chosen.append(want[rank])
            if not added or len(chosen) >= max(1, self.jobs):
                break
        if not chosen and self.check and not self._checked:
            # Every boundary found: the monotonicity the search assumed, checked above each
            # first failure (as gpu_truth.py checks the real runs at B+1 and B+2).
            self._checked = True
            chosen = sorted(set(self.check_points()))
            if chosen:
                self._pending_checks = chosen[max(1, self.jobs) :]
                return chosen[: max(1, self.jobs)]
        if not chosen and self._pending_checks:
            chosen, self._pending_checks = self._pending_checks[: max(1, self.jobs)], self._pending_checks[max(1, self.jobs) :]
        return chosen

    def check_points(self) -> list[Point]:
        """The two values of the last axis above each line's first failure (one past the end of
        a list), not tried yet."""
        ax = self.inner
        out = []
        for line in self.lines:
            self._update(line)
            if line.fail is None or line.ok is None:
                continue
            if ax.values is not None:
                continue  # a list: every value was tried
            for k in (1, 2):
                v = line.fail + k * ax.step
                p = (*line.outer, v)
                if v <= ax.hi and p not in self.results:
                    out.append(p)
        return out

    def record(self, point: Point, fits: Mapping[str, bool]) -> None:
        self.results.setdefault(point, {}).update(fits)

    def run(self, evaluate: Callable[[list[Point]], list[Mapping[str, bool]]]) -> None:
        while True:
            batch = self.next_round()
            if not batch:
                return
            for p, r in zip(batch, evaluate(batch)):
                self.record(p, r)

    def answers(self) -> list[tuple[Point, str, int | None, int | None]]:
        """Per (combination of the outer axes, setting): the largest value of the last axis that
        fits below the first that does not, and that first failing value (None: none failed)."""
        out = []
        for line in self.lines:
            self._update(line)
            out.append((line.outer, line.setting, line.ok, line.fail))
        return out


def _split(lo: int, hi: int, k: int) -> list[int]:
    """Up to ``k`` integers that split ``[lo, hi]`` evenly (k = 1: its middle)."""
    n = hi - lo + 1
    if n <= k:
        return list(range(lo, hi + 1))
    picks = sorted({lo + (n * (j + 1)) // (k + 1) for j in range(k)})
    return [min(max(p, lo), hi) for p in picks]


def monotonicity_breaks(results: Mapping[Point, Mapping[str, bool]], setting: str) -> list[tuple[Point, Point]]:
    """Pairs (smaller point that does not fit, larger point that fits) along the last axis at
    the same values of the others: where a larger value needed less memory than a smaller one."""
    by_outer: dict[Point, list[tuple[int, bool]]] = {}
    for p, r in results.items():
        if setting in r:
            by_outer.setdefault(p[:-1], []).append((p[-1], r[setting]))
    out = []
    for outer, tried in sorted(by_outer.items()):
        tried.sort()
        for i, (v1, f1) in enumerate(tried):
            if f1:
                continue
            for v2, f2 in tried[i + 1 :]:
                if f2:
                    out.append(((*outer, v1), (*outer, v2)))
    return out
