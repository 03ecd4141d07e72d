// The JVP (forward-mode derivative) of attention, on the CPU (kernels/attention_jvp.h says what each form
// computes and why): given tangents (tq, tk, tv) of (q, k, v), the tangent of O = attention(q, k, v).
//
// attention_jvp takes the forward's out, row_max and row_sum (as attention_materialized returns them) and
// reconstructs P from them. With our own forward's statistics the result is the true JVP up to rounding.
// With statistics from elsewhere it is neither the true JVP nor the linearisation of the frozen-statistics
// operator (exp(S − m)/l)·V: it is that linearisation minus μ∘out, μ = rowsum(P∘tS) (see the kernel header).
//
// On a GPU in bf16/f16 both forms run on the tensor cores where the layout allows (D and Dv multiples of 8
// up to 128, 16-byte aligned rows), rounding their softmax weights to the input dtype before the products
// as flash attention does: their bf16/f16 results are as accurate as the naive JVP in that dtype (twice its
// error at most, check/tolerances.h), not one rounding from the f32 result.
//
// attention_jvp_fused needs no statistics: one streaming pass returns out, its tangent and the statistics
// (the true JVP).
//
// Both take the causal mask, sliding window, softcap, GQA/MQA (tk, tv per kv head, shared by the query heads
// of a group), Tq != Tk, Dv != D and rows that see no key (out 0, tangent 0). On the CPU f32 or f64,
// accumulating in f32/f64; on a GPU f32, bf16 or f16, accumulating in f32 (the CUDA kernels, head dimensions
// up to 256); results in the input dtype, statistics in f32 (f64 for f64). Dropout raises ValueError
// (config.dropout_p), a wider head dimension on a GPU ShapeError, operands on different devices DeviceError;
// nothing falls back.
#pragma once
#include "alpha/ops/attention.h"

namespace alpha::ops {

// q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] as in attention_materialized; tq, tk, tv shaped as
// q, k, v; out [B, Tq, Hq, Dv]; row_max, row_sum [B, Hq, Tq] in the statistics dtype (f64 for f64, else
// f32). Returns the tangent of out, [B, Tq, Hq, Dv].
Tensor attention_jvp(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tq, const Tensor& tk,
                     const Tensor& tv, const Tensor& out, const Tensor& row_max, const Tensor& row_sum,
                     const AttentionConfig& config);

struct AttentionJvpOutput {
  Tensor out;          // [B, Tq, Hq, Dv]
  Tensor tangent_out;  // [B, Tq, Hq, Dv]
  Tensor row_max;      // [B, Hq, Tq]; -inf for a row that sees no key
  Tensor row_sum;      // [B, Hq, Tq]; 0 for a row that sees no key
};
AttentionJvpOutput attention_jvp_fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tq,
                                       const Tensor& tk, const Tensor& tv, const AttentionConfig& config);

}  // namespace alpha::ops
