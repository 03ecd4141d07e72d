"""The raw ops and their autograd.

Three routes to the same kernels (alpha_attn._C):
- eager, the common case: _C.attention, a C++ autograd function (forward and Alpha's backward), which
  costs the host a fraction of a Python Function's call;
- eager under a torch.func transform or forward-mode AD: torch.autograd.Function subclasses calling _C
  directly, with backward (Alpha's), jvp (Alpha's JVP, for torch.func.jvp / jacfwd and
  torch.autograd.forward_ad) and a vmap rule (folds the vmapped dimension into the batch);
- torch.compile (torch >= 2.4): the same entry points registered as torch.library custom ops
  (alpha_attn::attention_forward, ...), with fake implementations for tracing and register_autograd for
  the backward, so the compiled graph holds them without a break. Dynamo refuses an autograd.Function that
  defines jvp, which is why the compiled route is the custom op.
On torch < 2.4 only the eager route exists (torch 1.13 has no custom_op; 1.13 also has no setup_context,
so the Function there is the old-style forward(ctx, ...), which forward_ad supports but torch.func does not).
"""
from typing import List, Tuple

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import Tensor

from . import _C


def _jvp_takes_none_for_non_differentiable_outputs() -> bool:
    """Whether this torch accepts None as a custom Function's jvp for an output marked non-differentiable.

    torch 1.13 refuses None there; torch 2.11 refuses anything else. Asked of torch with a probe, once, at
    import: inside a jvp the probe's dual level would nest in the caller's, which torch refuses."""
    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            flag = torch.zeros(1)
            ctx.mark_non_differentiable(flag)
            return x.clone(), flag

        @staticmethod
        def jvp(ctx, tangent):
            return tangent, None

    try:
        with _forward_ad.dual_level():
            Probe.apply(_forward_ad.make_dual(torch.zeros(1), torch.ones(1)))
        return True
    except RuntimeError:
        return False


JVP_TAKES_NONE_FOR_NON_DIFFERENTIABLE_OUTPUTS = _jvp_takes_none_for_non_differentiable_outputs()
HAS_CUSTOM_OP = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_autograd")
HAS_SETUP_CONTEXT = hasattr(torch.autograd.Function, "setup_context") and int(torch.__version__.split(".")[0]) >= 2


def _stream(t: Tensor) -> int:
    """torch's current stream on t's device as an integer (0: the legacy default stream, or the CPU)."""
    return torch._C._cuda_getCurrentRawStream(t.device.index) if t.is_cuda else 0


