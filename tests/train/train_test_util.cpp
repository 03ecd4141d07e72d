#include "train/train_test_util.h"

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

}  // namespace alpha::test
