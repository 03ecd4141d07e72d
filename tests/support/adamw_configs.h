// AdamW configurations for the optimiser tests that step lists of tensors (CPU and CUDA).
#pragma once
#include <cstdint>
#include <vector>

#include "alpha/ops/optim.h"

namespace alpha::test {

// Per-tensor configs that differ in every scalar, so that an update with another tensor's config shows.
inline std::vector<ops::AdamWConfig> list_configs(size_t count) {
  std::vector<ops::AdamWConfig> configs;
  for (size_t k = 0; k < count; ++k)
    configs.push_back({1e-2 * double(1 + k % 3), 0.9 - 0.01 * double(k % 2), 0.95 + 0.01 * double(k % 4), 1e-8,
                       0.05 * double(k % 5), int64_t(3 + k % 7)});
  return configs;
}

}  // namespace alpha::test