def _stats_dtype(q: Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _is_compiling_function():
    """torch's `is_compiling` (True while torch.compile traces), looked up once rather than on every call."""
    for owner in (getattr(torch, "compiler", None), getattr(torch, "_dynamo", None)):
        if owner is not None and hasattr(owner, "is_compiling"):
            return owner.is_compiling
    return lambda: False


_compiling = _is_compiling_function()


# Options, in the order _C takes them: (scale, causal, softcap, dropout_p, dropout_seed, dropout_offset,
# window_left, window_right, deterministic, constant_time).
Options = Tuple[float, bool, float, float, int, int, int, int, bool, bool]


# ---------------------------------------------------------------------------------------------------------
# Custom ops (torch >= 2.4): the compiled route.
if HAS_CUSTOM_OP:

    @torch.library.custom_op("alpha_attn::attention_forward", mutates_args=())
    def _attention_forward_op(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, softcap: float,
                              dropout_p: float, dropout_seed: int, dropout_offset: int, window_left: int,
                              window_right: int, deterministic: bool,
                              constant_time: bool) -> Tuple[Tensor, Tensor, Tensor]:
        options = (scale, causal, softcap, dropout_p, dropout_seed, dropout_offset, window_left, window_right,
                   deterministic, constant_time)
        q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))  # a compiler's layout
        return _C.attention_forward(q, k, v, options, _stream(q))

    @_attention_forward_op.register_fake
    def _(q, k, v, scale, causal, softcap, dropout_p, dropout_seed, dropout_offset, window_left, window_right,
          deterministic, constant_time):
        B, Tq, Hq, _ = q.shape
        stats = q.new_empty((B, Hq, Tq), dtype=_stats_dtype(q))
        return q.new_empty((B, Tq, Hq, v.shape[3])), stats, torch.empty_like(stats)

    @torch.library.custom_op("alpha_attn::attention_backward", mutates_args=())
    def _attention_backward_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, row_max: Tensor,
                               row_sum: Tensor, scale: float, causal: bool, softcap: float, dropout_p: float,
                               dropout_seed: int, dropout_offset: int, window_left: int, window_right: int,
                               deterministic: bool, constant_time: bool) -> Tuple[Tensor, Tensor, Tensor]:
        options = (scale, causal, softcap, dropout_p, dropout_seed, dropout_offset, window_left, window_right,
                   deterministic, constant_time)
        return _C.attention_backward(dout, q, k, v, out, row_max, row_sum, options, _stream(q))

    @_attention_backward_op.register_fake
    def _(dout, q, k, v, out, row_max, row_sum, scale, causal, softcap, dropout_p, dropout_seed, dropout_offset,
          window_left, window_right, deterministic, constant_time):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def _forward_op_setup(ctx, inputs, output):
        q, k, v = inputs[:3]
        out, row_max, row_sum = output
        ctx.save_for_backward(q, k, v, out, row_max, row_sum)
        ctx.options = tuple(inputs[3:])

    def _forward_op_backward(ctx, dout, _dmax, _dsum):
        q, k, v, out, row_max, row_sum = ctx.saved_tensors
        dq, dk, dv = torch.ops.alpha_attn.attention_backward(dout, q, k, v, out, row_max, row_sum, *ctx.options)
        return (dq, dk, dv) + (None,) * len(ctx.options)

    torch.library.register_autograd("alpha_attn::attention_forward", _forward_op_backward,
                                    setup_context=_forward_op_setup)

    @torch.library.custom_op("alpha_attn::attention_jvp_fused", mutates_args=())
    def _attention_jvp_fused_op(q: Tensor, k: Tensor, v: Tensor, tq: Tensor, tk: Tensor, tv: Tensor,
                                scale: float, causal: bool, softcap: float, dropout_p: float, dropout_seed: int,
                                dropout_offset: int, window_left: int, window_right: int, deterministic: bool,
                                constant_time: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        options = (scale, causal, softcap, dropout_p, dropout_seed, dropout_offset, window_left, window_right,
                   deterministic, constant_time)
        return _C.attention_jvp_fused(q, k, v, tq, tk, tv, options, _stream(q))

    @_attention_jvp_fused_op.register_fake
    def _(q, k, v, tq, tk, tv, scale, causal, softcap, dropout_p, dropout_seed, dropout_offset, window_left,
          window_right, deterministic, constant_time):
        B, Tq, Hq, _ = q.shape
        stats = q.new_empty((B, Hq, Tq), dtype=_stats_dtype(q))
        out = q.new_empty((B, Tq, Hq, v.shape[3]))
        return out, torch.empty_like(out), stats, torch.empty_like(stats)

    @torch.library.custom_op("alpha_attn::nsa_forward", mutates_args=())
    def _nsa_forward_op(q: Tensor, k: Tensor, v: Tensor, gates: Tensor, k_pos: Tensor, k_weight: Tensor,
                        v_pos: Tensor, v_weight: Tensor, scale: float, block_len: int, block_stride: int,
                        select_len: int, select_count: int,
                        window: int) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        return tuple(_C.nsa_forward([q, k, v, gates, k_pos, k_weight, v_pos, v_weight], scale, block_len,
                                    block_stride, select_len, select_count, window, _stream(q)))

    @_nsa_forward_op.register_fake
    def _(q, k, v, gates, k_pos, k_weight, v_pos, v_weight, scale, block_len, block_stride, select_len,
          select_count, window):
        B, T, Hq, D = q.shape
        Hkv, Dv = k.shape[2], v.shape[3]
        blocks = 0 if T < block_len else (T - block_len) // block_stride + 1
        stats = q.new_empty((3, B, Hq, T), dtype=_stats_dtype(q))
        return (q.new_empty((B, T, Hq, Dv)), q.new_empty((3, B, T, Hq, Dv)), q.new_empty((B, blocks, Hkv, D)),
                q.new_empty((B, blocks, Hkv, Dv)), stats, torch.empty_like(stats),
                q.new_empty((B, T, Hkv, select_count), dtype=torch.int32))

    @torch.library.custom_op("alpha_attn::nsa_backward", mutates_args=())
    def _nsa_backward_op(dout: Tensor, inputs: List[Tensor], forward: List[Tensor], scale: float, block_len: int,
                         block_stride: int, select_len: int, select_count: int, window: int) -> List[Tensor]:
        return _C.nsa_backward(dout, inputs, forward, scale, block_len, block_stride, select_len, select_count,
                               window, _stream(dout))

    @_nsa_backward_op.register_fake
    def _(dout, inputs, forward, scale, block_len, block_stride, select_len, select_count, window):
        return [t.new_empty(t.shape) for t in inputs]

    def _nsa_op_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:8], *output)
        ctx.config = tuple(inputs[8:])

    def _nsa_op_backward(ctx, dout, *_unused):
        saved = ctx.saved_tensors
        grads = torch.ops.alpha_attn.nsa_backward(dout, list(saved[:8]), list(saved[8:]), *ctx.config)
        return (*grads, *([None] * len(ctx.config)))

    torch.library.register_autograd("alpha_attn::nsa_forward", _nsa_op_backward, setup_context=_nsa_op_setup)


