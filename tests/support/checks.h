// Test helpers shared by the kernel and autograd suites: fresh random inputs, poisoned outputs,
// element-wise comparison against a reference with the tolerance table, finite-difference gradient
// checks and typed-error expectations.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "alpha/autograd/variable.h"
#include "alpha/tensor/tensor.h"
#include "support/tolerances.h"

namespace alpha::test {

// Element counts every op is tested at, and odd shapes beside them.
inline const std::vector<int64_t> kSizes = {1, 64, 4096, 65536};

// Fresh uniform values in [lo, hi) from a per-call seed (never zeros, never the same twice).
Tensor random(Shape shape, DType dtype = DType::f32, double lo = -1.0, double hi = 1.0);
uint64_t fresh_seed();

// A tensor filled with NaN, to pass as an output buffer: a kernel that skips an element leaves a NaN.
Tensor poisoned(Shape shape, DType dtype);

// Compares every element (as f64) of got against want with the tolerance row (check, got's dtype).
// Reports the worst element's index, values, and max_abs/max_rel errors. NaN or inf mismatches fail.
::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, std::string_view check);
::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, Tolerance tol);

// The tensor's elements as raw bytes, row-major (a device tensor is copied to the host first).
std::string tensor_bytes(const Tensor& t);
// Same dtype, same shape and the same bytes (either tensor on any device): bit-exact results.
::testing::AssertionResult bit_equal(const Tensor& got, const Tensor& want);

// Checks autograd gradients of f (inputs must be f64 and require grad) against central finite
// differences of L = Σ f(inputs) ∘ W with a fixed random W, at step h.
::testing::AssertionResult gradcheck(const std::function<autograd::Variable(const std::vector<autograd::Variable>&)>& f,
                                     const std::vector<Tensor>& inputs, double h = 1e-6);

}  // namespace alpha::test

// Expects `statement` to throw `error_type` with a message containing every one of the given fragments
// (the op name, the argument name, ...).
#define EXPECT_ALPHA_ERROR(statement, error_type, ...)                                               \
  do {                                                                                               \
    try {                                                                                            \
      statement;                                                                                     \
      ADD_FAILURE() << "expected " #error_type " from " #statement;                                  \
    } catch (const error_type& e) {                                                                  \
      for (const char* fragment : {__VA_ARGS__})                                                     \
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)                           \
            << "message '" << e.what() << "' lacks '" << fragment << "'";                            \
    }                                                                                                \
  } while (0)
