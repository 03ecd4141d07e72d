// The one table of tolerances, for the test suite and the kernel correctness harness (`alpha check
// kernels`). A comparison passes when, for every element, |got − want| <= abs + rel·|want|. Rows are
// looked up by (check, dtype); a missing row is an error, so every tolerance in the project is visible here.
//
// Rows named after a kernel family compare a CPU kernel in f32 or f64 with a naive f64 loop (the tests).
// Rows named "cuda.<family>" compare a CUDA kernel, in the dtype it ran in, with the CPU kernel in f64 on
// the same (already rounded) inputs (the harness). f32 rows there are at most 1e-4.
// bf16 and f16 inputs are exact in both computations, and the CUDA kernels compute in f32, so what they
// add is one rounding of each output to the storage type, at most half an ulp: 2⁻⁹ ≈ 2.0e-3 relative for
// bf16 (8 significant bits), 2⁻¹² ≈ 2.4e-4 for f16 (11 bits). Their rows allow about four such roundings
// relative (kernels that round an intermediate, such as a GEMM's output feeding an epilogue, spend some),
// plus an absolute floor for outputs that are small differences of large terms (layernorm's dx, a GEMM
// whose terms cancel), where one ulp of the terms is the natural unit.
//
// Why these numbers: f32 kernels against f64 loops differ by accumulated f32 rounding, about
// √K·2⁻²⁴ relative for a K-term dot product, well under 1e-5 at the sizes tested; transcendental ops
// (tanh, exp) add a few ulps. f64 kernels against f64 loops differ only in summation order (1e-12).
// Finite differences in f64 with central steps h = 1e-6 carry O(h²) truncation plus ~1e-10 rounding.
#pragma once
#include <string_view>

#include "alpha/core/dtype.h"

