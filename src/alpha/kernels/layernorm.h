// Layer normalisation over the last dimension: y = (x − mean)·rstd·weight + bias, rstd = 1/√(var + eps).
// The forward reads each row once for its statistics (Welford's update: no catastrophic cancellation of
// E[x²] − E[x]²) and saves mean and rstd per row so the backward need not recompute them.
// The backward fuses dx (per row) with the weight and bias gradients (sums over rows), reading dy and x
// once; the sums over rows use a fixed order, so they do not depend on the thread count, and are written in the
// accumulation dtype (f32 for bf16/f16): f32 master parameters take them as they are.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"
#include "alpha/core/stream.h"

namespace alpha::kernels {

template <class T>
struct LayerNormArgs {
  const T* x;       // (rows, cols)
  const T* weight;  // (cols)
  const T* bias;    // (cols), or nullptr for none
  T* y;             // (rows, cols)
  acc_t<T>* mean;   // (rows)
  acc_t<T>* rstd;   // (rows)
  int64_t rows, cols;
  acc_t<T> eps;
};

template <class T>
struct LayerNormBackwardArgs {
  const T* dy;            // (rows, cols)
  const T* x;             // (rows, cols)
  const T* weight;        // (cols)
  const acc_t<T>* mean;   // (rows), from the forward
  const acc_t<T>* rstd;   // (rows), from the forward
  T* dx;                  // (rows, cols), or nullptr when not wanted
  bool accumulate_dx;     // dx += the gradient (one rounding of the sum) instead of dx = it
  acc_t<T>* dweight;      // (cols), or nullptr when not wanted: the sums, unrounded to T
  acc_t<T>* dbias;        // (cols), or nullptr when not wanted: the sums, unrounded to T
  int64_t rows, cols;
};

namespace cpu {
template <class T> void layernorm(const LayerNormArgs<T>& args);
template <class T> void layernorm_backward(const LayerNormBackwardArgs<T>& args);
}  // namespace cpu

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream`. T = float, bf16 or f16, computing in f32 (acc_t<T> = float). The
// forward is one kernel (a warp or a block per row, the row held in registers, two-pass statistics). The
// backward is one kernel for dx and per-team partial sums of dweight and dbias, and, when either is wanted,
// a second small kernel adding the partials in a fixed order: deterministic, no atomics.
namespace cuda {
template <class T> void layernorm(const LayerNormArgs<T>& args, Stream stream);
template <class T> void layernorm_backward(const LayerNormBackwardArgs<T>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