# ---------------------------------------------------------------------------------------------------------
# The eager route: autograd.Functions over _C.
def _forward(q, k, v, options):
    return _C.attention_forward(q, k, v, options, _stream(q))


def _save(ctx, q, k, v, options, out, row_max, row_sum):
    ctx.save_for_backward(q, k, v, out, row_max, row_sum)
    ctx.save_for_forward(q, k, v, out, row_max, row_sum)
    ctx.options = options
    ctx.mark_non_differentiable(row_max, row_sum)


def _fold(info, in_dims, tensors):
    """vmap rules: the vmapped dimension folded into dimension 0 (the batch of every attention tensor), as
    [N·B, ...]; attention is independent per batch element. (With dropout, the mask of vmapped element n and
    batch element b is the one of batch element n·B + b.)"""
    n = info.batch_size
    folded = []
    for t, d in zip(tensors, in_dims):
        t = t.unsqueeze(0).expand(n, *t.shape) if d is None else t.movedim(d, 0)
        folded.append(t.reshape(n * t.shape[1], *t.shape[2:]))
    return folded


def _unfold(info, t):
    return t.reshape(info.batch_size, t.shape[0] // info.batch_size, *t.shape[1:])


def _kernel_function(name, kernel, tensors):
    """kernel(*args, stream) as an autograd.Function with a vmap rule (torch >= 2), so that a rule calling it
    also runs under torch.func.vmap (jacfwd, jacrev): its first `tensors` arguments and its results carry the
    batch in dimension 0. It is not differentiable itself."""

    class Kernel(torch.autograd.Function):
        @staticmethod
        def forward(*args):
            return kernel(*args, _stream(args[0]))

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, *grads):
            raise RuntimeError(f"alpha_attn: no derivative of {name} (attention_hvp gives second derivatives)")

        @staticmethod
        def vmap(info, in_dims, *args):
            out = Kernel.apply(*_fold(info, in_dims[:tensors], args[:tensors]), *args[tensors:])
            if isinstance(out, tuple):
                return tuple(_unfold(info, t) for t in out), (0,) * len(out)
            return _unfold(info, out), 0

    Kernel.__name__ = Kernel.__qualname__ = name
    return Kernel


def _run(kernel, function, *args):
    """A kernel call in a derivative rule: through its vmap-able Function on torch >= 2, else directly."""
    return function.apply(*args) if HAS_SETUP_CONTEXT else kernel(*args, _stream(args[0]))


# dout (or q), q, k, v, ... first: every tensor argument has the batch in dimension 0.
_AttentionGrads = _kernel_function("attention_backward", _C.attention_backward, 7)
_AttentionTangent = _kernel_function("attention_jvp", _C.attention_jvp, 9)