namespace alpha::check {

struct Tolerance {
  double abs;
  double rel;
};

struct ToleranceRow {
  std::string_view check;
  DType dtype;
  Tolerance tol;
};

inline constexpr ToleranceRow kTolerances[] = {
    // Forward and backward kernels against naive f64 loops.
    {"elementwise", DType::f32, {1e-6, 1e-6}},
    {"elementwise", DType::f64, {1e-13, 1e-13}},
    // sum: abs is per unit of Σ|x| (the test scales it), since cancellation leaves the rounding of the
    // partial sums in a small result; f32 blocks accumulate n·2⁻²⁴ worst case, √n typical.
    {"sum", DType::f32, {1e-6, 1e-5}},
    {"sum", DType::f64, {1e-14, 1e-12}},
    // f32 matmul: K up to 256 terms of magnitude ~1 that may cancel; f32 rounding of the partial sums
    // then leaves ~√K·2⁻²⁴·K ≈ 1e-5 absolute worst case in the result, hence 5e-5.
    {"matmul", DType::f32, {5e-5, 1e-5}},
    {"matmul", DType::f64, {1e-11, 1e-11}},
    {"layernorm", DType::f32, {1e-5, 1e-5}},
    {"layernorm", DType::f64, {1e-11, 1e-11}},
    {"activation", DType::f32, {1e-6, 1e-5}},
    {"activation", DType::f64, {1e-12, 1e-12}},
    {"softmax", DType::f32, {1e-6, 1e-5}},
    {"softmax", DType::f64, {1e-12, 1e-12}},
    {"embedding", DType::f32, {1e-6, 1e-6}},
    {"embedding", DType::f64, {1e-12, 1e-12}},
    {"cross_entropy", DType::f32, {1e-5, 1e-5}},
    {"cross_entropy", DType::f64, {1e-11, 1e-11}},
    {"dropout", DType::f32, {1e-6, 1e-6}},
    {"dropout", DType::f64, {1e-13, 1e-13}},
    {"adamw", DType::f32, {1e-6, 1e-5}},
    {"adamw", DType::f64, {1e-12, 1e-12}},
    {"grad_norm", DType::f32, {1e-5, 1e-5}},
    {"grad_norm", DType::f64, {1e-11, 1e-11}},
    {"attention", DType::f32, {2e-5, 1e-4}},
    {"attention", DType::f64, {1e-11, 1e-10}},
    // Analytic gradients (f64) against central finite differences.
    {"gradcheck", DType::f64, {1e-6, 1e-5}},

    // CUDA kernels against the CPU kernel in f64 (the harness). Element-wise add, mul, scale and axpy round
    // exactly as the CPU does (one f32 rounding per operation, then one to T): any difference is a bug.
    {"cuda.elementwise", DType::f32, {1e-6, 1e-6}},
    {"cuda.elementwise", DType::bf16, {1e-6, 2e-3}},
    {"cuda.elementwise", DType::f16, {1e-6, 2.5e-4}},
    // sum: f32 partials in a different tree than the f64 reference; abs is per unit of Σ|x| (see "sum").
    {"cuda.sum", DType::f32, {1e-6, 1e-5}},
    {"cuda.sum", DType::bf16, {1e-6, 1e-5}},
    {"cuda.sum", DType::f16, {1e-6, 1e-5}},
    // The unit roundoff of a rounding to bf16 (8 significant bits) is 2⁻⁸ ≈ 3.9e-3 relative, to f16 (11 bits)
    // 2⁻¹¹ ≈ 4.9e-4: the rows below that round their outputs once allow that much, plus the f32 work.
    // dropout, residual_dropout_add: equal to the CPU kernel in f32 bit for bit (checked); against f64 that
    // is one f32 rounding of scale·x and one of the sum, 2⁻²⁴ of terms up to ~2.5 (abs), then for bf16/f16
    // one rounding to T.
    {"cuda.dropout", DType::f32, {1e-6, 1e-6}},
    {"cuda.dropout", DType::bf16, {1e-6, 4e-3}},
    {"cuda.dropout", DType::f16, {1e-6, 5e-4}},
    // adamw: equal to the CPU kernel in f32 bit for bit (checked), so the f32 row is the CPU's "adamw"
    // (f32 rounding of m's and param's sums of terms ~1: abs 1e-6); bf16/f16 add one rounding of each output.
    // Mixed precision compares the f32 master with the f32 row and the compute copy with its dtype's row.
    {"cuda.adamw", DType::f32, {1e-6, 1e-5}},
    {"cuda.adamw", DType::bf16, {1e-6, 4e-3}},
    {"cuda.adamw", DType::f16, {1e-6, 5e-4}},
    // sum_squares and the global norm (f64 results for every input dtype, rows by input dtype): squares are
    // exact in f64; the sums are added in another order than the CPU's, n·2⁻⁵³ relative at worst
    // (1e-10 for n = 10⁶), ~√n·2⁻⁵³ typically.
    {"cuda.grad_norm", DType::f32, {1e-12, 1e-10}},
    {"cuda.grad_norm", DType::bf16, {1e-12, 1e-10}},
    {"cuda.grad_norm", DType::f16, {1e-12, 1e-10}},
    // Materialising attention: f32 accumulation throughout (dot products over D ≤ 128, softmax sums over
    // Tk ≤ 512, gradient sums over group·Tq ≤ 512 terms), a few ulps of expf/tanhf, as the CPU's f32
    // "attention" row; row_max and row_sum are f32 for every dtype and use the f32 row. bf16/f16 inputs
    // are exact in both computations and P stays f32, so their outputs add one rounding to T (2⁻⁸, 2⁻¹¹)
    // over the f32 error, which cancellation in dq/dk (sums of terms of both signs) makes absolute: 2e-5.
    {"cuda.attention", DType::f32, {2e-5, 1e-4}},
    {"cuda.attention", DType::bf16, {2e-5, 5e-3}},
    {"cuda.attention", DType::f16, {2e-5, 1e-3}},
};

// Throws std::out_of_range for a missing row.
Tolerance tolerance(std::string_view check, DType dtype);

}  // namespace alpha::check
