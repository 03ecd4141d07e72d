// Embedding lookup: out[i] = table[ids[i]] for each position i, and its backward, which scatters
// dy rows back into a dense table gradient. The backward is deterministic: positions are bucketed by
// id (a stable counting sort), then each table row sums its contributions in increasing position
// order (accumulating in f64), rows in parallel, so the bits never depend on the thread count (no
// atomics, no races).
// The tensor-op layer raises on ids outside [0, vocab). Given one anyway, the backward (either backend)
// adds that position to no row, and the GPU's lookup gives a row of NaN.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"
#include "alpha/core/stream.h"

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

// G, the table gradient's element type: T, or f32 beside bf16/f16 dy (an f32 table looked up through its
// bf16/f16 copy gets its gradient rounded once, to f32, not to bf16 and then widened).
template <class T, class G = T>
struct EmbeddingBackwardArgs {
  const T* dy;         // (N, C)
  const int32_t* ids;  // (N)
  G* dtable;           // (V, C), every element written (rows no position uses get 0), unless accumulate
  int64_t positions;   // N
  int64_t vocab;       // V
  int64_t channels;    // C
  // Each used row's sum is added to dtable's row, the total rounded once; rows no position uses keep their values
  // (a tied table's gradient from another use, with no separate gradient written and added).
  bool accumulate = false;
};

namespace cpu {
template <class T> void embedding(const EmbeddingArgs<T>& args);
template <class T, class G>
void embedding_backward(const EmbeddingBackwardArgs<T, G>& args);
}  // namespace cpu

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream`. T = float, bf16 or f16 (G = T, or float). The forward copies bits (vectorised).
// The backward sorts (id, position) pairs with CUB's stable radix sort, then sums each id's dy rows in increasing
// position order in f64, in tiles of 32 sorted positions whose partials are added in order: the same bits on
// every run, and the CPU kernel's f64 result rounded to G except where a sum lies within an f64 rounding of a
// midpoint between two G values. No atomics. Scratch comes from the stream's memory pool.
namespace cuda {
template <class T> void embedding(const EmbeddingArgs<T>& args, Stream stream);
template <class T, class G>
void embedding_backward(const EmbeddingBackwardArgs<T, G>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
