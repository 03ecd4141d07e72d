"""alpha_attn on a CUDA GPU: Alpha's flash kernels (f32, bf16, f16) against float64 attention in PyTorch ops
on the same (rounded) inputs, gradients, forward-mode derivatives, the HVP, torch's streams, torch.compile
with Inductor, NSA. Skipped without a GPU."""
import pytest
import torch

import alpha_attn
from reference import HAS_CUDA, HAS_FUNC, random_qkv, reference_attention, requires_func

pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")

# Max error relative to the largest reference value: the input dtype's rounding of the result and of the
# softmax weights (the tensor-core kernels round P to bf16/f16 before P·V, as flash attention does).
TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}
GRAD_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}


def assert_near(got, want, tol, what=""):
    got, want = got.double().cpu(), want.double().cpu()
    err = (got - want).abs().max().item()
    scale = max(want.abs().max().item(), 1e-30)
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol:g} x max|want| {scale:.3g}"


def on_gpu(dtype, requires_grad=False, **shape):
    q, k, v = random_qkv(**shape)
    gpu = [t.to(device="cuda", dtype=dtype).requires_grad_(requires_grad) for t in (q, k, v)]
    f64 = [t.detach().double().cpu().requires_grad_(requires_grad) for t in gpu]  # the same rounded values
    return gpu, f64


SHAPES = [dict(b=2, tq=128, tk=128, hq=4, hkv=2, d=64), dict(b=1, tq=77, tk=200, hq=6, hkv=1, d=128, dv=64),
          dict(b=2, tq=256, tk=256, hq=2, hkv=2, d=256)]
