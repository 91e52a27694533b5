"""Writes docs/policies.md from the policy registry (every policy, every option: type, default,
searched values, help). tests/test_policies.py fails when the file is out of date.

    python scripts/policy_docs.py           # rewrite docs/policies.md
    python scripts/policy_docs.py --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

from allocreplay._registry import docs_markdown

DOCS = Path(__file__).resolve().parent.parent / "docs" / "policies.md"


def main() -> int:
    text = docs_markdown()
    if "--check" in sys.argv[1:]:
        if not DOCS.exists() or DOCS.read_text() != text:
            print(f"{DOCS}: out of date; run python scripts/policy_docs.py", file=sys.stderr)
            return 1
        return 0
    DOCS.write_text(text)
    print(f"wrote {DOCS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
