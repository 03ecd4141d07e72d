#include "train/train_test_util.h"

#include <algorithm>
#include <random>

#include "support/checks.h"

namespace alpha::test {

Tensor random_bits(Shape shape, DType dtype) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  std::mt19937_64 gen(fresh_seed());
  auto* p = static_cast<unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(gen());
  return t;
}

std::string tensor_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

::testing::AssertionResult bit_equal(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.describe() << " != " << want.describe();
  std::string g = tensor_bytes(got), w = tensor_bytes(want);
  auto [gi, wi] = std::mismatch(g.begin(), g.end(), w.begin());
  if (gi != g.end())
    return ::testing::AssertionFailure() << got.describe() << " differs at byte " << (gi - g.begin());
  return ::testing::AssertionSuccess();
}

}  // namespace alpha::test
