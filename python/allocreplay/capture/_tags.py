"""Tags storages by what they hold — parameters, buffers, gradients, optimizer state — as the
recorded program runs, so that ``allocreplay.analysis.breakdown`` can say what the memory at a
policy's peak is made of. Used by ``allocreplay capture --no-gpu`` (``_pytorch``).

Where each category is seen (the ``how`` of each, written into the trace's metadata):

- ``parameters``: the tensors of a module's ``_parameters`` (``nn.Parameter``), at the module's
  forward (the first forward of a module takes its whole subtree, every forward its own
  parameters), and the tensors each optimizer updates (``param_groups``) before each
  ``optimizer.step``; at the end of the run, every live module's.
- ``buffers``: a module's ``_buffers`` (``register_buffer``: BatchNorm's running statistics...),
  seen as the parameters are.
- ``gradients``: ``param.grad`` of the optimizers' parameters before each ``optimizer.step``
  (every step: ``zero_grad(set_to_none=True)`` frees them and backward makes new ones), and of
  every live module's parameters at the end of the run.
- ``optimizer_state``: the tensors of ``optimizer.state`` (Adam's ``exp_avg`` and
  ``exp_avg_sq``, SGD's momentum, ``step`` where it lives on the device: capturable or fused),
  after each ``optimizer.step``.
- everything else (``activations``): activations, autograd's saved tensors, temporaries, the
  kernels' workspaces.

A storage tagged twice keeps the first category of that list. Optimizer hooks are torch's
global ones (``register_optimizer_step_pre_hook`` / ``_post_hook``: every ``torch.optim``
optimizer, and subclasses of ``torch.optim.Optimizer``); modules are seen through a global
forward pre-hook (``register_module_forward_pre_hook``) and a scan of the live objects
(``gc``) at the end.

An allocation is named by its address: in a ``--no-gpu`` capture every allocation has an
address of its own (the recorder never reuses one), so the trace's ``alloc`` event at that
address is the tagged storage, over its whole life.

Only the standard library and torch: this file is copied into the recorded process (``_hook``).
"""

from __future__ import annotations

import gc
import importlib
import warnings
import weakref
from collections.abc import Callable
from typing import Any

CATEGORIES = ("parameters", "buffers", "gradients", "optimizer_state")
REST = "activations"
HOW = {
    "parameters": "nn.Parameter: a module's parameters, seen at its forward and at the end of the run, and the tensors each optimizer updates, seen before each optimizer.step",
    "buffers": "a module's buffers (register_buffer), seen at its forward and at the end of the run",
    "gradients": "param.grad of the optimizers' parameters, seen before each optimizer.step, and of the modules' parameters at the end of the run",
    "optimizer_state": "the tensors of optimizer.state (exp_avg, exp_avg_sq, momentum buffers...), seen after each optimizer.step",
    REST: "the rest: every allocation not tagged otherwise (activations, autograd's saved tensors, temporaries, workspaces)",
}
METADATA_KEY = "storage_tags"
"""The key of the capture's ``.json`` (so ``metadata["extra"]["capture"]["storage_tags"]``)."""


def _is_wrapper(t: Any) -> bool:
    try:
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    except ImportError:
        return False
    return bool(is_traceable_wrapper_subclass(t))


