// Shared by the nn and optimiser tests: small configs and random token batches.
#pragma once
#include <cstdint>
#include <vector>

#include "alpha/core/philox.h"
#include "alpha/nn/gpt_config.h"
#include "alpha/tensor/tensor.h"
#include "support/checks.h"

namespace alpha::test {

// Token ids uniform in [0, vocab) from a fresh seed (i32).
inline Tensor random_ids(Shape shape, int64_t vocab) {
  uint64_t seed = fresh_seed();
  std::vector<int32_t> ids(size_t(shape_numel(shape)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(philox_bits(seed, i) % uint32_t(vocab));
  return Tensor::from_vector(ids, std::move(shape));
}

// Bit-for-bit equality (determinism checks), reporting the first differing element.
inline ::testing::AssertionResult identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(a.shape()) << " != " << shape_str(b.shape());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i])) return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " != " << y[i];
  return ::testing::AssertionSuccess();
}

// The smallest model that still has every part: one layer, width 8, two query heads sharing one kv head.
inline nn::GPTConfig micro_config() {
  nn::GPTConfig c;
  c.n_layer = 1;
  c.n_embd = 8;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.block_size = 8;
  c.vocab_size = 16;
  return c;
}

}  // namespace alpha::test
