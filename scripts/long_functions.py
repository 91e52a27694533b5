"""Lists the Rust functions longer than N lines (issue 27: none over 120 in src/).

    python scripts/long_functions.py [--max N] [--tests] [PATH ...]

PATHs are files or directories (default: every ``rust/*/src`` of the repository). A function's
length is counted from the line of its ``fn`` to the line of its closing brace, both included
(a nested ``fn`` counts in its parent's length and is listed on its own too). Bodies are matched by
counting braces after blanking comments (``//``, nested ``/* */``), string literals (plain, byte,
raw ``r#"…"#``) and char / byte literals (``'{'``; lifetimes such as ``'a`` are left alone).
Items under ``#[cfg(test)]`` (the unit-test modules) are skipped unless ``--tests`` is given.

Prints ``path:line: name (N lines)``, longest first, and exits 1 if any function exceeds the
limit, 0 otherwise, so that CI can keep the rule true.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
CFG_TEST = re.compile(r"#\[cfg\(test\)\]")
RAW_STRING = re.compile(r'b?r(#*)"')


def blank(src: str) -> str:
    """`src` with comments and string / char literals replaced by spaces (newlines kept), so
    that braces and `fn` inside them are not seen."""
    out = list(src)
    n = len(src)
    i = 0

    def wipe(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            end = src.find("\n", i)
            end = n if end < 0 else end
            wipe(i, end)
            i = end
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c in "br" and (m := RAW_STRING.match(src, i)) and not _ident_char(src, i - 1):
            # Raw string: ends at `"` followed by as many `#`.
            close = '"' + m.group(1)
            end = src.find(close, m.end())
            end = n if end < 0 else end + len(close)
            wipe(i, end)
            i = end
        elif c == '"' or (c == "b" and nxt == '"' and not _ident_char(src, i - 1)):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'" or (c == "b" and nxt == "'" and not _ident_char(src, i - 1)):
            q = i + (1 if c == "'" else 2)
            # A char literal: '\…' (an escape) or one character then a quote; else a lifetime.
            if q < n and src[q] == "\\":
                j = q + 2
                while j < n and src[j] != "'":
                    j += 1
                wipe(i, j + 1)
                i = j + 1
            elif q + 1 < n and src[q + 1] == "'":
                wipe(i, q + 2)
                i = q + 2
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def _ident_char(s: str, k: int) -> bool:
    return k >= 0 and (s[k].isalnum() or s[k] == "_")


def match_brace(text: str, open_at: int) -> int:
    """Index of the brace closing the one at `open_at` (len(text) if unbalanced)."""
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text)


def item_body(text: str, start: int) -> tuple[int, int] | None:
    """The braces of the item starting at `start`: the first `{` outside parentheses and
    brackets, or None when a `;` comes first (a declaration without a body)."""
    depth = 0
    for k in range(start, len(text)):
        ch = text[k]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch == ";":
            return None
        elif depth == 0 and ch == "{":
            return k, match_brace(text, k)
    return None


def functions(path: Path, tests: bool) -> list[tuple[int, str, int]]:
    """(line, name, length in lines) of every function of the file with a body."""
    text = blank(path.read_text(encoding="utf-8"))
    skipped: list[tuple[int, int]] = []
    if not tests:
        for m in CFG_TEST.finditer(text):
            body = item_body(text, m.end())
            if body:
                skipped.append((m.start(), body[1]))
    line_at = _line_index(text)
    out = []
    for m in FN.finditer(text):
        if any(a <= m.start() <= b for a, b in skipped):
            continue
        body = item_body(text, m.end())
        if body is None:
            continue
        first, last = line_at(m.start()), line_at(body[1])
        out.append((first, m.group(1), last - first + 1))
    return out


def _line_index(text: str) -> Callable[[int], int]:
    starts = [0] + [k + 1 for k, ch in enumerate(text) if ch == "\n"]

    def line_at(pos: int) -> int:
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    return line_at


def rust_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        files.extend(sorted(p.rglob("*.rs")) if p.is_dir() else [p])
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=Path, help="files or directories (default: rust/*/src)")
    ap.add_argument("--max", type=int, default=120, help="longest length allowed, in lines (default 120)")
    ap.add_argument("--tests", action="store_true", help="count the #[cfg(test)] items too")
    args = ap.parse_args(argv)
    paths = args.paths or sorted(ROOT.glob("rust/*/src"))
    long = []
    for f in rust_files(paths):
        for line, name, n in functions(f, args.tests):
            if n > args.max:
                long.append((n, f, line, name))
    long.sort(key=lambda x: (-x[0], str(x[1]), x[2]))
    for n, f, line, name in long:
        shown = f.resolve().relative_to(ROOT) if f.resolve().is_relative_to(ROOT) else f
        print(f"{shown}:{line}: {name} ({n} lines)")
    if long:
        print(f"{len(long)} function(s) over {args.max} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
