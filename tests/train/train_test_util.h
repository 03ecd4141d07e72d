// Helpers for the checkpoint I/O suites: tensors of random bits (bit-exact comparison: support/checks.h). Scratch
// directories and raw file access come from core/file_test_util.h.
#pragma once
#include <string>

#include <gtest/gtest.h>

#include "alpha/tensor/tensor.h"
#include "core/file_test_util.h"
#include "support/checks.h"

namespace alpha::test {

// Every byte random: for float dtypes this includes NaNs with payloads, infinities, subnormals and -0,
// which only a bit-exact path preserves.
Tensor random_bits(Shape shape, DType dtype);



}  // namespace alpha::test
