"""alpha_attn: Alpha's attention kernels as PyTorch ops.

    import alpha_attn
    y = alpha_attn.flash_attention(q, k, v, causal=True, layout="BHTD")   # for F.scaled_dot_product_attention

CPU tensors (float32, float64) run Alpha's CPU reference kernels; CUDA tensors (float32, bfloat16,
float16) run its flash attention kernels on torch's current stream. Gradients run Alpha's backward,
forward-mode derivatives (torch.func.jvp, jacfwd, torch.autograd.forward_ad) Alpha's JVP kernels. Under
torch.compile (torch >= 2.4) the ops are torch.library custom ops with fake implementations, so the graph
does not break. Alpha's errors arrive as ValueError (shapes, layouts, values, devices), TypeError (dtypes)
or RuntimeError (backend failures), with Alpha's message: "[op] argument 'x': expected ..., got ...".
"""
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import _C, _ops
from ._C import (AlphaError, BackendError, ConfigError, DeviceError, DTypeError, LayoutError, ShapeError,
                 ValueError as AlphaValueError)

__all__ = ["flash_attention", "flash_attention_jvp", "attention_hvp", "nsa", "NsaCompressor", "HAS_CUSTOM_OP",
           "AlphaError", "BackendError", "ConfigError", "DeviceError", "DTypeError", "LayoutError", "ShapeError",
           "AlphaValueError"]
__version__ = "0.1.0"

HAS_CUSTOM_OP = _ops.HAS_CUSTOM_OP  # torch >= 2.4: torch.compile keeps the ops in its graph
LAYOUTS = ("BTHD", "BHTD")


def _to_bthd(t: Tensor, layout: str, name: str) -> Tensor:
    """t as a [B, T, H, D] view (no copy); a copy only when its last dimension is not unit-stride."""
    if not isinstance(t, Tensor):
        raise TypeError(f"[alpha_attn.flash_attention] argument '{name}': expected a torch.Tensor, "
                        f"got {type(t).__name__}")
    if t.dim() != 4:
        raise ShapeError(f"[alpha_attn.flash_attention] argument '{name}': expected a 4-d tensor "
                         f"[{', '.join(layout)}], got shape {list(t.shape)}")
    if layout == "BHTD":
        t = t.transpose(1, 2)
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _options(scale, causal, softcap, dropout_p, window, deterministic, constant_time, seed=0):
    if not (isinstance(window, (tuple, list)) and len(window) == 2):
        raise AlphaValueError(f"[alpha_attn.flash_attention] argument 'window': expected (left, right) with -1 "
                              f"for an unbounded side, got {window!r}")
    return (float(scale or 0.0), bool(causal), float(softcap), float(dropout_p), int(seed), 0, int(window[0]),
            int(window[1]), bool(deterministic), bool(constant_time))


def _dropout_seed(dropout_p: float) -> int:
    # A fresh mask per call, drawn from torch's CPU generator (torch.manual_seed makes it reproducible).
    return int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0


def _check_layout(layout: str):
    if layout not in LAYOUTS:
        raise AlphaValueError(f"[alpha_attn.flash_attention] argument 'layout': expected 'BTHD' or 'BHTD', "
                              f"got {layout!r}")