OPTIONS = [dict(causal=True), dict(), dict(causal=True, window=(32, 0), softcap=20.0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=["gqa", "mqa_dv", "d256"])
@pytest.mark.parametrize("options", OPTIONS, ids=["causal", "full", "window_softcap"])
def test_forward_and_backward_against_float64(dtype, shape, options):
    (q, k, v), (q64, k64, v64) = on_gpu(dtype, requires_grad=True, **shape)
    out = alpha_attn.flash_attention(q, k, v, **options)
    want = reference_attention(q64, k64, v64, **options)
    assert out.dtype == dtype and out.device == q.device
    assert_near(out, want, TOL[dtype], "out")
    g = torch.randn_like(want)
    grads = torch.autograd.grad(out, (q, k, v), g.to(device="cuda", dtype=dtype))
    for name, got, w in zip("qkv", grads, torch.autograd.grad(want, (q64, k64, v64), g.to(dtype).double())):
        assert_near(got, w, GRAD_TOL[dtype], "d" + name)


@pytest.mark.parametrize("deterministic", [True, False])
def test_deterministic_backward_gives_the_same_bits(deterministic):
    (q, k, v), _ = on_gpu(torch.bfloat16, requires_grad=True, b=2, tq=512, tk=512, hq=4, hkv=4, d=64)
    runs = []
    for _ in range(3):
        out = alpha_attn.flash_attention(q, k, v, causal=True, deterministic=deterministic)
        runs.append(torch.autograd.grad(out.float().square().sum(), (q, k, v)))
    if deterministic:
        for run in runs[1:]:
            for a, b in zip(run, runs[0]):
                assert torch.equal(a, b)


def test_bhtd_layout_on_the_gpu():
    (q, k, v), (q64, k64, v64) = on_gpu(torch.bfloat16, b=2, tq=64, tk=64, hq=4, hkv=4, d=64)
    qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = alpha_attn.flash_attention(qh, kh, vh, causal=True, layout="BHTD")
    assert_near(out.transpose(1, 2), reference_attention(q64, k64, v64, causal=True), TOL[torch.bfloat16])


def test_matches_sdpa_flash_backend():
    (q, k, v), _ = on_gpu(torch.bfloat16, b=2, tq=256, tk=256, hq=8, hkv=8, d=64)
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    out = alpha_attn.flash_attention(qh, kh, vh, causal=True, layout="BHTD")
    want = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
    assert_near(out, want, 2 * TOL[torch.bfloat16], "out vs SDPA")


def test_side_stream_is_respected():
    (q, k, v), (q64, k64, v64) = on_gpu(torch.float16, b=4, tq=512, tk=512, hq=8, hkv=8, d=128)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        q2 = q * 2  # queued on the side stream just before the op, which must see it
        out = alpha_attn.flash_attention(q2, k, v, causal=True)
        total = out.float().sum()  # queued after the op on the side stream
    torch.cuda.current_stream().wait_stream(stream)
    want = reference_attention(q64 * 2, k64, v64, causal=True)
    assert_near(out, want, TOL[torch.float16])
    assert abs(total.item() - want.sum().item()) <= 1e-2 * want.abs().sum().item()


def test_current_device_is_kept():
    (q, k, v), _ = on_gpu(torch.bfloat16, b=1, tq=16, tk=16, hq=2, hkv=2, d=64)
    before = torch.cuda.current_device()
    alpha_attn.flash_attention(q, k, v)
    assert torch.cuda.current_device() == before


def test_forward_ad_on_the_gpu():
    import torch.autograd.forward_ad as fwAD
    (q, k, v), (q64, k64, v64) = on_gpu(torch.float32, b=2, tq=64, tk=96, hq=4, hkv=2, d=64)
    tangents = [torch.randn_like(t) for t in (q, k, v)]
    with fwAD.dual_level():
        got = fwAD.unpack_dual(alpha_attn.flash_attention(*(fwAD.make_dual(p, t) for p, t in zip((q, k, v), tangents)),
                                                          causal=True)).tangent
        duals = (fwAD.make_dual(p, t.double().cpu()) for p, t in zip((q64, k64, v64), tangents))
        want = fwAD.unpack_dual(reference_attention(*duals, causal=True)).tangent
    assert_near(got, want, 1e-4, "tangent")


@requires_func
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_torch_func_jvp_and_fused_jvp_on_the_gpu(dtype):
    (q, k, v), (q64, k64, v64) = on_gpu(dtype, b=2, tq=128, tk=128, hq=4, hkv=4, d=64)
    tangents = [torch.randn_like(t) for t in (q, k, v)]
    f = lambda q, k, v: alpha_attn.flash_attention(q, k, v, causal=True)
    out, tangent = torch.func.jvp(f, (q, k, v), tuple(tangents))
    want = torch.func.jvp(lambda q, k, v: reference_attention(q, k, v, causal=True), (q64, k64, v64),
                          tuple(t.double().cpu() for t in tangents))
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    assert_near(out, want[0], tol, "out")
    assert_near(tangent, want[1], tol, "tangent")
    fused = alpha_attn.flash_attention_jvp((q, k, v), tangents, causal=True)
    assert_near(fused[1], want[1], tol, "fused tangent")


def test_hvp_on_the_gpu():
    (q, k, v), (q64, k64, v64) = on_gpu(torch.float32, b=1, tq=64, tk=64, hq=2, hkv=2, d=64)
    g = torch.randn(1, 64, 2, 64, device="cuda")
    vq, vk, vv = (torch.randn_like(t) for t in (q, k, v))
    got = alpha_attn.attention_hvp(q, k, v, g, vq, vk, vv, causal=True)
    cpu = lambda t: t.double().cpu()
    want = alpha_attn.attention_hvp(q64, k64, v64, cpu(g), cpu(vq), cpu(vk), cpu(vv), causal=True, exact=True)
    for name, a, b in zip("qkv", got, want):
        assert_near(a, b, 4e-3, "h" + name)


def test_compile_with_inductor_on_the_gpu():
    if not alpha_attn.HAS_CUSTOM_OP:
        pytest.skip("torch.compile with custom ops needs torch >= 2.4")
    from test_compile import CausalSelfAttention
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = CausalSelfAttention(n_embd=256, n_head=4).cuda().to(torch.bfloat16)
    x = torch.randn(2, 128, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True)
    want = model(x)
    got = compiled(x)
    assert_near(got, want, 2e-2, "compiled out")
    (gx,) = torch.autograd.grad(got.float().sum(), x)
    (wx,) = torch.autograd.grad(want.float().sum(), x)
    assert_near(gx, wx, 5e-2, "compiled dx")


def test_nsa_on_the_gpu():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    x = [r(1, 64, 4, 64), r(1, 64, 2, 64), r(1, 64, 2, 64), r(1, 64, 4, 3), r(8, 64) * 0.1, r(64, 512) / 8,
         r(8, 64) * 0.1, r(64, 512) / 8]
    config = dict(block_len=8, block_stride=4, select_len=16, select_count=3, window=16)
    want = alpha_attn.nsa(*x, **config)
    try:
        got = alpha_attn.nsa(*(t.float().cuda() for t in x), **config)
    except alpha_attn.DeviceError as e:
        pytest.skip(f"this build has no NSA GPU kernel: {e}")
    assert_near(got, want, 1e-4, "nsa out")
