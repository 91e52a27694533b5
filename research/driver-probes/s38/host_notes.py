"""Session 38 (issue 29): writes what capture's hook now notes as `driver_memory.host` (the
driver's pinned host memory: `/dev/zero (deleted)` mappings at 2 MiB boundaries, new since the last
look) into a copy of a recording's `.json`, from session 37's probe scans (`cap_scan.sh`: the
mappings at every change of the driver's device memory). The probe's recordings were made by the
hook before it noted them; the scans saw the same mappings at those looks.
Usage: python host_notes.py NAME  (reads NAME.json and NAME.scan.json, writes NAME.host.json)"""
import json
import sys

PAGE = 2 << 20
name = sys.argv[1]
scan = json.load(open(f"{name}.scan.json"))
seen: set = set()
host = []
for index, _allocs, maps in scan["scans"]:
    pinned = {(a, b) for a, b, path in maps if path == "/dev/zero (deleted)" and a % PAGE == 0}
    host += [[index, b - a] for a, b in sorted(pinned - seen)]
    seen = pinned
meta = json.load(open(f"{name}.json"))
meta["driver_memory"]["host"] = host
meta["driver_memory"]["host_from"] = "research/driver-probes/s38/host_notes.py: the probe's scans at each driver change"
json.dump(meta, open(f"{name}.host.json", "w"))
print(name, host)
