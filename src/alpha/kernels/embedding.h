// Embedding lookup: out[i] = table[ids[i]] for each position i, and its backward, which scatters
// dy rows back into a dense table gradient. The backward is deterministic: positions are bucketed by
// id (a stable counting sort), then each table row sums its contributions in increasing position
// order (accumulating in f64), rows in parallel, so the bits never depend on the thread count (no
// atomics, no races).
// ids must already be validated to lie in [0, vocab) (the tensor-op layer raises on bad ids).
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"

namespace alpha::kernels {

template <class T>
struct EmbeddingArgs {
  const int32_t* ids;  // (N)
  const T* table;      // (V, C)
  T* out;              // (N, C)
  int64_t positions;   // N
  int64_t vocab;       // V
  int64_t channels;    // C
};

template <class T>
struct EmbeddingBackwardArgs {
  const T* dy;         // (N, C)
  const int32_t* ids;  // (N)
  T* dtable;           // (V, C), every element written (rows no position uses get 0)
  int64_t positions;   // N
  int64_t vocab;       // V
  int64_t channels;    // C
};

namespace cpu {
template <class T> void embedding(const EmbeddingArgs<T>& args);
template <class T> void embedding_backward(const EmbeddingBackwardArgs<T>& args);
}  // namespace cpu

}  // namespace alpha::kernels
