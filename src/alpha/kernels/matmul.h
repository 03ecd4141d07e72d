// Matrix-product kernels: batched GEMM, c = alpha·op(a)·op(b) + beta·c, with op() a transpose given as a
// flag (no operand is ever transposed in memory) and beta so that a product can accumulate into an
// existing output; the bias-row broadcast; and a column sum (the bias gradient, Σ over rows of dy) whose
// summation order is fixed, so its result does not depend on the thread count.
//
// A GEMM may also finish its product in an epilogue, so that a linear layer and its activation are one
// pass over the output (cuBLASLt's epilogues on CUDA, loops after the BLAS call on the CPU, the same
// semantics on both): a bias per output column, GELU (tanh form, as kernels/activation.h's gelu) keeping
// the pre-activation for the backward, DGELU (the product times gelu'(pre-activation): the gradient that
// flows back through a GELU into the layer before it), and bias gradients.
//
// The output may be wider than the operands (GemmArgs<T, Out>: bf16 or f16 a and b, f32 c), the product
// accumulated in f32 either way: a gradient summed over several products (chunks of rows, beta = 1 after the
// first) then stays in f32 with no widened copy of each product (cuBLASLt's A/B 16-bit, C/D 32-bit products).
#pragma once
#include <cstdint>
#include <type_traits>

#include "alpha/core/dtype.h"
#include "alpha/core/stream.h"

namespace alpha::kernels {

// What a GEMM does to its product p = alpha·op(a)·op(b) + beta·c (beta·addend with an addend) before storing it
// in c.
enum class GemmEpilogue : uint8_t {
  none,   // c = p + bias (bias optional)
  gelu,   // pre = p + bias (bias optional); c = gelu(pre); aux = pre when aux is set
  dgelu,  // c = p ⊙ gelu'(aux): p is dL/dy for y = gelu(aux); beta must be 0 and there is no bias
};

// Which bias gradient a GEMM also writes into bias_grad (a column sum: Σ over the rows of a stored matrix).
enum class GemmBiasGrad : uint8_t {
  none,
  c_columns,  // bias_grad[j] = Σ_i c[i, j] over the stored output (after the epilogue), length n; dgelu only
  a_columns,  // bias_grad[i] = Σ_l a[l, i] = Σ_l op(a)[i, l], length m; a stored transposed (trans_a),
              // epilogue none, no bias: dW = dyᵀ·x of a linear layer with its db = Σ over rows of dy
};

// Every matrix is row-major with unit stride along a row; ld* is the stride between rows (in elements)
// and stride_* the stride between consecutive matrices of the batch. Epilogues, bias and bias gradients
// need batch = 1. The fields after beta have defaults, so {a, ..., beta} is a plain GEMM.
//
// T is the operands' type, Out that of c and of the vectors that go with the output (bias, aux, bias_grad).
// Out = T, or a wider output (T = bf16 or f16, Out = float): then only a plain product, optionally with the
// bias gradient of a (check_gemm_epilogue refuses the rest).
template <class T, class Out = T>
struct GemmArgs {
  const T* a;  // (batch, m, k), or (batch, k, m) with trans_a
  const T* b;  // (batch, k, n), or (batch, n, k) with trans_b
  Out* c;      // (batch, m, n); read only when beta != 0
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  acc_t<T> alpha, beta;
  // f32 on CUDA only: the product may round its inputs to TF32 (10-bit mantissa). The CPU ignores it.
  bool allow_tf32 = false;
  const Out* bias = nullptr;  // (n): added to every row of the product before the epilogue; null: none
  GemmEpilogue epilogue = GemmEpilogue::none;
  Out* aux = nullptr;         // (m, n), rows ld_aux apart: gelu writes the pre-activation (null: not kept),
  int64_t ld_aux = 0;         // dgelu reads it
  GemmBiasGrad bias_grad_of = GemmBiasGrad::none;
  Out* bias_grad = nullptr;   // (n) for c_columns, (m) for a_columns
  // (m, n), rows ldc apart: read in place of c's values (p = alpha·op(a)·op(b) + beta·addend), so that c is only
  // written: a residual stream added by the product's GEMM into a fresh output. Needs beta != 0, batch 1, Out = T
  // and no dgelu epilogue.
  const Out* addend = nullptr;
};

template <class T>
struct BroadcastRowsArgs {
  const T* row;  // (cols)
  T* out;        // (rows, cols): every row set to `row`
  int64_t rows, cols;
};

// Out = T, or float for bf16/f16 x (the sum of a GEMM's operand as that GEMM's wider output takes it).
template <class T, class Out = T>
struct ColumnSumArgs {
  const T* x;  // (rows, cols), rows ld apart
  Out* out;    // (cols): out[c] = Σ_r x[r, c]
  int64_t rows, cols, ld;
};

// Raises ValueError naming `op` unless the epilogue fields of `args` fit together (the rules above; with a
// wider output, only the bias gradient of a): both backends call it first, so they accept exactly the same
// calls.
void check_gemm_epilogue(const char* op, int64_t batch, double beta, bool trans_a, bool has_bias, GemmEpilogue epilogue,
                         bool has_aux, int64_t ld_aux, int64_t n, GemmBiasGrad bias_grad_of, bool has_bias_grad,
                         bool has_addend, bool wider_output);
template <class T, class Out>
void check_gemm_epilogue(const char* op, const GemmArgs<T, Out>& args) {
  check_gemm_epilogue(op, args.batch, double(args.beta), args.trans_a, args.bias != nullptr, args.epilogue,
                      args.aux != nullptr, args.ld_aux, args.n, args.bias_grad_of, args.bias_grad != nullptr,
                      args.addend != nullptr, !std::is_same_v<T, Out>);
}

// T = float or double; gemm and column_sum also take bf16 or f16 inputs with a float output, gemm widening
// its operands to f32 (exactly) for an f32 product, as the CUDA kernel computes it.
namespace cpu {
template <class T, class Out> void gemm(const GemmArgs<T, Out>& args);
template <class T> void broadcast_rows(const BroadcastRowsArgs<T>& args);
template <class T, class Out> void column_sum(const ColumnSumArgs<T, Out>& args);
}  // namespace cpu

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream` (Stream{}: the current device's default stream). T = float, bf16 or
// f16 (gemm and column_sum also with a float output for bf16/f16 inputs), accumulating in f32
// (CUBLAS_COMPUTE_32F; TF32 only with allow_tf32), the epilogue in f32 too, each output rounded once to its
// type. gemm runs on cuBLASLt, with its fused epilogue where cuBLASLt offers one for the call, else a plain
// cuBLASLt product into f32 scratch and one epilogue kernel (same semantics).
// column_sum reduces in a fixed order (chunks of rows, then the chunks in order): deterministic, no atomics.
namespace cuda {
template <class T, class Out> void gemm(const GemmArgs<T, Out>& args, Stream stream);
template <class T> void broadcast_rows(const BroadcastRowsArgs<T>& args, Stream stream);
template <class T, class Out> void column_sum(const ColumnSumArgs<T, Out>& args, Stream stream);

// For the harness: false makes every GEMM with an epilogue, bias or bias gradient take the unfused path
// (plain product, then the epilogue kernel), so both paths can be checked. Process-wide; default true.
void set_gemm_fused_epilogues(bool enabled);
bool gemm_fused_epilogues();
}  // namespace cuda
#endif

}  // namespace alpha::kernels
