// Hessian-vector products of attention. For a fixed cotangent G = grad_out, f(q, k, v) = ⟨O(q, k, v), G⟩
// (O as attention_materialized computes it); its gradient is what attention_materialized_backward returns
// for dout = G, and H·(vq, vk, vv) is that gradient's derivative along the direction (vq, vk, vv).
//
// attention_hvp takes it by central differences of the explicit backward:
//   H·v ≈ (∇f(x + eps·v) − ∇f(x − eps·v)) / (2·eps),
// running attention's forward and backward at each perturbed point, so the row statistics (m, l) are
// recomputed there: it differentiates the true function, not one with frozen statistics. Its error is
// O(eps²) truncation plus O(u/eps) rounding (u the unit roundoff of the dtype it computes in);
// docs/ATTENTION_DERIVATIVES.md tabulates it against eps and recommends eps per dtype. On the CPU it runs
// the reference (attention_materialized and its backward, f32/f64; the Tq×Tk scores of one head at a time).
// On a GPU it runs flash attention (flash_attention and flash_attention_backward: O(T) memory, never the
// Tq×Tk scores) in f32 whatever the operands' dtype: bf16/f16 operands, cotangent and direction are
// promoted, the perturbed points formed in f32, and the result rounded back to their dtype, because a
// difference of two bf16/f16 gradients is dominated by rounding at any eps (about 15% and 4% of |H·v| at
// best). Four attention passes in all, at f32 flash speed; head dimensions up to 256 (ShapeError from
// flash_attention beyond).
//
// attention_hvp_exact is its oracle: forward-over-reverse in dual numbers (kernels/attention_hvp.h), exact
// up to f64 rounding, CPU and f64 only.
//
// Both: the causal mask, sliding window, softcap, GQA/MQA (hk, hv summed over each group), Tq != Tk and rows
// that see no key (they contribute nothing). Dropout is refused (ValueError naming config.dropout_p).
#pragma once
#include "alpha/ops/attention.h"

namespace alpha::ops {

struct AttentionHvp {
  Tensor hq;  // [B, Tq, Hq, D]
  Tensor hk;  // [B, Tk, Hkv, D]
  Tensor hv;  // [B, Tk, Hkv, Dv]
};

// q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] as in attention_materialized; grad_out shaped as the
// output [B, Tq, Hq, Dv]; vq, vk, vv shaped as q, k, v; all on one device in one dtype. eps > 0, finite.
AttentionHvp attention_hvp(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_out,
                           const Tensor& vq, const Tensor& vk, const Tensor& vv, const AttentionConfig& config,
                           double eps);

// The same arguments (no eps), f64 CPU tensors only: DeviceError for another device, DTypeError for another
// dtype.
AttentionHvp attention_hvp_exact(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_out,
                                 const Tensor& vq, const Tensor& vk, const Tensor& vv, const AttentionConfig& config);

}  // namespace alpha::ops
