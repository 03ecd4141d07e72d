"""flash_attention on the CPU against attention written in PyTorch ops (and SDPA's math backend where
torch has it), in float64: outputs, gradients, forward-mode derivatives, the HVP, layouts and options."""
import pytest
import torch

import alpha_attn
from reference import (HAS_SDPA_MATH, random_qkv, reference_attention, requires_func, requires_sdpa_math,
                       sdpa_math)

F64 = dict(rtol=1e-10, atol=1e-12)

CASES = [
    dict(name="plain", kw={}),
    dict(name="causal", kw=dict(causal=True)),
    dict(name="window", kw=dict(window=(3, 1))),
    dict(name="causal_window_softcap", kw=dict(causal=True, window=(2, -1), softcap=1.5)),
    dict(name="scale", kw=dict(scale=0.3)),
]
SHAPES = [
    dict(b=2, tq=7, tk=9, hq=4, hkv=2, d=8),     # GQA, Tq != Tk (bottom-right causal)
    dict(b=1, tq=5, tk=5, hq=3, hkv=3, d=16, dv=4),  # MHA, Dv != D
    dict(b=1, tq=1, tk=6, hq=2, hkv=1, d=8),     # MQA, one query (decoding)
]


def ids(items):
    return [str(i) for i in range(len(items))]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.parametrize("shape", SHAPES, ids=ids(SHAPES))
def test_forward_and_gradients_match_reference(case, shape):
    q, k, v = random_qkv(**shape, requires_grad=True)
    kw = dict(case["kw"])
    out = alpha_attn.flash_attention(q, k, v, **kw)
    ref = reference_attention(q, k, v, **kw)
    torch.testing.assert_close(out, ref, **F64)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, **F64)


def test_float32_matches_float64_reference():
    q, k, v = random_qkv(dtype=torch.float32, requires_grad=True)
    out = alpha_attn.flash_attention(q, k, v, causal=True)
    ref = reference_attention(*(t.double() for t in (q, k, v)), causal=True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert q.grad.dtype == torch.float32 and q.grad.shape == q.shape


def test_bhtd_layout_takes_strided_views():
    q, k, v = random_qkv(tq=6, tk=6, requires_grad=True)
    qh, kh, vh = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))  # [B, H, T, D]
    out = alpha_attn.flash_attention(qh, kh, vh, causal=True, layout="BHTD")
    assert out.shape == (2, 4, 6, 8)
    ref = reference_attention(q, k, v, causal=True).transpose(1, 2)
    torch.testing.assert_close(out, ref, **F64)
    # The [B, T, H, D] view of the result is contiguous: y.transpose(1, 2).reshape(B, T, C) copies nothing.
    assert out.transpose(1, 2).is_contiguous()
    g = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (qh, kh, vh), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(got, want.transpose(1, 2), **F64)


def test_strided_inputs_need_no_copy():
    # q, k, v as slices of one fused qkv projection, [B, T, 3, H, D]: strided views with a unit last stride.
    qkv = torch.randn(2, 5, 3, 2, 8, dtype=torch.float64)
    q, k, v = qkv.unbind(2)
    assert not q.is_contiguous()
    out = alpha_attn.flash_attention(q, k, v, causal=True)
    torch.testing.assert_close(out, reference_attention(q, k, v, causal=True), **F64)
    # A non-unit last stride is copied first rather than refused.
    qt = q.contiguous().transpose(-1, -2).contiguous().transpose(-1, -2)
    assert qt.stride(-1) != 1
    torch.testing.assert_close(alpha_attn.flash_attention(qt, k, v), reference_attention(q, k, v), **F64)


def test_fully_masked_rows_give_zero():
    q, k, v = random_qkv(tq=6, tk=6)
    out = alpha_attn.flash_attention(q, k, v, window=(0, -1), causal=True)  # each query sees only itself
    torch.testing.assert_close(out, reference_attention(q, k, v, window=(0, -1), causal=True), **F64)
    out = alpha_attn.flash_attention(q, k[:, :0], v[:, :0])  # no keys at all
    assert out.shape == (2, 6, 4, 8) and not out.any()


def test_gradcheck():
    q, k, v = random_qkv(b=1, tq=3, tk=4, hq=2, hkv=1, d=4, requires_grad=True)
    f = lambda q, k, v: alpha_attn.flash_attention(q, k, v, causal=True, softcap=2.0)
    assert torch.autograd.gradcheck(f, (q, k, v))


def test_double_backward_is_refused():
    q, k, v = random_qkv(requires_grad=True)
    out = alpha_attn.flash_attention(q, k, v)
    (gq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):
        gq.sum().backward()


def test_dropout_is_reproducible_under_manual_seed():
    q, k, v = random_qkv(requires_grad=True)
    torch.manual_seed(1)
    a = alpha_attn.flash_attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(1)
    b = alpha_attn.flash_attention(q, k, v, dropout_p=0.3)
    c = alpha_attn.flash_attention(q, k, v, dropout_p=0.3)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c)
    assert not torch.allclose(a, alpha_attn.flash_attention(q, k, v))
    a.sum().backward()
    assert torch.isfinite(q.grad).all()


