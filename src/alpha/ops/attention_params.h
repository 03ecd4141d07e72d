// The kernel parameters (sizes, strides, scale, softcap, dropout) the attention ops build from their
// tensors and config, and the validation of those tensors and config. Exposed so that tests and the kernel
// harness calling the kernels directly build them the same way, and so that every attention op (forward,
// backward and their derivatives) checks its inputs with one function.
#pragma once
#include <string_view>

#include "alpha/kernels/attention_reference.h"
#include "alpha/ops/attention.h"

namespace alpha::ops {

// q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] on one device in one float dtype of its backend,
// Hq a multiple of Hkv, unit-stride feature dimensions; a finite scale >= 0, softcap >= 0, dropout_p in [0, 1),
// windows >= -1. Raises the typed error naming `op`, the argument, what was expected and what came.
void check_attention_inputs(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionConfig& config);

// The dtype of the row statistics m, l: the accumulation dtype, f64 for f64 inputs and f32 otherwise.
DType attention_statistics_dtype(const Tensor& q);

// row_max and row_sum as the forward returns them for q (validated): on q's device, in
// attention_statistics_dtype(q), shaped [B, Hq, Tq]. Raises like check_attention_inputs.
void check_attention_statistics(std::string_view op, const Tensor& q, const Tensor& row_max, const Tensor& row_sum);

// q, k, v as in attention_materialized (validated by the caller); T is float, double, bf16 or f16.
template <class T>
kernels::AttentionParams<T> attention_kernel_params(const Tensor& q, const Tensor& k, const Tensor& v,
                                                    const AttentionConfig& config);

}  // namespace alpha::ops
