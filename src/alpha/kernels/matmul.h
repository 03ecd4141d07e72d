// Matrix-product kernels: batched GEMM, c = alpha·op(a)·op(b) + beta·c, with op() a transpose given as a
// flag (no operand is ever transposed in memory) and beta so that a product can accumulate into an
// existing output (e.g. y = bias rows + x·Wᵀ in one GEMM); the bias-row broadcast that sets up that
// accumulation; and a column sum (the bias gradient, Σ over rows of dy) whose summation order is fixed,
// so its result does not depend on the thread count.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"

namespace alpha::kernels {

// Every matrix is row-major with unit stride along a row; ld* is the stride between rows (in elements)
// and stride_* the stride between consecutive matrices of the batch.
template <class T>
struct GemmArgs {
  const T* a;  // (batch, m, k), or (batch, k, m) with trans_a
  const T* b;  // (batch, k, n), or (batch, n, k) with trans_b
  T* c;        // (batch, m, n); read only when beta != 0
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  acc_t<T> alpha, beta;
};

template <class T>
struct BroadcastRowsArgs {
  const T* row;  // (cols)
  T* out;        // (rows, cols): every row set to `row`
  int64_t rows, cols;
};

template <class T>
struct ColumnSumArgs {
  const T* x;  // (rows, cols), rows ld apart
  T* out;      // (cols): out[c] = Σ_r x[r, c]
  int64_t rows, cols, ld;
};

namespace cpu {
template <class T> void gemm(const GemmArgs<T>& args);
template <class T> void broadcast_rows(const BroadcastRowsArgs<T>& args);
template <class T> void column_sum(const ColumnSumArgs<T>& args);
}  // namespace cpu

}  // namespace alpha::kernels
