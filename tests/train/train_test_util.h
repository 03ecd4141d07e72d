// Helpers for the checkpoint I/O suites: tensors of random bits and bit-exact comparison. Scratch
// directories and raw file access come from core/file_test_util.h.
#pragma once
#include <string>

#include <gtest/gtest.h>

#include "alpha/tensor/tensor.h"
#include "core/file_test_util.h"

namespace alpha::test {

// Every byte random: for float dtypes this includes NaNs with payloads, infinities, subnormals and -0,
// which only a bit-exact path preserves.
Tensor random_bits(Shape shape, DType dtype);

// The tensor's elements as raw bytes, row-major.
std::string tensor_bytes(const Tensor& t);

// Same dtype, same shape and the same bytes.
::testing::AssertionResult bit_equal(const Tensor& got, const Tensor& want);

}  // namespace alpha::test
