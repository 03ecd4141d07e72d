// Hessian-vector products of attention. For a fixed cotangent G = grad_out, f(q, k, v) = ⟨O(q, k, v), G⟩
// (O as attention_materialized computes it); its gradient is what attention_materialized_backward returns
// for dout = G, and H·(vq, vk, vv) is that gradient's derivative along the direction (vq, vk, vv).
//
// attention_hvp takes it by central differences of the explicit backward:
//   H·v ≈ (∇f(x + eps·v) − ∇f(x − eps·v)) / (2·eps),
// running attention_materialized and its backward at each perturbed point, so the row statistics (m, l)
// are recomputed there: it differentiates the true function, not one with frozen statistics. Its error is
// O(eps²) truncation plus O(u/eps) rounding (u the dtype's unit roundoff); docs/ATTENTION_DERIVATIVES.md
// tabulates it against eps and recommends eps per dtype. It runs wherever attention_materialized runs (the
// CPU reference in f32/f64, the materialising CUDA kernels on a GPU): four attention passes, the Tq×Tk
// scores of each head materialised, never a fused HVP kernel.
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
