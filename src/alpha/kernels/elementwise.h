// Element-wise kernels over contiguous buffers: out = a + b, out = a * b, out = alpha * x,
// y += alpha * x (in-place accumulation, used for gradient accumulation), and sum.
// sum reduces in a fixed tree (blocks of kSumBlock, then pairwise) so its result does not depend on
// the number of threads: the same inputs give the same bits on every run.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"
#include "alpha/core/stream.h"

namespace alpha::kernels {

template <class T>
struct BinaryArgs {
  const T* a;  // (n)
  const T* b;  // (n)
  T* out;      // (n), may alias a or b
  int64_t n;
};

template <class T>
struct ScaleArgs {
  const T* x;  // (n)
  T* out;      // (n), may alias x
  acc_t<T> alpha;
  int64_t n;
};

template <class T>
struct AxpyArgs {
  T* y;        // (n), updated in place
  const T* x;  // (n)
  acc_t<T> alpha;
  int64_t n;
};

template <class T>
struct SumArgs {
  const T* x;      // (n)
  acc_t<T>* out;   // (1)
  int64_t n;
};

inline constexpr int64_t kSumBlock = 4096;

namespace cpu {
template <class T> void add(const BinaryArgs<T>& args);
template <class T> void mul(const BinaryArgs<T>& args);
template <class T> void scale(const ScaleArgs<T>& args);
template <class T> void axpy(const AxpyArgs<T>& args);
template <class T> void sum(const SumArgs<T>& args);
}  // namespace cpu

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream` (Stream{}: the current device's default stream). T = float, bf16 or
// f16 (computing in f32, rounding once to T); add, mul, scale and axpy round exactly as the CPU kernels do.
// sum reduces in a fixed order (chunks of kSumBlock, then one final block), so it is deterministic too.
namespace cuda {
template <class T> void add(const BinaryArgs<T>& args, Stream stream);
template <class T> void mul(const BinaryArgs<T>& args, Stream stream);
template <class T> void scale(const ScaleArgs<T>& args, Stream stream);
template <class T> void axpy(const AxpyArgs<T>& args, Stream stream);
template <class T> void sum(const SumArgs<T>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
