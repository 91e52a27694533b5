"""Shared by starts.py and candidates.py: a workload's requests (the .req file written by
w.py's req()) and the driver's address for each allocation in its GPU replay (W_async.txt)."""
import lzma


def load(w):
    """(events, {id: driver address}, {id: size rounded to 512 B}, the pool's base address)."""
    lines = lzma.open(f"../../device/asyncreplay/{w}.req.xz", "rt").read().split("\n")
    ev = [l.split() for l in lines[1:] if l]
    addr = {}
    for l in open(f"{w}_async.txt"):
        i, a, _r = map(int, l.split())
        addr[i] = a
    size = {int(e[1]): (int(e[2]) + 511) // 512 * 512 for e in ev if e[0] == "a"}
    first = next(int(e[1]) for e in ev if e[0] == "a" and int(e[2]) > 0)
    return ev, addr, size, addr[first]
