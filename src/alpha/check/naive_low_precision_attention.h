// The yardstick of the harness's criterion for bf16/f16 attention: attention computed naively in the
// storage type T, as PyTorch's math (non-fused) SDPA path computes it. Every matrix product accumulates in
// f32 and its result is rounded to T; every intermediate tensor is rounded to T (round to nearest even).
// A fused kernel passes when its error against the f64 reference is at most twice this computation's
// (kernel_check.h, compare_with_naive; the factor and floor in tolerances.h).
//
// With round() the rounding to T, Z the scaled dropout mask of the reference (the same Philox indices)
// and the reference's conventions (kernels/attention_reference.h: bottom-right causal mask and window,
// masked scores −inf, GQA, Dv != D; a row that sees no key outputs 0 and contributes no gradient):
//   forward   S = round(round(q·kᵀ)·scale); with softcap c, S = round(c·tanh(S/c));
//             P = round(softmax(S)) (in f32 from the rounded S); P̃ = round(P∘Z); out = round(P̃·V)
//   backward  dP̃ = round(dO·Vᵀ); dV = round(P̃ᵀ·dO); dP = round(dP̃∘Z);
//             dS = round(P∘(dP − rowsum(dP∘P))) (in f32 from the rounded operands);
//             with softcap dS = round(dS∘(1 − (S/c)²));
//             dQ = round(round(dS·K)·scale); dK = round(round(dSᵀ·Q)·scale)
// dK and dV of a GQA group sum over its query heads in f32 before their rounding. The backward recomputes
// the forward's P̃ from q, k, v. For T = f32 nothing rounds: it is the reference computed in f32.
//
// The JVP along tangents (tq, tk, tv), as forward-mode AD of that computation (torch.func.jvp of the math
// path) rounds it, with the forward's S and P above (no dropout):
//   tS = round(round(round(tq·kᵀ) + round(q·tkᵀ))·scale); with softcap tS = round(tS∘(1 − (S/c)²));
//   μ = round(rowsum(P∘tS)) (in f32); tP = round(P∘(tS − μ)); tO = round(round(tP·V) + round(P·tv))
// The yardstick of the bf16/f16 JVP kernels that round e and e·tS to T before their products.
//
// It is an oracle, written plainly: one (batch, head) at a time, the score matrix materialised, OpenMP
// over query rows (and over keys for dK, dV); each element is summed by one thread in a fixed order.
#pragma once
#include "alpha/ops/attention.h"
#include "alpha/tensor/tensor.h"

namespace alpha::check {

struct NaiveAttention {
  Tensor out;         // [B, Tq, Hq, Dv]
  Tensor dq, dk, dv;  // like q, k, v (contiguous); dk, dv summed over each GQA group
};

// q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] (any strides, unit-stride features), dout
// [B, Tq, Hq, Dv]: CPU tensors of one dtype, f32, bf16 or f16, that ops::attention_materialized accepts
// with `config`. Results are CPU tensors of that dtype. Raises DTypeError, DeviceError or ShapeError for
// inputs outside that.
NaiveAttention naive_low_precision_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                             const ops::AttentionConfig& config);

struct NaiveAttentionJvp {
  Tensor out;          // [B, Tq, Hq, Dv]
  Tensor tangent_out;  // [B, Tq, Hq, Dv]
};

// q, k, v as above; tq, tk, tv shaped as q, k, v (any strides, unit-stride features), of q's dtype and
// device. Raises as above, and ValueError for dropout.
NaiveAttentionJvp naive_low_precision_attention_jvp(const Tensor& q, const Tensor& k, const Tensor& v,
                                                    const Tensor& tq, const Tensor& tk, const Tensor& tv,
                                                    const ops::AttentionConfig& config);

}  // namespace alpha::check
