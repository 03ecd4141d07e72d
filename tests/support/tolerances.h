// The one table of test tolerances. A comparison passes when, for every element,
// |got − want| <= abs + rel·|want|. Rows are looked up by (check, dtype); a missing row is a test error,
// so every tolerance in the suite is visible here.
//
// Why these numbers: f32 kernels against f64 loops differ by accumulated f32 rounding, about
// √K·2⁻²⁴ relative for a K-term dot product, well under 1e-5 at the sizes tested; transcendental ops
// (tanh, exp) add a few ulps. f64 kernels against f64 loops differ only in summation order (1e-12).
// Finite differences in f64 with central steps h = 1e-6 carry O(h²) truncation plus ~1e-10 rounding.
#pragma once
#include <string_view>

#include "alpha/core/dtype.h"

namespace alpha::test {

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
};

// Throws std::out_of_range for a missing row.
Tolerance tolerance(std::string_view check, DType dtype);

}  // namespace alpha::test
