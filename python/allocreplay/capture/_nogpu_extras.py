"""What a GPU run does that the fake tensors alone do not: the choices CUDA kernels make on the
device (which attention kernel), and what they allocate beyond their outputs (workspaces,
temporaries), each rule checked on the real captures (docs/no-gpu.md).

Only the standard library and torch: copied into the recorded process with ``_nogpu``.
"""

from __future__ import annotations

from typing import Any


def patch(torch: Any, rec: Any) -> None:
    """Python stand-ins for the decisions PyTorch's CUDA code makes by asking the device."""
    F = torch.nn.functional
    original = F.scaled_dot_product_attention
    aten = torch.ops.aten

    def sdpa(
        query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None, enable_gqa: bool = False
    ) -> Any:
        # aten/src/ATen/native/transformers/attention.cpp, scaled_dot_product_attention: the
        # backend _fused_sdp_choice_stub picks (cuda/sdp_utils.cpp, select_sdp_backend, which
        # asks the device; here an sm90 device's answers), then that backend's operator.
        if query.device.type != "cuda":
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        if torch.is_autocast_enabled("cuda"):
            dt = torch.get_autocast_dtype("cuda")
            query, key, value = (t.to(dt) if t.is_floating_point() and t.dtype == torch.float32 else t for t in (query, key, value))
            if attn_mask is not None and attn_mask.dtype == torch.float32:
                attn_mask = attn_mask.to(dt)
        choice = select_backend(torch, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        if choice == "flash":
            return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            # sdp_utils_cpp.h, convert_boolean_attn_mask: where(mask, 0, -inf) in the query's dtype.
            attn_mask = torch.where(
                attn_mask, torch.zeros((), dtype=query.dtype, device=query.device), torch.full((), float("-inf"), dtype=query.dtype, device=query.device)
            )
        if choice == "efficient":
            if attn_mask is not None:
                attn_mask = pad_bias(torch, attn_mask, query, key)
            need_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
            return aten._scaled_dot_product_efficient_attention(query, key, value, attn_mask, need_lse, dropout_p, is_causal, scale=scale)[0]
        return aten._scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]

    # torch/optim/optimizer.py, _default_to_fused_or_foreach: the foreach (multi-tensor) paths
    # the optimizers and clip_grad_norm_ take for CUDA tensors check type(p) against a list
    # that a FakeTensor is not on.
    import importlib

    from torch._subclasses.fake_tensor import FakeTensor

    for mod in (importlib.import_module("torch.optim.optimizer"), importlib.import_module("torch.utils._foreach_utils")):
        types = getattr(mod, "_foreach_supported_types", None)
        if isinstance(types, list) and FakeTensor not in types:
            types.append(FakeTensor)

    # The fake convolution (torch/_subclasses/fake_impls.py, conv) asks
    # _select_conv_backend for the output's memory format; for some convolutions (depthwise)
    # that asks the device. cuDNN is what an sm90 device runs them with; its output format is
    # the input's, as the other CUDA backends'.
    select = torch._C._select_conv_backend

    def select_conv_backend(*a: Any, **k: Any) -> Any:
        try:
            return select(*a, **k)
        except Exception:
            return torch._C._ConvBackend.Cudnn

    torch._C._select_conv_backend = select_conv_backend

    sdpa.__doc__ = original.__doc__
    F.scaled_dot_product_attention = sdpa
    torch._C._nn.scaled_dot_product_attention = sdpa


_libraries_done: list[bool] = []


def libraries() -> None:
    """Called before each operator until done: Hugging Face transformers takes fake tensors for
    tracing (``utils/import_utils.py``, ``is_tracing`` -> ``is_fake_tensor``) and then keeps the
    attention masks an eager GPU run drops (``masking_utils``: ``_ignore_causal_mask_sdpa``),
    which changes which attention kernel runs: tell it these tensors are not being traced."""
    import sys

    if _libraries_done:
        return
    mod = sys.modules.get("transformers.utils.import_utils")
    if mod is not None and hasattr(mod, "is_fake_tensor"):
        setattr(mod, "is_fake_tensor", lambda x: False)  # noqa: B010 (mypy: a module seen as ModuleType)
        _libraries_done.append(True)


