// Element-wise kernels over contiguous buffers: out = a + b, out = a * b, out = alpha * x,
// y += alpha * x (in-place accumulation, used for gradient accumulation), sum, and sum_rows (the rows of a
// matrix added in row order, then scaled: the data-parallel reduction's rank-order sum).
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

// out[i] = (rows[0][i] + rows[1][i] + ... + rows[rows_count - 1][i]) * scale: added in row order, one rounding per
// add (as axpy's accumulation rounds), then one multiplication.
template <class T>
struct SumRowsArgs {
  const T* rows;  // (rows_count, n), row-major
  T* out;         // (n), not overlapping rows
  int64_t rows_count;
  int64_t n;
  acc_t<T> scale;
};

inline constexpr int64_t kSumBlock = 4096;

namespace cpu {
template <class T> void add(const BinaryArgs<T>& args);
template <class T> void mul(const BinaryArgs<T>& args);
template <class T> void scale(const ScaleArgs<T>& args);
template <class T> void axpy(const AxpyArgs<T>& args);
template <class T> void sum(const SumArgs<T>& args);
template <class T>
void sum_rows(const SumRowsArgs<T>& args);
}  // namespace cpu

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream` (Stream{}: the current device's default stream). T = float, bf16 or
// f16 (computing in f32, rounding once to T); add, mul, scale, axpy and sum_rows round exactly as the CPU kernels do.
// sum reduces in a fixed order (chunks of kSumBlock, then one final block), so it is deterministic too.
namespace cuda {
template <class T> void add(const BinaryArgs<T>& args, Stream stream);
template <class T> void mul(const BinaryArgs<T>& args, Stream stream);
template <class T> void scale(const ScaleArgs<T>& args, Stream stream);
template <class T> void axpy(const AxpyArgs<T>& args, Stream stream);
template <class T> void sum(const SumArgs<T>& args, Stream stream);
// sum_rows adds in f32 (bf16/f16 rows: rounded once, to T, after the scaling), bit for bit the CPU's for f32.
template <class T>
void sum_rows(const SumRowsArgs<T>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
