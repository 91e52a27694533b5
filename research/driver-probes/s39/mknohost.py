import json, sys
for n in sys.argv[1:]:
    j = json.load(open(f"{n}.json"))
    dm = j.get("driver_memory") or {}
    had = "host" in dm
    if had:
        del j["driver_memory"]["host"]
    json.dump(j, open(f"{n}.nohost.json", "w"))
    print(n, "host removed" if had else "no host key")
