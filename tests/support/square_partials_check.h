// The split sum of squares (ops::square_partials, ops::sum_partials) against ops::sums_of_squares' slot of the
// whole tensor, bit for bit, on any device: every chunk's partial computed in three ranges of the chunks (one of
// them empty for a tensor of one or two chunks) into a poisoned buffer, the total into a poisoned slot. Sizes
// around the device's chunk and an odd one past many chunks.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "alpha/ops/optim.h"
#include "support/checks.h"

namespace alpha::test {

inline void expect_square_partials_give_the_sum_of_squares(Device device, DType dtype) {
  const int64_t chunk = ops::squares_chunk_numel(device);
  for (int64_t n : {int64_t(1), chunk - 1, chunk, chunk + 1, 2 * chunk, 7 * chunk + 13, 61 * chunk}) {
    SCOPED_TRACE(std::to_string(n) + " elements of " + std::to_string(chunk) + " a chunk");
    const Tensor x = random({n}, DType::f32, -3, 3).to(device).to(dtype);
    const Tensor want = ops::sums_of_squares({x});
    const int64_t chunks = (n + chunk - 1) / chunk;
    Tensor partials = poisoned({chunks}, DType::f64).to(device);
    for (const auto& [first, last] : std::vector<std::pair<int64_t, int64_t>>{
             {0, chunks / 3}, {chunks / 3, 2 * chunks / 3}, {2 * chunks / 3, chunks}}) {
      Tensor range = partials.slice(0, first, last);
      ops::square_partials(x, first, range);
    }
    Tensor slot = poisoned({1}, DType::f64).to(device);
    ops::sum_partials(partials, slot);
    EXPECT_TRUE(bit_equal(slot, want));
  }
}

}  // namespace alpha::test
