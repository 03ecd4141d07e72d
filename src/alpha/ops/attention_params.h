// The kernel parameters (sizes, strides, scale, softcap, dropout) the attention ops build from their
// tensors and config. Exposed so that tests and the kernel harness calling the kernels directly build
// them the same way.
#pragma once
#include "alpha/kernels/attention_reference.h"
#include "alpha/ops/attention.h"

namespace alpha::ops {

// q, k, v as in attention_materialized (validated by the caller); T is float, double, bf16 or f16.
template <class T>
kernels::AttentionParams<T> attention_kernel_params(const Tensor& q, const Tensor& k, const Tensor& v,
                                                    const AttentionConfig& config);

}  // namespace alpha::ops
