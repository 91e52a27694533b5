"""What a GPU run does that the fake tensors alone do not: the choices CUDA kernels make on the
device (which attention kernel), and what they allocate beyond their outputs (workspaces,
temporaries), each rule checked on the real captures (docs/no-gpu.md).

Only the standard library and torch: copied into the recorded process with ``_nogpu``.
"""

from __future__ import annotations

import functools
import os
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


NOT_ON_DEVICE = -(1 << 62)
"""A plan entry (see :func:`before`): that output is a host tensor on the GPU (not recorded)."""


def before(func: Any, args: Any, kwargs: Any, rec: Any) -> dict[int, int]:
    """Allocations a kernel makes before its outputs; returns {flattened output index: key} of
    the outputs that take over one of them (``NOT_ON_DEVICE``: an output the CUDA kernel makes
    on the host)."""
    name = func._opname
    if name == "_scaled_dot_product_flash_attention":
        # cuda/attention.cpp, _flash_attention_forward: the philox seed and offset (one 8-byte
        # tensor each, with or without dropout) come before the output. Measured:
        # gpt2_train__default 167-168 (dropout 0.1), tiny_step__default (no dropout).
        return {6: rec.persistent(8), 7: rec.persistent(8)}
    if name == "_scaled_dot_product_efficient_attention":
        # cuda/attention.cu, _efficient_attention_forward: outside CUDA graph capture the philox
        # seed and offset are host scalars (at::scalar_tensor / at::empty({}, kLong)), never
        # the device's. Measured: hf_decoder fp32 (docs/fit.md), no 8-byte requests.
        return {2: NOT_ON_DEVICE, 3: NOT_ON_DEVICE}
    if name == "native_dropout" and len(args) >= 2:
        # cuda/Dropout.cu, native_dropout_cuda -> dropout_cuda: `mask` (bool, empty_like) is
        # allocated before `ret`; the short-cuts (train=False, p=1) make them in output order.
        train = args[2] if len(args) > 2 else kwargs.get("train")
        p = float(args[1])
        x = args[0]
        if (train is None or bool(train)) and p != 1.0 and x.numel() > 0:
            return {1: rec.persistent(int(x.numel()))}
    return {}


