// CPU matrix-product kernels. GEMM goes to OpenBLAS (row-major cblas_?gemm, transposes as flags, one call
// per matrix of the batch; OpenBLAS threads each call itself). The column sum uses the fixed-order row
// reduction (row_reduce.h), so the bias gradient is bit-identical for any thread count.
//
// Epilogues are loops after the BLAS call that reuse the activation kernels (kernels/activation.h), so a
// fused linear+GELU gives the same bits as a linear followed by gelu, and a DGELU epilogue the same as
// gelu_backward of the product. A bias with beta = 0 is broadcast into c and the product accumulated onto
// it (beta = 1), as the linear op has always done; with beta != 0 it is added after the product. An addend is
// copied into c first and the product accumulated onto it (so c = beta·addend + product, then the bias). Bias
// gradients are column sums (column_sum), the same bits as a separate column_sum call.
//
// bf16/f16 operands with an f32 output: the operands are widened to f32 (exactly) and multiplied by the f32
// kernel, so the product accumulates in f32 as on CUDA (CUBLAS_COMPUTE_32F); column_sum of bf16/f16 into f32
// sums in f32 as it does for f32.
#include "alpha/kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/kernels/activation.h"
#include "alpha/kernels/cpu/row_reduce.h"

namespace alpha::kernels {

void check_gemm_epilogue(const char* op, int64_t batch, double beta, bool trans_a, bool has_bias, GemmEpilogue epilogue,
                         bool has_aux, int64_t ld_aux, int64_t n, GemmBiasGrad bias_grad_of, bool has_bias_grad,
                         bool has_addend, bool wider_output) {
  if (wider_output && (has_bias || has_addend || epilogue != GemmEpilogue::none))
    raise<ValueError>(op,
                      has_bias     ? "bias"
                      : has_addend ? "addend"
                                   : "epilogue",
                      "none with an output wider than the operands (only the bias gradient of a)",
                      has_bias || has_addend ? "a pointer" : "an epilogue");
  const bool extras = has_bias || has_addend || epilogue != GemmEpilogue::none || bias_grad_of != GemmBiasGrad::none;
  if (extras && batch != 1)
    raise<ValueError>(op, "batch", "1 with a bias, an addend, an epilogue or a bias gradient", std::to_string(batch));
  if (has_addend && beta == 0.0) raise<ValueError>(op, "beta", "nonzero with an addend (which it scales)", "0");
  if ((bias_grad_of != GemmBiasGrad::none) != has_bias_grad)
    raise<ValueError>(op, "bias_grad", "a pointer exactly when bias_grad_of is not none",
                      has_bias_grad ? "a pointer without bias_grad_of" : "no pointer");
  if (has_aux && epilogue == GemmEpilogue::none)
    raise<ValueError>(op, "aux", "no pointer without a gelu or dgelu epilogue", "a pointer");
  if (has_aux && ld_aux < n)
    raise<ValueError>(op, "ld_aux", "at least n = " + std::to_string(n), std::to_string(ld_aux));
  if (epilogue == GemmEpilogue::dgelu) {
    if (!has_aux) raise<ValueError>(op, "aux", "the pre-activation for a dgelu epilogue", "no pointer");
    if (beta != 0.0) raise<ValueError>(op, "beta", "0 with a dgelu epilogue", std::to_string(beta));
    if (has_bias) raise<ValueError>(op, "bias", "no bias with a dgelu epilogue", "a pointer");
  }
  if (bias_grad_of == GemmBiasGrad::c_columns && epilogue != GemmEpilogue::dgelu)
    raise<ValueError>(op, "bias_grad_of", "c_columns only with a dgelu epilogue", "another epilogue");
  if (bias_grad_of == GemmBiasGrad::a_columns && (!trans_a || epilogue != GemmEpilogue::none || has_bias))
    raise<ValueError>(op, "bias_grad_of", "a_columns only with trans_a, no epilogue and no bias",
                      trans_a ? "an epilogue or a bias" : "trans_a = false");
}

namespace cpu {

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

// Calls fn(offset, count) over the (rows, cols) matrix with rows `ld` apart, as one run when the rows are
// packed, else one run per row. Element-wise kernels then see contiguous runs.
template <class Fn>
void for_each_run(int64_t rows, int64_t cols, int64_t ld, Fn&& fn) {
  if (ld == cols || rows == 1) {
    fn(int64_t(0), rows * cols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) fn(r * ld, cols);
}

// The epilogue over c (m, n) after the product: bias already in c; gelu or dgelu.
template <class T>
void apply_epilogue(const GemmArgs<T>& args) {
  const int64_t m = args.m, n = args.n;
  if (args.epilogue == GemmEpilogue::gelu) {
    if (args.aux) {  // aux keeps the pre-activation; gelu reads it back into c
      for (int64_t r = 0; r < m; ++r) std::copy_n(args.c + r * args.ldc, n, args.aux + r * args.ld_aux);
      if (args.ldc == args.ld_aux) {
        for_each_run(m, n, args.ldc, [&](int64_t at, int64_t count) {
          gelu(GeluArgs<T>{args.aux + at, args.c + at, count});
        });
      } else {
        for (int64_t r = 0; r < m; ++r) gelu(GeluArgs<T>{args.aux + r * args.ld_aux, args.c + r * args.ldc, n});
      }
    } else {
      for_each_run(m, n, args.ldc, [&](int64_t at, int64_t count) { gelu(GeluArgs<T>{args.c + at, args.c + at, count}); });
    }
  } else if (args.epilogue == GemmEpilogue::dgelu) {
    // gelu_backward reads dy[i] and x[i] before writing dx[i]: the product may be dy and dx at once.
    if (args.ldc == args.ld_aux) {
      for_each_run(m, n, args.ldc, [&](int64_t at, int64_t count) {
        gelu_backward(GeluBackwardArgs<T>{args.c + at, args.aux + at, args.c + at, count});
      });
    } else {
      for (int64_t r = 0; r < m; ++r) {
        T* row = args.c + r * args.ldc;
        gelu_backward(GeluBackwardArgs<T>{row, args.aux + r * args.ld_aux, row, n});
      }
    }
  }
}

// The elements of `batch` row-major (rows, cols) matrices, rows ld apart and matrices stride apart, widened to
// f32 at the same offsets (the padding between them too, never read). An empty matrix gives one unread
// element, so that its pointer is not null (the BLAS call still offsets it per matrix of the batch).
template <class T>
std::vector<float> widened(const T* p, int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
  const bool empty = batch == 0 || rows == 0 || cols == 0;
  std::vector<float> out(empty ? 1 : size_t((batch - 1) * stride + (rows - 1) * ld + cols));
  if (!empty)
    for (size_t i = 0; i < out.size(); ++i) out[i] = float(p[i]);
  return out;
}

// The GEMM with every buffer in T (checked): the BLAS call and the loops after it.
template <class T>
void gemm_one_type(const GemmArgs<T>& args) {
  // The bias gradient of a reads only a, so it is there even when c is empty.
  if (args.bias_grad_of == GemmBiasGrad::a_columns)
    column_sum(ColumnSumArgs<T>{args.a, args.bias_grad, args.k, args.m, args.lda});
  if (args.m > 0 && args.n > 0) {
    blasint m = blas_size(args.m, "m"), n = blas_size(args.n, "n"), k = blas_size(args.k, "k");
    // BLAS rejects a leading dimension below 1, which an empty (k = 0) operand's row stride can be.
    blasint lda = blas_size(std::max<int64_t>(args.lda, 1), "lda");
    blasint ldb = blas_size(std::max<int64_t>(args.ldb, 1), "ldb");
    blasint ldc = blas_size(std::max<int64_t>(args.ldc, 1), "ldc");
    CBLAS_TRANSPOSE ta = args.trans_a ? CblasTrans : CblasNoTrans;
    CBLAS_TRANSPOSE tb = args.trans_b ? CblasTrans : CblasNoTrans;
    acc_t<T> beta = args.beta;
    if (args.addend && args.addend != args.c)  // c takes the addend's values, then the product accumulates onto them
      for (int64_t r = 0; r < args.m; ++r) std::copy_n(args.addend + r * args.ldc, args.n, args.c + r * args.ldc);
    const bool bias_first = args.bias && beta == acc_t<T>(0);
    if (bias_first) {  // c = bias rows, then c += alpha·op(a)·op(b)
      for (int64_t r = 0; r < args.m; ++r) std::copy_n(args.bias, args.n, args.c + r * args.ldc);
      beta = acc_t<T>(1);
    }
    for (int64_t i = 0; i < args.batch; ++i)
      blas_gemm(ta, tb, m, n, k, args.alpha, args.a + i * args.stride_a, lda, args.b + i * args.stride_b, ldb, beta,
                args.c + i * args.stride_c, ldc);
    if (args.bias && !bias_first) {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < args.m; ++r) {
        T* row = args.c + r * args.ldc;
        for (int64_t j = 0; j < args.n; ++j) row[j] += args.bias[j];
      }
    }
    apply_epilogue(args);
  }
  if (args.bias_grad_of == GemmBiasGrad::c_columns)
    column_sum(ColumnSumArgs<T>{args.c, args.bias_grad, args.m, args.n, args.ldc});
}

}  // namespace

template <class T, class Out>
void gemm(const GemmArgs<T, Out>& args) {
  check_gemm_epilogue("gemm", args);
  if constexpr (std::is_same_v<T, Out>) {
    gemm_one_type(args);
  } else {  // bf16/f16 operands, f32 output (a plain product, or with a's bias gradient): the f32 product
    const std::vector<float> a = widened(args.a, args.batch, args.trans_a ? args.k : args.m,
                                         args.trans_a ? args.m : args.k, args.lda, args.stride_a);
    const std::vector<float> b = widened(args.b, args.batch, args.trans_b ? args.n : args.k,
                                         args.trans_b ? args.k : args.n, args.ldb, args.stride_b);
    GemmArgs<float> wide{a.data(), b.data(), args.c, args.batch, args.m, args.n, args.k, args.trans_a, args.trans_b,
                         args.lda, args.ldb, args.ldc, args.stride_a, args.stride_b, args.stride_c, args.alpha,
                         args.beta};
    wide.bias_grad_of = args.bias_grad_of;
    wide.bias_grad = args.bias_grad;
    gemm_one_type(wide);
  }
}

template <class T>
void broadcast_rows(const BroadcastRowsArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < args.rows; ++r) std::copy_n(args.row, args.cols, args.out + r * args.cols);
}

