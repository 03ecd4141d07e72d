// Cross-entropy loss fused with its softmax: never holds more than one row of probabilities.
#pragma once
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// Rows whose target equals kIgnoreIndex contribute neither loss nor gradient.
inline constexpr int32_t kIgnoreIndex = -1;

struct CrossEntropyOutput {
  Tensor loss;  // 0-dimensional, mean over the non-ignored rows, in the accumulation dtype (f64 for f64, else f32)
  Tensor lse;   // [N] per-row log-sum-exp (accumulation dtype), saved for the backward
  int64_t counted_rows = 0;  // counted on the host while the targets are validated
  Tensor counted;            // 0-dimensional i64 on the logits' device: the same count, as the kernel wrote it
  Tensor targets;            // [N] i32, the validated targets (contiguous, on the logits' device)
};
// logits [N, V] (or [..., V], flattened), targets [N] (i32) in [0, V) or kIgnoreIndex. On a GPU the targets
// are validated on the host (one device-to-host copy that waits for the device's stream); the loss itself
// is reduced on the device and stays there.
CrossEntropyOutput cross_entropy(const Tensor& logits, const Tensor& targets);
// dlogits = dloss · (softmax(logits) − onehot(target)) / counted_rows.
Tensor cross_entropy_backward(double dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t counted_rows);
// The same, with dloss (one element, the loss's dtype: its gradient) and counted_rows (the forward's
// `counted`, i64, one element) read by the kernel where they are, on the logits' device: no value goes
// through the host (beyond the targets' validation).
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& counted_rows);
// The same from the forward's own output (its validated targets, lse and count): the backward of a
// training step, which need not validate the targets again (on a GPU that would be another host round trip).
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const CrossEntropyOutput& forward);

}  // namespace alpha::ops
