// The kernel parameters (sizes, strides, scale, softcap, dropout) the reference attention op builds from
// its tensors and config. Exposed so that tests calling the kernels directly build them the same way.
#pragma once
#include "alpha/kernels/attention_reference.h"
#include "alpha/ops/attention.h"

namespace alpha::ops {

// q, k, v as in attention_reference (validated by the caller); T is float or double.
template <class T>
kernels::AttentionParams<T> attention_kernel_params(const Tensor& q, const Tensor& k, const Tensor& v,
                                                    const AttentionConfig& config);

}  // namespace alpha::ops
