// Cross-entropy loss fused with its softmax: never holds more than one row of probabilities.
#pragma once
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// Rows whose target equals kIgnoreIndex contribute neither loss nor gradient.
inline constexpr int32_t kIgnoreIndex = -1;

struct CrossEntropyOutput {
  Tensor loss;  // 0-dimensional, mean over the non-ignored rows, logits' dtype
  Tensor lse;   // [N] per-row log-sum-exp (accumulation dtype), saved for the backward
  int64_t counted_rows = 0;
};
// logits [N, V] (or [..., V], flattened), targets [N] (i32) in [0, V) or kIgnoreIndex.
CrossEntropyOutput cross_entropy(const Tensor& logits, const Tensor& targets);
// dlogits = dloss · (softmax(logits) − onehot(target)) / counted_rows.
Tensor cross_entropy_backward(double dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t counted_rows);

}  // namespace alpha::ops