class _AttentionRules:
    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, _dmax, _dsum):
        q, k, v, out, row_max, row_sum = ctx.saved_tensors
        dq, dk, dv = _run(_C.attention_backward, _AttentionGrads, dout, q, k, v, out, row_max, row_sum, ctx.options)
        return dq, dk, dv, None

    @staticmethod
    def jvp(ctx, tq, tk, tv, _toptions):
        q, k, v, out, row_max, row_sum = ctx.saved_tensors
        tq = torch.zeros_like(q) if tq is None else tq
        tk = torch.zeros_like(k) if tk is None else tk
        tv = torch.zeros_like(v) if tv is None else tv
        # Alpha's JVP from the forward's own statistics (ops::attention_jvp): exact up to rounding.
        tangent = _run(_C.attention_jvp, _AttentionTangent, q, k, v, tq, tk, tv, out, row_max, row_sum, ctx.options)
        # The statistics are not differentiable: their tangent is None where torch takes it (2.x requires it),
        # zeros where it refuses None (1.13).
        if JVP_TAKES_NONE_FOR_NON_DIFFERENTIABLE_OUTPUTS:
            return tangent, None, None
        return tangent, torch.zeros_like(row_max), torch.zeros_like(row_sum)

    @staticmethod
    def vmap(info, in_dims, q, k, v, options):
        out, row_max, row_sum = _Attention.apply(*_fold(info, in_dims[:3], (q, k, v)), options)
        return (_unfold(info, out), _unfold(info, row_max), _unfold(info, row_sum)), (0, 0, 0)


if HAS_SETUP_CONTEXT:

    class _Attention(_AttentionRules, torch.autograd.Function):
        @staticmethod
        def forward(q, k, v, options):
            return _forward(q, k, v, options)

        @staticmethod
        def setup_context(ctx, inputs, output):
            _save(ctx, *inputs, *output)

else:

    class _Attention(_AttentionRules, torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, options):
            out, row_max, row_sum = _forward(q, k, v, options)
            _save(ctx, q, k, v, options, out, row_max, row_sum)
            return out, row_max, row_sum


def _transforming() -> bool:
    """Whether a torch.func transform or forward-mode AD is active: then attention takes the Python Function
    with its jvp and vmap rules, else _C's C++ autograd function, which costs the host far less per call."""
    return torch._C._are_functorch_transforms_active() or _forward_ad._current_level >= 0


def attention(q: Tensor, k: Tensor, v: Tensor, options: Options) -> Tensor:
    """out [B, Tq, Hq, Dv] of q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] (any strides with a
    unit-stride last dimension)."""
    if HAS_CUSTOM_OP and _compiling():
        return torch.ops.alpha_attn.attention_forward(q, k, v, *options)[0]
    if not _transforming():
        return _C.attention(q, k, v, options, _stream(q))
    return _Attention.apply(q, k, v, options)[0]


def attention_jvp_fused(q, k, v, tq, tk, tv, options: Options):
    """(out, tangent of out) in one pass of Alpha's fused JVP kernel."""
    if HAS_CUSTOM_OP and _compiling():
        out, tangent, _, _ = torch.ops.alpha_attn.attention_jvp_fused(q, k, v, tq, tk, tv, *options)
    else:
        out, tangent, _, _ = _C.attention_jvp_fused(q, k, v, tq, tk, tv, options, _stream(q))
    return out, tangent


def attention_hvp(q, k, v, grad_out, vq, vk, vv, options: Options, eps: float):
    """(hq, hk, hv); eps = 0 runs the exact dual-number oracle (f64, CPU)."""
    return _C.attention_hvp(q, k, v, grad_out, vq, vk, vv, eps, options, _stream(q))


class _Nsa(torch.autograd.Function):
    @staticmethod
    def forward(ctx, config, *inputs):
        outputs = _C.nsa_forward(list(inputs), *config, _stream(inputs[0]))
        ctx.save_for_backward(*inputs, *outputs)
        ctx.config = config
        ctx.mark_non_differentiable(*outputs[1:])
        return tuple(outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, *_unused):
        saved = ctx.saved_tensors
        grads = _C.nsa_backward(dout.contiguous(), list(saved[:8]), list(saved[8:]), *ctx.config,
                                _stream(dout))
        return (None, *grads)


def nsa_forward(inputs, config) -> Tensor:
    """out [B, T, Hq, Dv] of NSA over inputs (q, k, v, gates, k_pos, k_weight, v_pos, v_weight) and config
    (scale, block_len, block_stride, select_len, select_count, window)."""
    if HAS_CUSTOM_OP and _compiling():
        return torch.ops.alpha_attn.nsa_forward(*inputs, *config)[0]
    return _Nsa.apply(config, *inputs)[0]
