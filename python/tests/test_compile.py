"""torch.compile of a nanoGPT-style block using alpha_attn: one graph, no break, the same values and
gradients as eager; torch.library.opcheck of the custom ops (schema, fake implementations, autograd).
torch >= 2.4 only (torch.library.custom_op); skipped on older torch (CI's Debian torch 1.13)."""
import pytest
import torch

import alpha_attn
from reference import random_qkv

pytestmark = pytest.mark.skipif(not alpha_attn.HAS_CUSTOM_OP, reason="custom ops and torch.compile need torch >= 2.4")

F64 = dict(rtol=1e-10, atol=1e-12)


class CausalSelfAttention(torch.nn.Module):
    """nanoGPT's block, with F.scaled_dot_product_attention replaced by alpha_attn.flash_attention."""

    def __init__(self, n_embd=32, n_head=4):
        super().__init__()
        self.n_head = n_head
        self.c_attn = torch.nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = torch.nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = alpha_attn.flash_attention(q, k, v, causal=True, layout="BHTD")
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


def _model_and_input(dtype=torch.float64, device="cpu"):
    torch.manual_seed(0)
    model = CausalSelfAttention().to(dtype=dtype, device=device)
    x = torch.randn(2, 8, 32, dtype=dtype, device=device, requires_grad=True)
    return model, x


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_block_matches_eager(backend):
    torch._dynamo.reset()
    model, x = _model_and_input()
    want = model(x)
    want_grads = torch.autograd.grad(want.sum(), [x, *model.parameters()])
    compiled = torch.compile(model, fullgraph=True, backend=backend)  # fullgraph: a graph break raises
    got = compiled(x)
    torch.testing.assert_close(got, want, **F64)
    for g, w in zip(torch.autograd.grad(got.sum(), [x, *model.parameters()]), want_grads):
        torch.testing.assert_close(g, w, **F64)


def test_dynamo_explain_finds_no_graph_break():
    torch._dynamo.reset()
    model, x = _model_and_input()
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def test_compiled_with_inductor_on_the_cpu():
    torch._dynamo.reset()
    model, x = _model_and_input(torch.float32)
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    compiled(x).sum().backward()
    assert x.grad is not None


def _options(causal=True):
    return (0.0, causal, 0.0, 0.0, 0, 0, -1, -1, True, False)


def test_opcheck_attention_forward():
    q, k, v = random_qkv(requires_grad=True)
    torch.library.opcheck(torch.ops.alpha_attn.attention_forward.default, (q, k, v, *_options()))


def test_opcheck_attention_backward():
    q, k, v = random_qkv()
    out, row_max, row_sum = torch.ops.alpha_attn.attention_forward(q, k, v, *_options())
    dout = torch.randn_like(out)
    torch.library.opcheck(torch.ops.alpha_attn.attention_backward.default,
                          (dout, q, k, v, out, row_max, row_sum, *_options()))


def test_opcheck_jvp_fused():
    q, k, v = random_qkv()
    tq, tk, tv = (torch.randn_like(t) for t in (q, k, v))
    torch.library.opcheck(torch.ops.alpha_attn.attention_jvp_fused.default, (q, k, v, tq, tk, tv, *_options()),
                          test_utils=("test_schema", "test_faketensor"))


def test_compiled_nsa():
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    x = [r(1, 12, 4, 4), r(1, 12, 2, 4), r(1, 12, 2, 4), r(1, 12, 4, 3), r(4, 4), r(4, 16), r(4, 4), r(4, 16)]
    x = [t.requires_grad_() for t in x]
    f = lambda *x: alpha_attn.nsa(*x, block_len=4, block_stride=2, select_len=4, select_count=3, window=5)
    want = f(*x)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*x)
    torch.testing.assert_close(got, want, **F64)
    for a, b in zip(torch.autograd.grad(got.sum(), x), torch.autograd.grad(want.sum(), x)):
        torch.testing.assert_close(a, b, **F64)