def select_backend(torch: Any, q: Any, k: Any, v: Any, mask: Any, dropout: float, causal: bool, gqa: bool) -> str:
    """cuda/sdp_utils.cpp, select_sdp_backend on sm90, default priority: flash, efficient, math."""
    dense4 = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    same_heads = q.size(-3) == k.size(-3) == v.size(-3) if dense4 else False
    gqa_ok = dense4 and gqa and k.size(-3) == v.size(-3) and q.size(-3) % max(k.size(-3), 1) == 0
    strides = all(t.stride(-1) == 1 for t in (q, k, v))
    nonzero = dense4 and q.size(-2) > 0 and k.size(-2) > 0
    d = q.size(-1)
    # can_use_flash_attention
    if (
        dense4
        and strides
        and nonzero
        and mask is None
        and q.dtype in (torch.float16, torch.bfloat16)
        and k.size(-1) == d == v.size(-1)
        and d <= 256
        and (same_heads or gqa_ok)
        and not (causal and q.size(-2) != k.size(-2))
    ):
        return "flash"
    # can_use_mem_efficient_attention (no grouped-query support)
    align = 4 if q.dtype == torch.float32 else 8
    if (
        dense4
        and strides
        and nonzero
        and same_heads
        and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and d % align == 0
        and v.size(-1) % align == 0
    ):
        return "efficient"
    return "math"


def pad_bias(torch: Any, mask: Any, q: Any, k: Any) -> Any:
    """attention.cpp, preprocess_mask / pad_bias<16>: the bias expanded to (B, H, Lq, Lk), its
    last dimension padded to a multiple of 16 (a new buffer) when it is not."""
    mask = mask.expand(q.size(0), q.size(1), q.size(2), k.size(2))
    last = mask.size(-1)
    if last % 16 == 0 and mask.stride(-1) == 1 and all(s % 16 == 0 for s in mask.stride()[:-1]):
        return mask
    pad = (16 - last % 16) % 16
    return torch.nn.functional.pad(mask, (0, pad))[..., :last]


# aten/src/ATen/cuda/CublasHandlePool.cpp, getChosenWorkspaceSize: 4096 KiB * 8 on sm90; one
# workspace per (handle, stream), and a handle per thread: the first matrix product of the
# program allocates it (after the product's output), and the first of the autograd engine's
# device thread (backward) a second. The first also allocates a 1 MiB buffer (seen on every real
# capture right after it: cuBLASLt's). Measured: gpt2_train__default (allocations 163, 164, 691).
CUBLAS_WORKSPACE = 33_554_432
CUBLASLT_FIRST = 1_048_576
MATMUL_OPS = ("mm", "addmm", "bmm", "baddbmm", "_addmm_activation", "addmv", "mv", "addbmm", "_scaled_mm")
_workspaces: set[tuple[int, int]] = set()


def before(func: Any, args: Any, kwargs: Any, rec: Any) -> dict[int, int]:
    """Allocations a kernel makes before its outputs; returns {flattened output index: key} of
    the outputs that take over one of them."""
    name = func._opname
    if name == "_scaled_dot_product_flash_attention":
        # cuda/attention.cpp, _flash_attention_forward: with dropout, the philox seed and offset
        # (one 8-byte tensor each) come before the output. Measured: gpt2_train__default 167-168.
        dropout = args[3] if len(args) > 3 else kwargs.get("dropout_p", 0.0)
        if dropout and dropout > 0:
            return {6: rec.persistent(8), 7: rec.persistent(8)}
    return {}


def after(func: Any, args: Any, kwargs: Any, out: Any, rec: Any) -> None:
    """Allocations a kernel makes after its outputs (workspaces, temporaries)."""
    import threading

    name = func._opname
    if name in MATMUL_OPS:
        key = (threading.get_ident(), rec.stream_id())
        if key not in _workspaces:
            first = not _workspaces
            _workspaces.add(key)
            rec.persistent(CUBLAS_WORKSPACE)
            if first:
                rec.persistent(CUBLASLT_FIRST)
    elif name == "_scaled_dot_product_flash_attention":
        # A 256-byte temporary freed at once after the log-sum-exp (gpt2_train__default 171).
        dropout = args[3] if len(args) > 3 else kwargs.get("dropout_p", 0.0)
        if dropout and dropout > 0:
            rec.temporary(256)
