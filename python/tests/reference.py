"""Shared references for the alpha_attn tests: attention written out in PyTorch ops (what SDPA's math
backend computes), with Alpha's conventions (bottom-right causal mask, sliding window, softcap, GQA)."""
import math

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
HAS_FUNC = hasattr(torch, "func") and hasattr(torch.func, "jvp")
HAS_SDPA = hasattr(torch.nn.functional, "scaled_dot_product_attention")
TORCH_MAJOR = int(torch.__version__.split(".")[0])

requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
requires_func = pytest.mark.skipif(not HAS_FUNC, reason="torch.func needs torch >= 2.0")
requires_sdpa = pytest.mark.skipif(not HAS_SDPA, reason="F.scaled_dot_product_attention needs torch >= 2.0")


def sdpa_math(q, k, v, is_causal=False):
    """F.scaled_dot_product_attention on its math backend (the one with forward AD), [B, H, T, D]."""
    from torch.nn.attention import SDPBackend, sdpa_kernel  # torch >= 2.3
    group = q.shape[1] // k.shape[1]  # GQA: query head h reads kv head h // group (SDPA wants them repeated)
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


try:
    from torch.nn.attention import sdpa_kernel as _sdpa_kernel  # noqa: F401
    HAS_SDPA_MATH = HAS_SDPA
except ImportError:
    HAS_SDPA_MATH = False
requires_sdpa_math = pytest.mark.skipif(not HAS_SDPA_MATH, reason="sdpa_kernel(SDPBackend.MATH) needs torch >= 2.3")


def visible(tq, tk, causal=False, window=(-1, -1), device="cpu"):
    """[Tq, Tk] bool: key j visible to query i (Alpha's visible_key_range)."""
    i = torch.arange(tq, device=device)[:, None]
    j = torch.arange(tk, device=device)[None, :]
    diag = i + (tk - tq)
    mask = torch.ones(tq, tk, dtype=torch.bool, device=device)
    if causal:
        mask &= j <= diag
    if window[0] >= 0:
        mask &= j >= diag - window[0]
    if window[1] >= 0:
        mask &= j <= diag + window[1]
    return mask


def reference_attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] -> [B, Tq, Hq, Dv]; rows that see no key give 0."""
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    mask = visible(q.shape[1], k.shape[1], causal, window, q.device)
    s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row with no visible key: all -inf -> 0
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def random_qkv(b=2, tq=7, tk=9, hq=4, hkv=2, d=8, dv=None, dtype=torch.float64, device="cpu", seed=0,
               requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    dv = d if dv is None else dv
    make = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)
    q, k, v = make(b, tq, hq, d), make(b, tk, hkv, d), make(b, tk, hkv, dv)
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v