template <class T, class Out>
void column_sum(const ColumnSumArgs<T, Out>& args) {
  using A = acc_t<T>;
  std::vector<A> total(size_t(args.cols));
  reduce_rows(args.rows, args.cols, total.data(), [&](int64_t r, A* acc) {
    const T* row = args.x + r * args.ld;
    for (int64_t c = 0; c < args.cols; ++c) acc[c] += A(row[c]);
  });
  for (int64_t c = 0; c < args.cols; ++c) args.out[c] = Out(total[size_t(c)]);
}

#define ALPHA_INSTANTIATE(T)                                         \
  template void gemm<T, T>(const GemmArgs<T, T>&);                   \
  template void broadcast_rows<T>(const BroadcastRowsArgs<T>&);      \
  template void column_sum<T, T>(const ColumnSumArgs<T, T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE
#define ALPHA_INSTANTIATE_WIDER_OUTPUT(T)                           \
  template void gemm<T, float>(const GemmArgs<T, float>&);          \
  template void column_sum<T, float>(const ColumnSumArgs<T, float>&);
ALPHA_INSTANTIATE_WIDER_OUTPUT(bf16)
ALPHA_INSTANTIATE_WIDER_OUTPUT(f16)
#undef ALPHA_INSTANTIATE_WIDER_OUTPUT

}  // namespace cpu

}  // namespace alpha::kernels
