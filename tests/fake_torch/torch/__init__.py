"""A stand-in for ``torch`` (CPU-only CI has no CUDA): just the API surface that
``allocreplay capture``'s PyTorch hook uses, driven by a REAL snapshot.

- ``FAKE_TORCH_SNAPSHOT``: a real ``torch.cuda.memory._snapshot()`` pickle (.pickle.xz) that
  ``_snapshot()`` returns once ``_record_memory_history`` has been switched on (before that, a
  snapshot with empty ``device_traces``, as the real allocator gives);
- ``FAKE_TORCH_META``: that capture's ``.json`` (device_total_bytes, memory_stats[_per_device]);
- ``FAKE_TORCH_GPU=0``: no GPU (``torch.cuda.is_available()`` is False);
- ``FAKE_TORCH_DEVICE``: the current device index;
- ``FAKE_TORCH_LOG``: a file where each call of interest appends one JSON line.

Like the real one, CUDA is initialized lazily (``torch.cuda._lazy_init``, running the calls
queued with ``torch.cuda._lazy_call``) by the first allocation (``torch.cuda.allocate``
here) or by ``set_per_process_memory_fraction``.
"""

import json
import os

__version__ = "2.11.0+fake"


class OutOfMemoryError(RuntimeError):
    pass


class version:
    cuda = "13.0"


def _log(event, **kw):
    path = os.environ.get("FAKE_TORCH_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"event": event, "pid": os.getpid(), **kw}) + "\n")


from torch import cuda as cuda  # noqa: E402