class StorageTagger:
    """Collects the addresses of tagged allocations. ``address(storage)`` gives the address of
    a live recorded allocation (None: not one, a CPU storage)."""

    def __init__(self, torch: Any, address: Callable[[Any], int | None], device: int = 0) -> None:
        self.torch = torch
        self.address = address
        self.device = device
        self.rank = {c: i for i, c in enumerate(CATEGORIES)}
        self.tags: dict[int, int] = {}  # address -> index in CATEGORIES (the lowest wins)
        self.handles: list[Any] = []
        self.seen_modules: weakref.WeakSet[Any] = weakref.WeakSet()

    # --- tagging
    def tag(self, t: Any, category: str) -> None:
        if not isinstance(t, self.torch.Tensor):
            return
        if _is_wrapper(t):
            # A wrapper subclass (DTensor: FSDP2's parameters, gradients and optimizer state)
            # holds no storage: the tensors it wraps do (__tensor_flatten__ names them).
            try:
                inner, _ = t.__tensor_flatten__()
            except Exception:
                return
            for name in inner:
                self.tag(getattr(t, name, None), category)
            return
        try:
            if t.device.type != "cuda":
                return
            addr = self.address(t.untyped_storage())
        except Exception:  # a tensor without storage (a sparse or wrapper subclass)
            return
        if addr is None:
            return
        r = self.rank[category]
        old = self.tags.get(addr)
        if old is None or r < old:
            self.tags[addr] = r

    def module(self, m: Any, recurse: bool) -> None:
        mods = m.modules() if recurse else (m,)
        for mod in mods:
            for p in getattr(mod, "_parameters", {}).values():
                if p is not None:
                    self.tag(p, "parameters")
            for b in getattr(mod, "_buffers", {}).values():
                if b is not None:
                    self.tag(b, "buffers")

    def optimizer_params(self, opt: Any) -> None:
        for group in getattr(opt, "param_groups", ()):
            for p in group.get("params", ()):
                self.tag(p, "parameters")
                self.tag(getattr(p, "grad", None), "gradients")

    def optimizer_state(self, opt: Any) -> None:
        for st in getattr(opt, "state", {}).values():
            if isinstance(st, dict):
                for v in st.values():
                    self.tag(v, "optimizer_state")

    # --- hooks
    def install(self) -> None:
        tagger = self

        def pre_forward(module: Any, args: Any) -> None:
            try:
                first = module not in tagger.seen_modules
                if first:
                    tagger.seen_modules.add(module)
            except TypeError:  # a module that cannot be hashed or weakly referenced
                first = False
            try:
                tagger.module(module, recurse=first)
            except Exception:
                pass

        def pre_step(opt: Any, args: Any, kwargs: Any) -> None:
            try:
                tagger.optimizer_params(opt)
            except Exception:
                pass

        def post_step(opt: Any, args: Any, kwargs: Any) -> None:
            try:
                tagger.optimizer_state(opt)
            except Exception:
                pass

        try:
            from torch.nn.modules import module as module_mod

            self.handles.append(module_mod.register_module_forward_pre_hook(pre_forward))
        except Exception:
            pass
        try:
            optim = importlib.import_module("torch.optim.optimizer")  # not an attribute of torch.optim
            self.handles.append(optim.register_optimizer_step_pre_hook(pre_step))
            self.handles.append(optim.register_optimizer_step_post_hook(post_step))
        except Exception:
            pass

    def finish(self) -> None:
        """The hooks removed, then every live module's parameters, buffers and gradients and
        every live optimizer's tensors tagged."""
        for h in self.handles:
            try:
                h.remove()
            except Exception:
                pass
        self.handles.clear()
        torch = self.torch
        module_type = torch.nn.Module
        optimizer_type = torch.optim.Optimizer
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for obj in gc.get_objects():
                # type(), not isinstance: some objects' __class__ warns (torch.distributed.reduce_op).
                cls = type(obj)
                try:
                    if issubclass(cls, module_type):
                        self.module(obj, recurse=False)
                        for p in obj._parameters.values():
                            if p is not None:
                                self.tag(p.grad, "gradients")
                    elif issubclass(cls, optimizer_type):
                        self.optimizer_params(obj)
                        self.optimizer_state(obj)
                except Exception:
                    continue

    # --- the metadata
    def to_json(self) -> dict[str, Any]:
        """``{"keyed_by": "addr", "device": D, "order": [NAME, ...], "rest": "activations",
        "categories": {NAME: {"how": TEXT, "addrs": [ADDRESS, ...]}, ...}}``: the addresses
        (sorted ints) of the ``alloc`` events of each category's allocations; allocations in no
        list are ``rest``'s. ``order``: the categories in the order to show them (the metadata's
        objects come back with their keys sorted)."""
        by: list[list[int]] = [[] for _ in CATEGORIES]
        for addr, r in self.tags.items():
            by[r].append(addr)
        cats = {c: {"how": HOW[c], "addrs": sorted(by[i])} for i, c in enumerate(CATEGORIES)}
        cats[REST] = {"how": HOW[REST], "addrs": []}
        return {"keyed_by": "addr", "device": self.device, "order": [*CATEGORIES, REST], "rest": REST, "categories": cats}
