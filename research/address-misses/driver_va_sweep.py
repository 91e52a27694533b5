"""Session 35 (issue 29): does the driver's own allocation take more address space than the
memory `cudaMemGetInfo` saw go? Replays every capture with driver-memory notes
`validate --no-addresses` with its notes as recorded and with each note's part that is not
whole 64 MiB cuBLAS handles (nor the local memory's growth) scaled by RULE, then rounded up to
2 MiB, and prints one line per capture: the verdicts side by side.
Usage: python driver_va_sweep.py RULE CAPTURE.json ... (RULE: 1.5, or 1.5:8 to scale only parts
of at least 8 MiB). The capture's recording is CAPTURE.pickle.xz beside its .json."""
import json, math, subprocess, sys, tempfile

MIB = 1 << 20
HANDLE = 64 * MIB


def scaled(changes, factor, at_least):
    out, grown = [], False
    for allocs, b in changes:
        if b <= 0:
            out.append([allocs, b]); continue
        # The local memory's growth (engine/host_ranges.rs, driver_changes) stays as noted.
        if not grown and b >= 32 * MIB and b % HANDLE >= 16 * MIB:
            grown = True; out.append([allocs, b]); continue
        rest = b % HANDLE
        if rest >= at_least * MIB:
            rest = math.ceil(rest * factor / (2 * MIB)) * 2 * MIB
        out.append([allocs, b - b % HANDLE + rest])
    return out


def verdict(pickle, meta):
    out = subprocess.run(["allocreplay", "validate", pickle, "--meta", meta, "--no-addresses"], capture_output=True, text=True).stdout
    seg = next((l.split(None, 2)[-1] for l in out.splitlines() if "segment events" in l), "?")
    return ("exact" if "OK" in out.splitlines()[-1] else "DIFF") + " (" + seg.split(" (")[0] + ")"


def main(rule, metas):
    factor, _, least = rule.partition(":")
    factor, least = float(factor), int(least or 0)
    same = changed_ok = changed_bad = 0
    for m in metas:
        j = json.load(open(m))
        pickle = m[: -len(".json")] + ".pickle.xz"
        before = verdict(pickle, m)
        j["driver_memory"]["changes"] = scaled(j["driver_memory"]["changes"], factor, least)
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(j, f); f.flush()
            after = verdict(pickle, f.name)
        print(f"{m}: {before} -> {after}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
