"""The policy registry as plain data: `allocreplay policies --json` and docs/policies.md
(`scripts/policy_docs.py`) are made from `_api.policies()` here, so neither can drift from
the Rust declarations."""

from __future__ import annotations

from typing import Any

from allocreplay import _api


def option_dict(o: _api.PolicyOption) -> dict[str, Any]:
    return {
        "name": o.name,
        "type": o.type,
        "default": o.default,
        "unset": o.unset,
        "help": o.help,
        "choices": list(o.choices),
        "search": list(o.search),
        "aliases": list(o.aliases),
        "env": o.env,
    }


def policy_dict(p: _api.PolicyInfo) -> dict[str, Any]:
    return {
        "name": p.name,
        "summary": p.summary,
        "models": p.models,
        "kind": p.kind,
        "syntax": p.syntax,
        "framework": p.framework,
        "env": p.env,
        "recorded": p.recorded,
        "options": [option_dict(o) for o in p.options],
        "search_excludes": [list(x) for x in p.search_excludes],
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _example(p: _api.PolicyInfo) -> str:
    sep = ":" if p.syntax == "conf" else "="
    opts = [o for o in p.options if o.search][:2]
    if not opts:
        return f"`{p.name}`"
    return f"`{p.name}:" + ",".join(f"{o.name}{sep}{o.search[0]}" for o in opts) + "`"


def docs_markdown() -> str:
    """docs/policies.md: every policy, every option, its type, default and help."""
    out = [
        "# Policies",
        "",
        "Generated from the policy registry (`rust/allocreplay-core/src/policy/registry.rs`) by",
        "`python scripts/policy_docs.py`; do not edit by hand. `allocreplay policies` prints the same.",
        "",
        "A spec is `NAME` or `NAME:OPTIONS`. `pytorch` takes `PYTORCH_CUDA_ALLOC_CONF` syntax",
        "(`key:value`, comma separated, bracket lists); the others `key=value` (or `key:value`).",
        "Booleans accept true/1/yes/on and false/0/no/off in any letter case. Sizes take bytes, a",
        "unit (`80GiB`, `16GB`) or a fraction of the device's memory (`0.9`). *Searched* lists the",
        "values `allocreplay tune` tries besides the default.",
        "",
        "| policy | summary | models | example |",
        "|---|---|---|---|",
    ]
    infos = _api.policies()
    for p in infos:
        out.append(f"| `{p.name}` | {_cell(p.summary)} | {_cell(p.models)} | {_example(p)} |")
    for p in infos:
        out += ["", f"## `{p.name}`", "", _cell(p.summary) + ".", "", f"Models: {p.models}."]
        notes = [f"kind: {p.kind}", f"syntax: `{p.syntax}`"]
        if p.framework:
            notes.append(f"`tune --framework {p.framework}`")
        if p.env:
            notes.append(f"the options are `{p.env}`")
        if p.recorded:
            notes.append(f"`{p.name}:recorded` replays the trace's own settings")
        for a, b in p.search_excludes:
            notes.append(f"`tune` does not set `{a}` and `{b}` together")
        out += ["", "; ".join(notes) + "."]
        if not p.options:
            out += ["", "No options."]
            continue
        out += ["", "| option | type | default | searched | env | help |", "|---|---|---|---|---|---|"]
        for o in p.options:
            default = f"*{o.default}*" if o.unset else f"`{o.default}`"
            kind = o.type + (f" ({', '.join(o.choices)})" if o.choices else "")
            name = f"`{o.name}`" + (f" (also `{'`, `'.join(o.aliases)}`)" if o.aliases else "")
            searched = ", ".join(f"`{v}`" for v in o.search) or "-"
            env = f"`{o.env}`" if o.env else "-"
            out.append(f"| {name} | {_cell(kind)} | {_cell(default)} | {_cell(searched)} | {env} | {_cell(o.help)} |")
    return "\n".join(out) + "\n"
