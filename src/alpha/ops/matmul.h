// Matrix products. No operand is ever transposed in memory: transposes are flags passed to the GEMM.
// Every op runs on the device of its tensors: f32 or f64 on the CPU, f32, bf16 or f16 on a CUDA device
// (accumulating in f32).
#pragma once
#include <string_view>

#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// Whether f32 products on CUDA may round their inputs to TF32 (10-bit mantissa, about 3 decimal digits) to
// run on tensor cores. Process-wide, off by default; bf16, f16 and the CPU are unaffected.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Batched matmul: a is [..., M, K] ([..., K, M] with trans_a), b is [..., K, N] ([..., N, K] with trans_b);
// leading (batch) dimensions must be equal; result [..., M, N]. Inputs need unit stride in their last
// dimension (any other strides are made contiguous).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// Validates x [..., in], weight [out, in] and bias [out] (when defined) for `op`, an op built on linear:
// floats of one dtype on one device, typed errors naming `op`.
void check_linear_operands(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias);

// y = x · Wᵀ + b: x [..., in], weight [out, in], bias [out] or undefined. One GEMM (the bias in its epilogue).
// With a residual (x's dtype and device, y's shape), y = residual + x · Wᵀ + b from that GEMM (the residual its
// addend), rounded once: a residual stream's add with no pass of its own.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual = Tensor());

struct LinearGrads {
  Tensor dx;       // [..., in], undefined unless requested
  Tensor dweight;  // [out, in]
  Tensor dbias;    // [out]
};
// dx = dy·W, dW = dyᵀ·x, db = Σ over rows of dy; with dW and db both requested, db comes from dW's GEMM.
LinearGrads linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, bool need_dx,
                            bool need_dweight, bool need_dbias);

// dW and db of linear summed over calls, in f32 whatever x's dtype (f64 for f64 x), with no gradient of one
// call stored apart: dweight = dyᵀ·x, plus dweight's values when `accumulate`, and dbias = Σ over the rows of
// dy, plus its values when `accumulate` (either may be undefined: not computed). dy [..., out] and x [..., in]
// as linear_backward takes them; dweight [out, in] and dbias [out] contiguous on x's device, in f32 for f32,
// bf16 and f16 x (the GEMM reads bf16/f16 and accumulates into f32) and in f64 for f64 x. For a gradient summed
// over chunks of rows (linear_cross_entropy): the first chunk without `accumulate`, the others with it. With
// both, db comes from dW's GEMM (written apart and added when accumulating, the epilogue having no beta).
void linear_param_grads_into(const Tensor& dy, const Tensor& x, const Tensor& dweight, const Tensor& dbias,
                             bool accumulate);

// out = gelu(pre), pre = x · Wᵀ + b (GELU's tanh form, as ops::gelu): one GEMM whose epilogue adds the bias,
// applies GELU and, with keep_pre, also stores pre for the backward (else pre is undefined).
struct LinearGelu {
  Tensor pre;  // [..., out]
  Tensor out;  // [..., out]
};
LinearGelu linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, bool keep_pre = true);

// The backward of y = h · Wᵀ + b where h = gelu(pre) (the second layer of a GELU MLP, pre from linear_gelu):
// the gradients of W and b as linear_backward gives them, and instead of dh the gradient of pre,
// dpre = (dy·W) ⊙ gelu'(pre), from one GEMM with a DGELU epilogue that can also sum dpre over its rows
// (dpre_bias: the bias gradient of the layer that produced pre).
struct GeluLinearGrads {
  Tensor dpre;       // [..., in]
  Tensor dpre_bias;  // [in]
  Tensor dweight;    // [out, in]
  Tensor dbias;      // [out]
};
GeluLinearGrads gelu_linear_backward(const Tensor& dy, const Tensor& pre, const Tensor& h, const Tensor& weight,
                                     bool need_dpre, bool need_dpre_bias, bool need_dweight, bool need_dbias);

}  // namespace alpha::ops
