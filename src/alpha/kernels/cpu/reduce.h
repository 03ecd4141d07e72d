// Deterministic summation shared by the CPU kernels that reduce (cross-entropy's mean, the grad norm):
// terms are summed sequentially in fixed blocks of kSumBlock (blocks in parallel), then the block
// partials pairwise in a fixed tree, so the result has the same bits for every thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "alpha/kernels/elementwise.h"

namespace alpha::kernels::cpu {

// Σ term(i) for i in [0, n), accumulated in A; 0 for n == 0.
template <class A, class Term>
A deterministic_sum(int64_t n, const Term& term) {
  int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<A> partial(size_t(std::max<int64_t>(blocks, 1)), A(0));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    A s = 0;
    int64_t end = std::min(n, (b + 1) * kSumBlock);
    for (int64_t i = b * kSumBlock; i < end; ++i) s += A(term(i));
    partial[size_t(b)] = s;
  }
  for (size_t width = 1; width < partial.size(); width *= 2)
    for (size_t i = 0; i + width < partial.size(); i += 2 * width) partial[i] += partial[i + width];
  return partial[0];
}

}  // namespace alpha::kernels::cpu
