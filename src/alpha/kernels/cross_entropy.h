// Cross-entropy loss fused with its softmax, over rows of logits (N, V) with integer targets.
// Forward: per row, lse = log Σ_j exp(x_j) (max-shifted) and loss_row = lse − x_target, then the mean
// over the non-ignored rows; only lse is kept for the backward, so no (N, V) probability matrix is
// ever materialised. Backward: recomputes p_j = exp(x_j − lse) row by row and writes
// dx_j = scale · (p_j − [j == target]), with scale = dloss / counted_rows.
// Rows are processed in parallel; the mean is a fixed-order reduction (same bits for any thread count).
// Targets must already be validated to lie in [0, V) or equal the ignore index.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"

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
  acc_t<T> scale;           // dloss / counted_rows
  int64_t rows;             // N
  int64_t vocab;            // V
  int32_t ignore_index;
};

namespace cpu {
template <class T> void cross_entropy(const CrossEntropyArgs<T>& args);
template <class T> void cross_entropy_backward(const CrossEntropyBackwardArgs<T>& args);
}  // namespace cpu

}  // namespace alpha::kernels
