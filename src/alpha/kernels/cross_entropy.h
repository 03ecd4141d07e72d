// Cross-entropy loss fused with its softmax, over rows of logits (N, V) with integer targets.
// Forward: per row, lse = log Σ_j exp(x_j) (max-shifted) and loss_row = lse − x_target, then the mean
// over the non-ignored rows; only lse is kept for the backward, so no (N, V) probability matrix is
// ever materialised. Backward: recomputes p_j = exp(x_j − lse) row by row and writes
// dx_j = scale · (p_j − [j == target]), with scale = dloss / counted_rows.
// Rows are processed in parallel; the mean is a fixed-order reduction (same bits for any thread count).
// Forward and backward at once (cross_entropy_with_grad): both of the above from one read of each row, for a
// caller that knows the loss's gradient when it computes the loss (the fused classifier's chunks,
// ops/linear_cross_entropy.h); the gradient may overwrite the logits.
// Targets must already be validated to lie in [0, V) or equal the ignore index (the CUDA kernels read no
// logit out of range for an invalid target, and give its row a NaN loss and NaN gradient).
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"
#include "alpha/core/hd.h"
#include "alpha/core/stream.h"

namespace alpha::kernels {

template <class T>
struct CrossEntropyArgs {
  const T* logits;          // (N, V)
  const int32_t* targets;   // (N), in [0, V) or ignore_index
  acc_t<T>* lse;            // (N) log-sum-exp of each row (also written for ignored rows)
  acc_t<T>* loss;           // (1) mean of lse − x_target over counted rows; 0 when every row is ignored
  int64_t* counted_rows;    // (1) number of rows whose target is not ignore_index
  int64_t rows;             // N
  int64_t vocab;            // V
  int32_t ignore_index;
};

template <class T>
struct CrossEntropyBackwardArgs {
  const T* logits;          // (N, V)
  const int32_t* targets;   // (N)
  const acc_t<T>* lse;      // (N) from the forward
  T* dlogits;               // (N, V), every element written (ignored rows get 0)
  acc_t<T> scale;           // dloss / counted_rows (with both pointers below null)
  int64_t rows;             // N
  int64_t vocab;            // V
  int32_t ignore_index;
  // Optional factors read where the kernel runs (device memory for the CUDA kernel), so that a trainer
  // need not bring the forward's count or the loss gradient to the host: the gradient's factor is then
  // scale · (*dloss, or 1 without it) / (*counted_rows, or 1 without it), computed in f64, and 0 when
  // *counted_rows is 0 (every row ignored).
  const int64_t* counted_rows_device = nullptr;  // (1) the forward's counted_rows, or nullptr
  const acc_t<T>* dloss_device = nullptr;        // (1) the loss gradient (the loss is acc_t<T>), or nullptr
};

// cross_entropy's outputs and cross_entropy_backward's dlogits for the factor `scale`, from one read of the logits.
template <class T>
struct CrossEntropyWithGradArgs {
  CrossEntropyArgs<T> forward;  // lse, loss and counted_rows written as cross_entropy writes them
  T* dlogits;                   // (N, V), every element written (ignored rows get 0); may be forward.logits
  acc_t<T> scale;               // dlogits = scale · (p − onehot(target))
};

// The factor dlogits carry: scale, times dloss (the value of *dloss_device, which the caller reads, when that
// is given), divided by *counted_rows_device (0 for a count of 0) when that is given. Host and device.
template <class T>
ALPHA_HD acc_t<T> cross_entropy_gradient_factor(const CrossEntropyBackwardArgs<T>& args, double dloss) {
  double factor = double(args.scale);
  if (args.dloss_device) factor *= dloss;
  if (args.counted_rows_device) {
    const int64_t counted = *args.counted_rows_device;
    factor = counted > 0 ? factor / double(counted) : 0.0;
  }
  return acc_t<T>(factor);
}

namespace cpu {
template <class T> void cross_entropy(const CrossEntropyArgs<T>& args);
template <class T> void cross_entropy_backward(const CrossEntropyBackwardArgs<T>& args);
template <class T> void cross_entropy_with_grad(const CrossEntropyWithGradArgs<T>& args);
}  // namespace cpu

#if ALPHA_WITH_CUDA
// Device pointers (loss and counted_rows too); queued on `stream`. T = float, bf16 or f16, computing in f32.
// Forward: one kernel, a warp (V up to 1024) or a block per row reading the row once (online max and
// Σ exp), writing lse and the row's loss to scratch; a second one-block kernel adds the row losses and
// counts the rows in a fixed order and writes loss and counted_rows. Nothing is read back to the host.
// Backward: one kernel, a warp or a block per row, recomputing p from lse.
// With grad: one kernel, a block per row staged whole in shared memory (one read of the logits, one write of
// the gradient), then the forward's mean kernel; a row too long for the device's shared memory takes the
// forward and backward kernels above instead.
namespace cuda {
template <class T> void cross_entropy(const CrossEntropyArgs<T>& args, Stream stream);
template <class T> void cross_entropy_backward(const CrossEntropyBackwardArgs<T>& args, Stream stream);
template <class T> void cross_entropy_with_grad(const CrossEntropyWithGradArgs<T>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