def flash_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, softcap: float = 0.0,
                    dropout_p: float = 0.0, window: Tuple[int, int] = (-1, -1), scale: Optional[float] = None,
                    deterministic: bool = True, constant_time: bool = False, layout: str = "BTHD") -> Tensor:
    """softmax(softcap(q·kᵀ·scale) masked) · v, as Alpha computes it.

    layout "BTHD": q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] -> [B, Tq, Hq, Dv].
    layout "BHTD" (F.scaled_dot_product_attention's): q [B, Hq, Tq, D], ... -> [B, Hq, Tq, Dv], taken as
    strided views (no copy) and returned as a view of a [B, Tq, Hq, Dv] tensor.
    Hq a multiple of Hkv (GQA/MQA). causal is bottom-right aligned (query i sees keys j <= i + Tk - Tq);
    window (left, right) bounds the keys around that diagonal (-1: unbounded); softcap 0 disables it;
    scale None means 1/sqrt(D) (a given scale must be > 0). dropout_p > 0 drops attention weights with a mask
    drawn from torch's CPU generator (apply it only in training, as with SDPA). deterministic=False allows the
    faster atomic-dQ backward on the GPU (bf16/f16); constant_time=True asks for the constant-time tensor-core
    kernels (GPU, bf16/f16) and raises where they do not apply.
    """
    _check_layout(layout)
    q, k, v = (_to_bthd(t, layout, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    options = _options(scale, causal, softcap, dropout_p, window, deterministic, constant_time,
                       _dropout_seed(dropout_p))
    out = _ops.attention(q, k, v, options)
    return out.transpose(1, 2) if layout == "BHTD" else out


def flash_attention_jvp(primals: Sequence[Tensor], tangents: Sequence[Tensor], causal: bool = False,
                        softcap: float = 0.0, window: Tuple[int, int] = (-1, -1), scale: Optional[float] = None,
                        layout: str = "BTHD") -> Tuple[Tensor, Tensor]:
    """(out, its tangent) for primals (q, k, v) and tangents (tq, tk, tv), in one pass of Alpha's fused JVP
    kernel (what torch.func.jvp(flash_attention, ...) computes, without the separate forward)."""
    _check_layout(layout)
    q, k, v = (_to_bthd(t, layout, n) for t, n in zip(primals, ("q", "k", "v")))
    tq, tk, tv = (_to_bthd(t, layout, n) for t, n in zip(tangents, ("tq", "tk", "tv")))
    options = _options(scale, causal, softcap, 0.0, window, True, False)
    out, tangent = _ops.attention_jvp_fused(q, k, v, tq, tk, tv, options)
    return (out.transpose(1, 2), tangent.transpose(1, 2)) if layout == "BHTD" else (out, tangent)


def attention_hvp(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, vq: Tensor, vk: Tensor, vv: Tensor,
                  causal: bool = False, softcap: float = 0.0, window: Tuple[int, int] = (-1, -1),
                  scale: Optional[float] = None, eps: Optional[float] = None, exact: bool = False,
                  layout: str = "BTHD") -> Tuple[Tensor, Tensor, Tensor]:
    """H·(vq, vk, vv) for f(q, k, v) = <flash_attention(q, k, v), grad_out>: (hq, hk, hv), shaped as q, k, v.

    By central differences of Alpha's backward at step eps (default 1e-5 in float64, 3e-3 otherwise;
    docs/ATTENTION_DERIVATIVES.md), or exact=True: forward-over-reverse in dual numbers (float64 CPU only).
    """
    _check_layout(layout)
    names = ("q", "k", "v", "grad_out", "vq", "vk", "vv")
    q, k, v, grad_out, vq, vk, vv = (_to_bthd(t, layout, n) for t, n in zip((q, k, v, grad_out, vq, vk, vv), names))
    if exact:
        eps = 0.0
    elif eps is None:
        eps = 1e-5 if q.dtype == torch.float64 else 3e-3
    elif not eps > 0:
        raise AlphaValueError(f"[alpha_attn.attention_hvp] argument 'eps': expected a step > 0, got {eps!r}")
    options = _options(scale, causal, softcap, 0.0, window, True, False)
    hq, hk, hv = _ops.attention_hvp(q, k, v, grad_out, vq, vk, vv, options, float(eps))
    if layout == "BHTD":
        return hq.transpose(1, 2), hk.transpose(1, 2), hv.transpose(1, 2)
    return hq, hk, hv


def nsa(q: Tensor, k: Tensor, v: Tensor, gates: Tensor, k_pos: Tensor, k_weight: Tensor, v_pos: Tensor,
        v_weight: Tensor, block_len: int = 32, block_stride: int = 16, select_len: int = 64, select_count: int = 16,
        window: int = 512, scale: Optional[float] = None) -> Tensor:
    """Native Sparse Attention (causal; docs/NSA.md): q [B, T, Hq, D], k [B, T, Hkv, D], v [B, T, Hkv, Dv],
    gate logits [B, T, Hq, 3] (compressed, selected, window; the sigmoid is applied inside), and the
    compressor's parameters k_pos [block_len, D], k_weight [D, block_len·D], v_pos [block_len, Dv],
    v_weight [Dv, block_len·Dv]. Returns [B, T, Hq, Dv]; differentiable in all eight inputs. CPU (float32,
    float64) for now: CUDA tensors raise DeviceError until Alpha has NSA GPU kernels.
    """
    inputs = (q, k, v, gates, k_pos, k_weight, v_pos, v_weight)
    config = (float(scale or 0.0), int(block_len), int(block_stride), int(select_len), int(select_count),
              int(window))
    return _ops.nsa_forward(inputs, config)


class NsaCompressor(torch.nn.Module):
    """NSA's gates projection and compressor parameters as a module: nsa(q, k, v, x) with gates = x·Wgᵀ."""

    def __init__(self, dim: int, q_heads: int, head_dim: int, value_dim: Optional[int] = None, block_len: int = 32,
                 block_stride: int = 16, select_len: int = 64, select_count: int = 16, window: int = 512):
        super().__init__()
        value_dim = value_dim or head_dim
        self.config = dict(block_len=block_len, block_stride=block_stride, select_len=select_len,
                           select_count=select_count, window=window)
        self.q_heads = q_heads
        self.gate = torch.nn.Linear(dim, q_heads * 3)
        self.k_pos = torch.nn.Parameter(torch.zeros(block_len, head_dim))
        self.v_pos = torch.nn.Parameter(torch.zeros(block_len, value_dim))
        # Each starts as the mean over the block: w[e, j·D + e] = 1/l.
        eye_k = torch.eye(head_dim).repeat(1, block_len) / block_len
        eye_v = torch.eye(value_dim).repeat(1, block_len) / block_len
        self.k_weight = torch.nn.Parameter(eye_k)
        self.v_weight = torch.nn.Parameter(eye_v)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        gates = self.gate(x).view(B, T, self.q_heads, 3)
        return nsa(q, k, v, gates, self.k_pos, self.k_weight, self.v_pos, self.v_weight, **self.config)