def efficient_backward_temporaries(grad_out: Any, q: Any, v: Any) -> tuple[int, int, int, int]:
    """cuda/attention_backward.cu, _efficient_attention_backward (CUDA, no nested tensors):
    (product, sum, delta, workspace) bytes. ``delta``: float (B, nH, M); for float32 inputs the
    kernel does not compute it (kKernelComputesDelta needs a 16-bit type), so it is
    ``(grad_out.float() * out.float()).sum(-1).transpose(-2, -1).contiguous()``: the product
    (B, M, nH, Kv) and the sum (B, M, nH) come and go around it. ``workspace``: the float32
    kernels (64 x 64 blocks for head dims up to 64) accumulate grad_q in it
    (kNeedsAccumGradQ): B * nH * align4(ceil(M / 64) * ceil(K / 64) * GradQTempStorage), where
    GradQTempStorage is a 64 x 64 float tile and 4 words; other kernels' workspaces are not
    modelled (0). Measured: hf_decoder fp32, B 16, nH 12, M 512, K 64: 25,165,824, 393,216,
    393,216, 25,190,400 (docs/fit.md)."""
    import torch

    b, h, m, k = (int(x) for x in q.shape)
    kv = int(v.shape[-1])
    delta = 4 * b * h * m
    if q.dtype != torch.float32:
        return 0, 0, delta, 0
    product, total = 4 * b * m * h * kv, 4 * b * m * h
    workspace = 0
    if max(k, kv) <= 64:
        per_bh = -(-m // 64) * -(-k // 64) * (64 * 64 + 4)
        workspace = 4 * b * h * ((per_bh + 3) // 4 * 4)
    return product, total, delta, workspace


# cuDNN's convolution workspaces. PyTorch's cuDNN convolutions (ATen/native/cudnn/Conv_v8.cpp,
# run_single_conv) allocate the workspace of the execution plan cuDNN's heuristics choose
# through the caching allocator, after the output, and free it when the kernel is queued: the
# forward after y, the backward's input gradient after grad_input, its weight gradient after
# grad_weight. The size is the chosen engine's, decided on the device: _cudnn_h200.json holds
# them as measured on an H200 (torch 2.11.0+cu130, cuDNN 9.19) for every convolution of ten
# torchvision models at five batch sizes (research/nogpu/probe_cudnn.py, build_cudnn_table.py).
# A convolution not in it takes the table's entry for the nearest batch size, scaled; one of a
# shape no measured model has, none (see conv_workspaces).
CUDNN_TABLE = "_cudnn_h200.json.xz"
_cudnn: list[dict[str, Any]] = []


def _cudnn_table() -> dict[str, Any]:
    if not _cudnn:
        import json
        import lzma

        # ALLOCREPLAY_NOGPU_CUDNN_TABLE: another table (for studying the rule, e.g. with a model
        # left out: research/nogpu/build_cudnn_table.py --without MODEL).
        path = os.environ.get("ALLOCREPLAY_NOGPU_CUDNN_TABLE") or os.path.join(os.path.dirname(os.path.abspath(__file__)), CUDNN_TABLE)
        with lzma.open(path, "rt") if path.endswith(".xz") else open(path) as f:
            data = json.load(f)
        # Keyed as the table, less the batch size: [(batch size, workspaces)].
        by_batch: dict[str, list[tuple[int, list[int]]]] = {}
        for k, ws in data.pop("table").items():
            parts = k.split("|")
            batch, _, rest = parts[1].partition(",")
            parts[1] = rest
            by_batch.setdefault("|".join(parts), []).append((int(batch), ws))
        _cudnn.append({"meta": data["meta"], "by_batch": by_batch})
    return _cudnn[0]


def conv_workspaces(torch: Any, direction: str, x: Any, w: Any, stride: Any, padding: Any, dilation: Any, transposed: bool, groups: int) -> list[int]:
    """The workspaces one cuDNN convolution kernel requests, in order (see CUDNN_TABLE)."""
    table = _cudnn_table()
    layout = int(x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
    dtype = str(x.dtype).replace("torch.", "")

    def ints(v: Any) -> str:
        return ",".join(str(int(i)) for i in v)

    rest = [ints(w.shape), dtype, str(layout), ints(stride), ints(padding), ints(dilation), str(int(bool(transposed))), str(int(groups))]
    # The measured batch size nearest this one (the same when measured), its workspaces scaled.
    measured = table["by_batch"].get("|".join([direction, ints(x.shape[1:]), *rest]))
    if measured:
        batch = int(x.shape[0])
        b0, ws = min(measured, key=lambda e: (abs(e[0] - batch), e[0]))
        return [max(1, s * batch // b0) for s in ws]
    # A shape no measured model has: none. Workspaces of a guessed size (the median share of the
    # input's bytes among the nearest measured convolutions) put the bytes requested closer
    # but the peak further off — a workspace that does not fit where the real one did takes a
    # new segment: left-one-model-out on efficientnet_train and mobilenet_train, +3.8% and -8.0%
    # against -1.0% and -1.0% with none (docs/no-gpu.md).
    return []


def _cublas_copy(m: Any) -> int:
    """Bytes of the contiguous copy cuBLAS needs of matrix ``m`` (0 when it takes it as it is):
    aten/src/ATen/native/cuda/Blas.cpp, prepare_matrix_for_cublas — a dense matrix, or one with
    a unit stride and a leading dimension at least its size, is passed as it is; any other (an
    expanded gradient, stride 0) is cloned contiguous."""
    if m.dim() != 2:
        return 0
    (r, c), (sr, sc) = m.shape, m.stride()
    if _dense(m) or (sr == 1 and sc >= max(1, r)) or (sc == 1 and sr >= max(1, c)):
        return 0
    return int(m.numel()) * int(m.element_size())


def _dense(t: Any) -> bool:
    """TensorImpl::is_non_overlapping_and_dense (torch's Python mirror; older releases name it
    without the ``_or_false``)."""
    return bool(_dense_check()(t))


@functools.cache
def _dense_check() -> Any:
    import torch._prims_common as prims

    check = getattr(prims, "is_non_overlapping_and_dense_or_false", None) or getattr(prims, "is_non_overlapping_and_dense", None)
    return check if check is not None else (lambda t: t.is_contiguous())


# Copies made inside the current operator, freed when it ends (after its workspaces).
_operator_copies: list[int] = []


def after_output(func: Any, args: Any, kwargs: Any, i: int, rec: Any) -> None:
    """Allocations a kernel makes right after its output ``i`` (workspaces, operand copies)."""
    import torch

    name = func._opname
    if name in ("mm", "addmm") and i == 0:
        # The operands cuBLAS cannot read as they are, copied after the output (Blas.cpp,
        # addmm_out_cuda_impl) and freed with the operator. Measured: tiny_step__default, the
        # backward of a Linear layer under `.sum()` (an expanded gradient).
        for m in args[:2] if name == "mm" else args[1:3]:
            if isinstance(m, torch.Tensor) and (copy := _cublas_copy(m)):
                _operator_copies.append(rec.persistent(copy))
    elif name == "convolution" and i == 0:
        # aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
        x, w, _, stride, padding, dilation, transposed, _, groups = args[:9]
        if x.dim() == 4 and x.is_floating_point():
            for size in conv_workspaces(torch, "forward", x, w, stride, padding, dilation, transposed, groups):
                rec.temporary(size)
    elif name == "convolution_backward" and i in (0, 1):
        # aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
        # dilation, transposed, output_padding, groups, output_mask)
        x, w, _, stride, padding, dilation, transposed, _, groups = args[1:10]
        if x.dim() != 4 or not x.is_floating_point():
            return
        # A grad_output cuDNN cannot read as it is (an expanded gradient) is made contiguous for
        # the input gradient, freed after it, and once more before the weight gradient, freed
        # with the operator (cudnn_convolution_backward; measured: tiny_step__default).
        copy = 0 if _dense(args[0]) else int(args[0].numel()) * args[0].element_size()
        first = rec.persistent(copy) if copy and i == 0 else None
        for size in conv_workspaces(torch, "data" if i == 0 else "filter", x, w, stride, padding, dilation, transposed, groups):
            rec.temporary(size)
        if first is not None:
            rec.free(first)
            _operator_copies.append(rec.persistent(copy))


def _last_pow2(n: int) -> int:
    # Reduce.cuh, last_pow2: the largest power of 2 <= n (at least 1).
    return max(1, 1 << (max(1, n).bit_length() - 1))


def _div_up(a: int, b: int) -> int:
    return (a + b - 1) // b


def reduce_staging(num_outputs: int, inputs_per_output: int, sms: int, vec: int = 4) -> tuple[int, int]:
    """The global-memory staging buffer and semaphores a CUDA reduction over the outer
    (slowest-striding) dimension allocates: aten/src/ATen/native/cuda/Reduce.cuh, setReduceConfig
    for a reduction not on the fastest-striding dimension, with vectorized outputs
    (output_vec_size 4), float accumulation, 512 threads at most and 2,048 per multiprocessor;
    then ReduceConfig::global_memory_size and semaphore_size. (0, 0) when it reduces inside its
    blocks. Measured: gpt2_train__default's bias gradients (sum over dim 0 of (N, C)), e.g.
    N=6720, C=768 -> 41,287,680 and 24 bytes."""
    outputs = num_outputs // vec
    max_threads = 512 // vec
    # ReduceConfig::set_block_dimension(dim0 = outputs, dim1 = inputs)
    dim0 = _last_pow2(outputs) if outputs < max_threads else max_threads
    dim1 = _last_pow2(inputs_per_output) if inputs_per_output < max_threads else max_threads
    width = min(dim0, 32)
    height = min(dim1, max_threads // width)
    width = min(dim0, max_threads // height)
    threads = width * height
    step_output, step_input = width, 1
    split_y = inputs_per_output >= height * 16 or inputs_per_output >= 256
    if split_y:
        step_input = height
    else:
        step_output *= height
    values_per_thread = _div_up(inputs_per_output, step_input)
    grid = _div_up(outputs, step_output)
    target = sms * (2048 // threads)
    ctas = 1
    if split_y and values_per_thread >= 256 and grid <= target:
        ctas = max(min(_div_up(target, grid), _div_up(values_per_thread, 16)), _div_up(values_per_thread, 256))
    if ctas <= 1:
        return 0, 0
    return 4 * num_outputs * ctas * width * vec, 4 * grid


def full_reduce_staging(numel: int, sms: int) -> tuple[int, int]:
    """The same for a reduction of a contiguous tensor to one value (setReduceConfig on the
    fastest-striding dimension: one row of up to 512 threads, each block reducing its share,
    ReduceConfig::global_memory_size without the block-width factor). Measured:
    tiny_step__default (scripts/nogpu_tiny.py): sums of 12,845,056, 1,572,864 and 524,288
    floats -> buffers of 2,112, 768 and 256 bytes, and a 4-byte semaphore each."""
    width = _last_pow2(numel) if numel < 512 else 512
    values_per_thread = _div_up(numel, width)
    if values_per_thread < 256:
        return 0, 0
    target = sms * (2048 // width)
    ctas = max(min(target, _div_up(values_per_thread, 16)), _div_up(values_per_thread, 256))
    if ctas <= 1:
        return 0, 0
    return 4 * ctas, 4


REDUCTION_OPS = ("sum", "mean")


def _outer_reduction(x: Any, dims: Any) -> tuple[int, int] | None:
    """(num_outputs, inputs_per_output) when ``dims`` are exactly the leading dimensions of the
    contiguous tensor ``x`` (a column reduction: what bias gradients do), else None."""
    if dims is None or not x.is_contiguous() or x.dim() < 2:
        return None
    nd = x.dim()
    reduced = sorted({int(d) % nd for d in ([dims] if isinstance(dims, int) else dims)})
    if not reduced or reduced != list(range(len(reduced))) or len(reduced) == nd:
        return None
    inputs = 1
    for d in reduced:
        inputs *= int(x.shape[d])
    outputs = x.numel() // max(inputs, 1)
    return outputs, inputs


# flash-attention's backward (aten/src/ATen/native/transformers/cuda/flash_attn): one float32
# buffer for the query gradient's accumulator and the softmax row sums, allocated after dq, dk
# and dv and freed with the operator: 4 * B * H * S_q * (head_dim + 1) + 256 bytes. Measured:
# gpt2_train__default (8, 12, 840, 64) -> 20,966,656; (8, 12, 105, 64) -> 2,621,056.
def flash_backward_scratch(q: Any) -> int:
    b, h, s, d = (int(v) for v in q.shape)
    return 4 * b * h * s * (d + 1) + 256


CHUNK_CAT_BYTES_PER_BLOCK = 128 * 16
"""cuda/TensorShape.cu: ``detail::BLOCK_SIZE`` threads of ``BYTES_PER_THREAD`` bytes each."""


def chunk_cat_packed(args: Any, kwargs: Any, out: Any) -> int:
    """cuda/TensorShape.cu, ``_chunk_cat_out_cuda_contiguous`` (FSDP2's reduce-scatter copy-in,
    ``torch._chunk_cat(grads, 0, world_size, out=...)``): the kernel's metadata, seven int64
    vectors packed into one device tensor (``pack_vecs``), allocated after the output and freed
    with the operator: for n inputs, 6n + 2 + the blocks of every padded chunk (``BYTES_PER_BLOCK``
    bytes each) int64s. 0 where the operator takes the composite path (inputs or output not
    contiguous, or their dtypes differ other than bfloat16 into float32). Measured: an FSDP2 step
    on an H200 (7 gradients, 2,142,208 bytes: 8,736 bytes)."""
    import torch

    tensors = list(args[0])
    dim = int(args[1] if len(args) > 1 else kwargs.get("dim", 0))
    chunks = int(args[2] if len(args) > 2 else kwargs.get("num_chunks", 1))
    dst = kwargs.get("out", out)
    if not tensors or not isinstance(dst, torch.Tensor) or not all(_dense(t) for t in tensors) or not _dense(dst):
        return 0
    if tensors[0].dtype != dst.dtype and not (tensors[0].dtype == torch.bfloat16 and dst.dtype == torch.float32):
        return 0
    dim = dim % max(tensors[0].dim(), 1)
    blocks = 0
    for t in tensors:
        trailing = 1
        for size in t.shape[dim + 1 :]:
            trailing *= int(size)
        padded = _div_up(int(t.shape[dim]), chunks) * chunks
        blocks += _div_up(padded * trailing * dst.element_size() // chunks, CHUNK_CAT_BYTES_PER_BLOCK)
    return 8 * (6 * len(tensors) + 2 + blocks)


def split_copy_packed(args: Any, kwargs: Any, sms: int, threads_per_sm: int) -> int:
    """cuda/TensorShape.cu, ``split_with_sizes_copy_out_cuda_contiguous_no_cast`` (FSDP2's
    all-gather copy-out): five int64 vectors packed into one device tensor (``pack_vecs``),
    freed with the operator: 4n + 1 + the blocks of the launch grid, whose size follows the
    device's multiprocessors and threads per multiprocessor. 0 off that fast path (the input or
    an output not contiguous, or of another dtype)."""
    import math

    import torch

    x = args[0]
    sizes = [int(v) for v in args[1]]
    dim = int(args[2] if len(args) > 2 else kwargs.get("dim", 0))
    outs = list(kwargs.get("out") or [])
    if not sizes or not outs or not _dense(x) or not all(isinstance(o, torch.Tensor) and _dense(o) and o.dtype == x.dtype for o in outs):
        return 0
    dim = dim % max(x.dim(), 1)
    trailing = 1
    for v in x.shape[dim:]:
        trailing *= int(v)
    num_chunks = int(x.numel()) // trailing if trailing else 0
    chunk_bytes = [s * int(x.stride(dim)) * x.element_size() for s in sizes]
    per_block = CHUNK_CAT_BYTES_PER_BLOCK
    num_blocks = sum(_div_up(c, per_block) for c in chunk_bytes)
    max_blocks = int(sms * threads_per_sm / 128 * 2.0)
    iter_factor = _div_up(num_blocks * num_chunks, max_blocks) if num_blocks and num_chunks else 1
    chunks_per_block = max(1, min(math.ceil(math.sqrt(iter_factor)), num_chunks))
    iters = _div_up(iter_factor, chunks_per_block)
    blocks = sum(_div_up(c, per_block * iters) for c in chunk_bytes)
    return 8 * (4 * len(sizes) + 1 + blocks)


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
    if name in REDUCTION_OPS and args and getattr(args[0], "is_floating_point", lambda: False)():
        # ReduceOp's staging buffer and semaphores (Reduce.cuh, gpu_reduce_kernel), allocated
        # after the output, freed in reverse (the semaphores' DataPtr is destroyed first).
        x, sms = args[0], int(rec.props.multi_processor_count)
        dims = args[1] if len(args) > 1 and func._overloadname in ("dim_IntList", "dim") else None
        buffer = semaphores = 0
        if x.is_contiguous() and (dims is None or (x.dim() > 0 and len({int(d) % x.dim() for d in dims}) == x.dim())):
            buffer, semaphores = full_reduce_staging(int(x.numel()), sms)
        else:
            shape = _outer_reduction(x, dims)
            if shape is not None and shape[0] % 4 == 0:
                buffer, semaphores = reduce_staging(shape[0], shape[1], sms)
        if buffer:
            a, b = rec.persistent(buffer), rec.persistent(semaphores)
            rec.free(b)
            rec.free(a)
    while _operator_copies:
        rec.free(_operator_copies.pop(0))
    if name in ("_chunk_cat", "chunk_cat"):  # aten's, or FSDP2's fsdp::chunk_cat around it
        rec.temporary(chunk_cat_packed(args, kwargs, out))
    elif name == "split_with_sizes_copy":  # aten's out= form, or FSDP2's fsdp:: op around it
        rec.temporary(split_copy_packed(args, kwargs, int(rec.props.multi_processor_count), int(rec.props.max_threads_per_multi_processor)))
    if name == "_scaled_dot_product_flash_attention_backward":
        rec.temporary(flash_backward_scratch(args[1]))
    elif name == "_scaled_dot_product_efficient_attention_backward" and len(args) >= 4:
        # After grad_q, grad_k, grad_v (the outputs): delta (and, in float32, the product and
        # sum it is made of, freed at once), then the kernel's workspace; delta is freed before
        # the workspace (it lives in the launch lambda, the workspace in the function).
        product, total, delta, workspace = efficient_backward_temporaries(args[0], args[1], args[3])
        if product:
            kp, ks = rec.persistent(product), rec.persistent(total)
            kd = rec.persistent(delta)
            rec.free(ks)
            rec.free(kp)
        else:
            kd = rec.persistent(delta)
        kw = rec.persistent(workspace) if workspace else None
        rec.free(kd)
        if kw is not None:
            rec.free(kw)
    elif name == "_scaled_dot_product_flash_attention":
        # A 256-byte temporary freed at once after the log-sum-exp when autograd records the
        # operator (gpt2_train__default 171, tiny_step__default); none under no_grad
        # (llama_generate__default's prefills and decode steps).
        import torch

        if torch.is_grad_enabled():
            rec.temporary(256)
