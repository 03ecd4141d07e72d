"""nsa on the CPU, float64: each branch isolated by its gate against attention written in PyTorch ops, the
gated sum of the three, and gradients of all eight inputs by finite differences."""
import pytest
import torch

import alpha_attn
from reference import reference_attention

B, T, HQ, HKV, D, DV = 1, 12, 4, 2, 4, 3
L, STRIDE = 4, 2  # compression blocks of 4 tokens every 2
F64 = dict(rtol=1e-10, atol=1e-12)


def inputs(seed=0, gates=None):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    q, k, v = r(B, T, HQ, D), r(B, T, HKV, D), r(B, T, HKV, DV)
    gates = r(B, T, HQ, 3) if gates is None else gates
    return [q, k, v, gates, 0.1 * r(L, D), r(D, L * D) / L, 0.1 * r(L, DV), r(DV, L * DV) / L]


def isolate(branch):
    """Gate logits that keep one branch: sigmoid(+40) = 1 and sigmoid(-40) ~ 4e-18."""
    gates = torch.full((B, T, HQ, 3), -40.0, dtype=torch.float64)
    gates[..., branch] = 40.0
    return gates


def compressed_reference(q, k, v, k_pos, k_weight, v_pos, v_weight):
    blocks = (T - L) // STRIDE + 1
    ck = torch.stack([k[:, i * STRIDE:i * STRIDE + L] + k_pos[:, None] for i in range(blocks)], 1)  # B,N,L,H,D
    cv = torch.stack([v[:, i * STRIDE:i * STRIDE + L] + v_pos[:, None] for i in range(blocks)], 1)
    ck = torch.einsum("bnlhd,eld->bnhe", ck, k_weight.view(D, L, D))
    cv = torch.einsum("bnlhd,eld->bnhe", cv, v_weight.view(DV, L, DV))
    group = HQ // HKV
    ck, cv = ck.repeat_interleave(group, 2), cv.repeat_interleave(group, 2)
    s = torch.einsum("bthd,bnhd->bhtn", q, ck) / D**0.5
    ends = torch.arange(blocks) * STRIDE + L - 1
    s = s.masked_fill(ends[None, :] > torch.arange(T)[:, None], float("-inf"))
    return torch.einsum("bhtn,bnhd->bthd", torch.softmax(s, -1).nan_to_num(0.0), cv)


def run(x, **kw):
    config = dict(block_len=L, block_stride=STRIDE, select_len=4, select_count=3, window=T)
    config.update(kw)
    return alpha_attn.nsa(*x, **config)


def test_window_branch_is_causal_attention():
    x = inputs(gates=isolate(2))
    torch.testing.assert_close(run(x), reference_attention(*x[:3], causal=True), **F64)
    x = inputs(gates=isolate(2))
    window = reference_attention(*x[:3], causal=True, window=(2, -1))  # w = 3 tokens: the query and 2 before
    torch.testing.assert_close(run(x, window=3), window, **F64)


def test_selected_branch_with_every_block_kept_is_causal_attention():
    x = inputs(gates=isolate(1))
    out = run(x, select_len=4, select_count=T // 4)  # all 3 selection blocks kept
    torch.testing.assert_close(out, reference_attention(*x[:3], causal=True), **F64)


def test_compressed_branch_matches_reference():
    x = inputs(gates=isolate(0))
    torch.testing.assert_close(run(x), compressed_reference(*x[:3], *x[4:]), **F64)


def test_gated_sum_of_branches():
    x = inputs(seed=3)
    q, k, v, gates = x[:4]
    branches = [compressed_reference(q, k, v, *x[4:]),
                reference_attention(q, k, v, causal=True),  # every selection block kept
                reference_attention(q, k, v, causal=True, window=(4, -1))]
    want = sum(torch.sigmoid(gates[..., i:i + 1]) * b for i, b in enumerate(branches))
    torch.testing.assert_close(run(x, select_count=3, window=5), want, **F64)


def test_gradcheck_all_inputs():
    x = [t.requires_grad_() for t in inputs(seed=1)]
    assert torch.autograd.gradcheck(lambda *x: run(list(x), select_count=3, window=5), tuple(x))


def test_nsa_compressor_module():
    torch.manual_seed(0)
    module = alpha_attn.NsaCompressor(dim=8, q_heads=HQ, head_dim=D, value_dim=DV, block_len=L, block_stride=STRIDE,
                                      select_len=4, select_count=3, window=5).double()
    q, k, v = inputs()[:3]
    x = torch.randn(B, T, 8, dtype=torch.float64)
    out = module(q, k, v, x)
    assert out.shape == (B, T, HQ, DV)
    out.sum().backward()
    assert all(p.grad is not None for p in module.parameters())


def test_bad_config_raises_value_error():
    with pytest.raises(ValueError, match=r"\[nsa\].*select_count"):
        run(inputs(), select_count=2)
