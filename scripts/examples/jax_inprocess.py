"""`allocreplay.capture()` in-process with JAX: entered after ``import jax`` but before JAX's
backends exist, so the profiler starts with them and the whole run is recorded."""

import sys

import jax
from jax_train import main

import allocreplay

out = sys.argv[1] if len(sys.argv) > 1 else "jax_inprocess.arrow"
with allocreplay.capture(out, framework="jax") as cap:
    main()
for t in cap.traces:
    print(t.describe())
print("devices:", jax.devices())
