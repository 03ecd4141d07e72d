// Deterministic summation shared by the CPU kernels that reduce (cross-entropy's mean, the grad norm):
// terms are summed sequentially in fixed blocks of kSumBlock (blocks in parallel), then the block
// partials pairwise in a fixed tree, so the result has the same bits for every thread count. The two halves
// are exposed apart so that the blocks of one sum can be computed in different places (the ranks holding
// parts of a gradient) and finished where they meet, with the bits of the whole sum.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "alpha/kernels/elementwise.h"

namespace alpha::kernels::cpu {

// The partials of blocks [first_block, first_block + blocks) of Σ term(i) over [0, n): block b's terms added in
// index order into partial[b - first_block].
template <class A, class Term>
void block_partials(int64_t n, int64_t first_block, int64_t blocks, const Term& term, A* partial) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < blocks; ++k) {
    A s = 0;
    const int64_t b = first_block + k, end = std::min(n, (b + 1) * kSumBlock);
    for (int64_t i = b * kSumBlock; i < end; ++i) s += A(term(i));
    partial[k] = s;
  }
}

// The partials added pairwise in the fixed tree (in place: partial[0] ends holding the total); 0 for none.
template <class A>
A pairwise_total(A* partial, int64_t count) {
  if (count == 0) return A(0);
  for (int64_t width = 1; width < count; width *= 2)
    for (int64_t i = 0; i + width < count; i += 2 * width) partial[i] += partial[i + width];
  return partial[0];
}

// Σ term(i) for i in [0, n), accumulated in A; 0 for n == 0.
template <class A, class Term>
A deterministic_sum(int64_t n, const Term& term) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<A> partial(static_cast<size_t>(blocks));
  block_partials(n, 0, blocks, term, partial.data());
  return pairwise_total(partial.data(), blocks);
}

}  // namespace alpha::kernels::cpu
