"""Bad inputs raise Python's exception types with Alpha's message intact ("[op] argument 'x': expected ...,
got ..."): ValueError for shapes, layouts, values and devices, TypeError for dtypes."""
import pytest
import torch

import alpha_attn
from reference import HAS_CUDA, random_qkv, requires_cuda


def test_exception_hierarchy():
    assert issubclass(alpha_attn.ShapeError, ValueError)
    assert issubclass(alpha_attn.LayoutError, ValueError)
    assert issubclass(alpha_attn.DeviceError, ValueError)
    assert issubclass(alpha_attn.AlphaValueError, ValueError)
    assert issubclass(alpha_attn.DTypeError, TypeError)
    assert issubclass(alpha_attn.BackendError, RuntimeError)
    assert issubclass(alpha_attn.AlphaError, RuntimeError)


def test_wrong_dtype_on_cpu():
    q, k, v = random_qkv(dtype=torch.float16)
    with pytest.raises(TypeError, match=r"\[attention_materialized\] argument 'q': expected dtype f32 or f64, got f16"):
        alpha_attn.flash_attention(q, k, v)


def test_mixed_dtypes():
    q, k, v = random_qkv()
    with pytest.raises(TypeError, match=r"argument 'k'.*f64.*got f32"):
        alpha_attn.flash_attention(q, k.float(), v)


def test_integer_and_unsupported_dtypes():
    q, k, v = random_qkv()
    with pytest.raises(TypeError):
        alpha_attn.flash_attention(q.long(), k.long(), v.long())
    with pytest.raises(TypeError, match="argument 'q'"):
        alpha_attn.flash_attention(q.to(torch.complex128), k, v)


def test_head_dim_mismatch():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match=r"\[attention_materialized\] argument 'k'"):
        alpha_attn.flash_attention(q, k[..., :4], v)


def test_heads_not_dividing():
    q, k, v = random_qkv(hq=3, hkv=2)
    with pytest.raises(ValueError, match="head count"):
        alpha_attn.flash_attention(q, k, v)


def test_wrong_rank_and_layout():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match="4-d tensor"):
        alpha_attn.flash_attention(q[0], k, v)
    with pytest.raises(ValueError, match="layout"):
        alpha_attn.flash_attention(q, k, v, layout="TBHD")
    with pytest.raises(TypeError, match="torch.Tensor"):
        alpha_attn.flash_attention(q.numpy(), k, v)


def test_bad_values():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match="dropout_p"):
        alpha_attn.flash_attention(q, k, v, dropout_p=1.0)
    with pytest.raises(ValueError, match="softcap"):
        alpha_attn.flash_attention(q, k, v, softcap=-1.0)
    with pytest.raises(ValueError, match="window_left"):
        alpha_attn.flash_attention(q, k, v, window=(-2, 0))
    with pytest.raises(ValueError, match="window"):
        alpha_attn.flash_attention(q, k, v, window=3)
    with pytest.raises(ValueError, match="eps"):
        alpha_attn.attention_hvp(q, k, v, torch.ones_like(q), q, k, v, eps=-1.0)


def test_constant_time_is_refused_on_the_cpu():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match="constant_time"):
        alpha_attn.flash_attention(q, k, v, constant_time=True)


def test_exact_hvp_needs_float64():
    q, k, v = random_qkv(dtype=torch.float32)
    with pytest.raises(TypeError, match="attention_hvp_exact"):
        alpha_attn.attention_hvp(q, k, v, torch.ones_like(q), q, k, v, exact=True)


def test_device_alpha_has_no_backend_for():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match="a CPU or CUDA tensor"):
        alpha_attn.flash_attention(q.to("meta"), k.to("meta"), v.to("meta"))


def test_nsa_wrong_shapes():
    q, k, v = random_qkv(tq=8, tk=8, d=4)
    gates = torch.zeros(2, 8, 4, 3, dtype=torch.float64)
    params = [torch.zeros(4, 4, dtype=torch.float64), torch.zeros(4, 16, dtype=torch.float64),
              torch.zeros(4, 4, dtype=torch.float64), torch.zeros(4, 16, dtype=torch.float64)]
    with pytest.raises(ValueError, match=r"\[nsa\] argument 'k_weight'"):
        alpha_attn.nsa(q, k, v, gates, params[0], params[1][:, :8], *params[2:], block_len=4, block_stride=2,
                       select_len=4, select_count=3, window=4)


@requires_cuda
def test_mixed_devices():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match=r"argument 'k'.*expected cuda:0.*got cpu|argument 'k'"):
        alpha_attn.flash_attention(q.float().cuda(), k.float(), v.float().cuda())


@requires_cuda
def test_unsupported_head_dim_on_the_gpu():
    q, k, v = random_qkv(d=264, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="head dimension of at most 256"):
        alpha_attn.flash_attention(q, k, v)
    q, k, v = random_qkv(d=12, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="multiple of 8"):
        alpha_attn.flash_attention(q, k, v)


@requires_cuda
def test_float64_on_the_gpu():
    q, k, v = random_qkv(device="cuda")
    with pytest.raises(TypeError, match="f64"):
        alpha_attn.flash_attention(q, k, v)
