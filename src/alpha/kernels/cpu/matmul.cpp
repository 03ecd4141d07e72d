// CPU matrix-product kernels. GEMM goes to OpenBLAS (row-major cblas_?gemm, transposes as flags, one call
// per matrix of the batch; OpenBLAS threads each call itself). The column sum uses the fixed-order row
// reduction (row_reduce.h), so the bias gradient is bit-identical for any thread count.
#include "alpha/kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/kernels/cpu/row_reduce.h"

namespace alpha::kernels::cpu {

namespace {

// cblas takes 32-bit sizes; larger ones would wrap silently.
blasint blas_size(int64_t value, const char* arg) {
  if (value < 0 || value > INT_MAX)
    raise<BackendError>("gemm", arg, "a size in [0, " + std::to_string(INT_MAX) + "] for cblas",
                        std::to_string(value));
  return blasint(value);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, float alpha,
               const float* a, blasint lda, const float* b, blasint ldb, float beta, float* c, blasint ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, double alpha,
               const double* a, blasint lda, const double* b, blasint ldb, double beta, double* c, blasint ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <class T>
void gemm(const GemmArgs<T>& args) {
  if (args.m == 0 || args.n == 0) return;
  blasint m = blas_size(args.m, "m"), n = blas_size(args.n, "n"), k = blas_size(args.k, "k");
  // BLAS rejects a leading dimension below 1, which an empty (k = 0) operand's row stride can be.
  blasint lda = blas_size(std::max<int64_t>(args.lda, 1), "lda");
  blasint ldb = blas_size(std::max<int64_t>(args.ldb, 1), "ldb");
  blasint ldc = blas_size(std::max<int64_t>(args.ldc, 1), "ldc");
  CBLAS_TRANSPOSE ta = args.trans_a ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = args.trans_b ? CblasTrans : CblasNoTrans;
  for (int64_t i = 0; i < args.batch; ++i)
    blas_gemm(ta, tb, m, n, k, args.alpha, args.a + i * args.stride_a, lda, args.b + i * args.stride_b, ldb,
              args.beta, args.c + i * args.stride_c, ldc);
}

template <class T>
void broadcast_rows(const BroadcastRowsArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < args.rows; ++r) std::copy_n(args.row, args.cols, args.out + r * args.cols);
}

template <class T>
void column_sum(const ColumnSumArgs<T>& args) {
  using A = acc_t<T>;
  std::vector<A> total(size_t(args.cols));
  reduce_rows(args.rows, args.cols, total.data(), [&](int64_t r, A* acc) {
    const T* row = args.x + r * args.ld;
    for (int64_t c = 0; c < args.cols; ++c) acc[c] += A(row[c]);
  });
  for (int64_t c = 0; c < args.cols; ++c) args.out[c] = T(total[size_t(c)]);
}

#define ALPHA_INSTANTIATE(T)                                         \
  template void gemm<T>(const GemmArgs<T>&);                         \
  template void broadcast_rows<T>(const BroadcastRowsArgs<T>&);      \
  template void column_sum<T>(const ColumnSumArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
