"""research/ holds the probes and scripts that produced measurements (provenance); nothing in the
product, its tests or its build may read it (research/README.md). The rule checked here:

- Scanned: every text file under rust/, python/, tests/, scripts/, benches/, fuzz/ and .ci/, and
  Makefile, Cargo.toml, pyproject.toml (build outputs, caches and hidden folders skipped; Markdown
  is prose and may cite anything; this file is skipped, it has to name both folders).
- ``tools/`` (the folder research/ and tests/data/ replaced) may not appear at all, nor a path
  joined from a ``"tools"`` component.
- ``research/``, or a ``"research"`` path component, may appear only where a reader cannot act on
  it: in a comment (``#`` in Python, TOML, shell and Makefiles; ``//`` in Rust and C) or a Python
  docstring, i.e. as a citation of where something came from. The one other mention allowed is
  pyproject.toml's ruff ``extend-exclude``, which keeps research/ out of the lint.
- Every file in tests/data/ is listed in tests/data/README.md, which says where it came from.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("rust", "python", "tests", "scripts", "benches", "fuzz", ".ci")
FILES = ("Makefile", "Cargo.toml", "pyproject.toml")
SKIP_DIRS = {"target", "__pycache__", "corpus", "artifacts", "node_modules"}
SLASH_COMMENT = {".rs", ".c", ".cu", ".h", ".cpp"}
TOOLS = re.compile(r"""(?<![\w.-])tools/|["']tools["']""")
RESEARCH = re.compile(r"""(?<![\w.-])research/|["']research["']""")
ALLOWED = {("pyproject.toml", 'extend-exclude = ["research"]')}


def scanned() -> list[Path]:
    out = [REPO / f for f in FILES if (REPO / f).is_file()]
    for root in ROOTS:
        for p in sorted((REPO / root).rglob("*")):
            rel = p.relative_to(REPO).parts
            if not p.is_file() or p.suffix == ".md" or p == Path(__file__).resolve():
                continue
            if any(part in SKIP_DIRS or (part.startswith(".") and part != ".ci") for part in rel[:-1]):
                continue
            out.append(p)
    return out


def text_of(p: Path) -> str | None:
    if p.stat().st_size > 8 << 20:
        return None
    data = p.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def python_citations(text: str) -> set[int]:
    """Lines of comments and docstrings: where a Python file may cite research/."""
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            lines.add(tok.start[0])
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def comment_start(p: Path, line: str) -> int:
    """Where the line's comment starts (len(line) if it has none)."""
    marker = "//" if p.suffix in SLASH_COMMENT else "#"
    at = line.find(marker)
    return len(line) if at < 0 else at


def violations() -> list[str]:
    found = []
    for p in scanned():
        text = text_of(p)
        if text is None:
            continue
        rel = p.relative_to(REPO).as_posix()
        cited = python_citations(text) if p.suffix == ".py" else None
        for n, line in enumerate(text.splitlines(), 1):
            if TOOLS.search(line):
                found.append(f"{rel}:{n}: names tools/, which is gone (research/ or tests/data/ now): {line.strip()}")
            for m in RESEARCH.finditer(line):
                if (rel, line.strip()) in ALLOWED:
                    continue
                ok = n in cited if cited is not None else m.start() > comment_start(p, line)
                if not ok:
                    found.append(f"{rel}:{n}: reads or names research/ outside a comment or docstring: {line.strip()}")
                    break
    return found


def test_nothing_in_the_product_tests_or_build_reads_research():
    found = violations()
    assert not found, "research/ is provenance only (research/README.md):\n" + "\n".join(found)


def test_the_checker_sees_a_read_and_lets_a_citation_pass(tmp_path):
    # The rule itself, on known lines: a path string is a read, a comment or docstring is not.
    code = '"""Made by research/x.py."""\n# research/x.py made it\nopen("research/x.txt")\nPath("..", "research", "x")\n'
    cited = python_citations(code)
    hits = [n for n, line in enumerate(code.splitlines(), 1) if RESEARCH.search(line) and n not in cited]
    assert hits == [3, 4]
    rs = Path("x.rs")
    assert comment_start(rs, "/// research/x.cu") < "/// research/x.cu".index("research")
    assert comment_start(rs, 'let p = "research/x";') == len('let p = "research/x";')
    assert TOOLS.search('root.join("tools/driver-probes")') and not TOOLS.search("pickletools.dis, itertools")


def test_every_fixture_says_where_it_came_from():
    data = REPO / "tests" / "data"
    readme = (data / "README.md").read_text()
    missing = [p.name for p in sorted(data.iterdir()) if p.is_file() and p.name != "README.md" and f"`{p.name}`" not in readme]
    assert not missing, f"tests/data/README.md does not list {missing}: say what each is, what made it and which tests read it"
