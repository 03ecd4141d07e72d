// Deterministic sums over rows, shared by the CPU kernels that reduce a (rows, width) quantity to one
// vector of width (bias and layer-norm parameter gradients). Rows are cut into blocks whose size
// depends only on the row count; each block is visited in row order into its own partial vector, and
// the partials are then added pairwise in a fixed tree. The result is therefore bit-identical for any
// number of threads, and the error grows like the block size plus log(blocks), not like rows.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace alpha::kernels::cpu {

inline constexpr int64_t kRowReduceMinBlock = 128;  // rows a block holds at least
inline constexpr int64_t kRowReduceMaxBlocks = 64;  // bounds the partials' memory to 64 · width

// Calls visit_row(r, partial) once for every row r (rows of one block in order, blocks in parallel),
// where partial points at `width` accumulators of the row's block, then writes the sum of the blocks'
// partials to out (width values). visit_row may also write per-row outputs (rows are independent).
// With width 0 only the row visits run.
template <class A, class VisitRow>
void reduce_rows(int64_t rows, int64_t width, A* out, VisitRow&& visit_row) {
  int64_t block = std::max(kRowReduceMinBlock, (rows + kRowReduceMaxBlocks - 1) / kRowReduceMaxBlocks);
  int64_t blocks = std::max<int64_t>(1, (rows + block - 1) / block);
  std::vector<A> partial(size_t(blocks * width), A(0));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    A* acc = partial.data() + b * width;
    int64_t end = std::min(rows, (b + 1) * block);
    for (int64_t r = b * block; r < end; ++r) visit_row(r, acc);
  }
  for (int64_t step = 1; step < blocks; step *= 2) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks - step; b += 2 * step) {
      A* into = partial.data() + b * width;
      const A* from = partial.data() + (b + step) * width;
      for (int64_t i = 0; i < width; ++i) into[i] += from[i];
    }
  }
  std::copy_n(partial.data(), width, out);
}

}  // namespace alpha::kernels::cpu