@requires_sdpa_math
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_math_backend(causal):
    q, k, v = random_qkv(tq=8, tk=8, hq=2, hkv=2, requires_grad=True)  # SDPA's causal is top-left: Tq = Tk
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    out = alpha_attn.flash_attention(qh, kh, vh, causal=causal, layout="BHTD")
    ref = sdpa_math(qh, kh, vh, is_causal=causal)
    torch.testing.assert_close(out, ref, **F64)
    g = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(got, want, **F64)


# Forward-mode derivatives ------------------------------------------------------------------------------

def _tangents(q, k, v, seed=7):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(t.shape, generator=g, dtype=t.dtype) for t in (q, k, v))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_forward_ad_matches_reference(case):
    import torch.autograd.forward_ad as fwAD
    q, k, v = random_qkv()
    tangents = _tangents(q, k, v)
    with fwAD.dual_level():
        duals = [fwAD.make_dual(p, t) for p, t in zip((q, k, v), tangents)]
        got = fwAD.unpack_dual(alpha_attn.flash_attention(*duals, **case["kw"]))
        want = fwAD.unpack_dual(reference_attention(*duals, **case["kw"]))
    torch.testing.assert_close(got.primal, want.primal, **F64)
    torch.testing.assert_close(got.tangent, want.tangent, **F64)


def test_forward_ad_with_some_tangents_missing():
    import torch.autograd.forward_ad as fwAD
    q, k, v = random_qkv()
    _, tk, _ = _tangents(q, k, v)
    with fwAD.dual_level():
        kd = fwAD.make_dual(k, tk)
        got = fwAD.unpack_dual(alpha_attn.flash_attention(q, kd, v, causal=True)).tangent
        want = fwAD.unpack_dual(reference_attention(q, kd, v, causal=True)).tangent
    torch.testing.assert_close(got, want, **F64)


@requires_func
@pytest.mark.parametrize("layout", ["BTHD", "BHTD"])
def test_torch_func_jvp_matches_math(layout):
    q, k, v = random_qkv(tq=6, tk=6)
    if layout == "BHTD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    tangents = _tangents(q, k, v)
    f = lambda q, k, v: alpha_attn.flash_attention(q, k, v, causal=True, layout=layout)
    if HAS_SDPA_MATH and layout == "BHTD":
        want = torch.func.jvp(lambda q, k, v: sdpa_math(q, k, v, is_causal=True), (q, k, v), tangents)
    else:
        want = torch.func.jvp(lambda q, k, v: reference_attention(q, k, v, causal=True), (q, k, v), tangents)
    got = torch.func.jvp(f, (q, k, v), tangents)
    torch.testing.assert_close(got[0], want[0], **F64)
    torch.testing.assert_close(got[1], want[1], **F64)


@requires_func
def test_torch_func_jacfwd_matches_jacrev():
    q, k, v = random_qkv(b=1, tq=3, tk=4, hq=2, hkv=1, d=4)
    f = lambda q: alpha_attn.flash_attention(q, k, v, causal=True)
    torch.testing.assert_close(torch.func.jacfwd(f)(q), torch.func.jacrev(f)(q), **F64)


def test_fused_jvp_matches_reference():
    import torch.autograd.forward_ad as fwAD
    q, k, v = random_qkv()
    tangents = _tangents(q, k, v)
    out, tangent = alpha_attn.flash_attention_jvp((q, k, v), tangents, causal=True, softcap=2.0)
    with fwAD.dual_level():
        duals = [fwAD.make_dual(p, t) for p, t in zip((q, k, v), tangents)]
        want = fwAD.unpack_dual(reference_attention(*duals, causal=True, softcap=2.0))
    torch.testing.assert_close(out, want.primal, **F64)
    torch.testing.assert_close(tangent, want.tangent, **F64)


def test_jvp_refuses_dropout():
    import torch.autograd.forward_ad as fwAD
    q, k, v = random_qkv()
    with fwAD.dual_level():
        qd = fwAD.make_dual(q, torch.ones_like(q))
        with pytest.raises(ValueError, match="dropout_p"):
            alpha_attn.flash_attention(qd, k, v, dropout_p=0.1)


# HVP ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exact", [False, True])
def test_hvp_matches_double_backward_of_reference(exact):
    q, k, v = random_qkv(requires_grad=True)
    g = torch.Generator().manual_seed(3)
    grad_out = torch.randn(2, 7, 4, 8, generator=g, dtype=torch.float64)
    vq, vk, vv = _tangents(q, k, v, seed=5)
    hq, hk, hv = alpha_attn.attention_hvp(q, k, v, grad_out, vq, vk, vv, causal=True, softcap=3.0, exact=exact)
    ref = reference_attention(q, k, v, causal=True, softcap=3.0)
    grads = torch.autograd.grad(ref, (q, k, v), grad_out, create_graph=True)
    dot = sum((gr * d).sum() for gr, d in zip(grads, (vq, vk, vv)))
    want = torch.autograd.grad(dot, (q, k, v))
    tol = dict(rtol=1e-9, atol=1e-10) if exact else dict(rtol=1e-6, atol=1e-7)
    for got, w in zip((hq, hk, hv), want):
        torch.testing.assert_close(got, w, **tol)
