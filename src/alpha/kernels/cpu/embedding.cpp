// CPU embedding kernels: the lookup copies one table row per position (positions in parallel); the
// backward buckets positions by id with a stable counting sort and then reduces each row's bucket in
// position order (rows in parallel), which keeps the result independent of the thread count.
#include "alpha/kernels/embedding.h"

#include <algorithm>
#include <vector>

namespace alpha::kernels::cpu {

template <class T>
void embedding(const EmbeddingArgs<T>& args) {
  const int64_t C = args.channels;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.positions; ++i) {
    const T* row = args.table + int64_t(args.ids[i]) * C;
    std::copy(row, row + C, args.out + i * C);
  }
}

template <class T, class G>
void embedding_backward(const EmbeddingBackwardArgs<T, G>& args) {
  // f64 accumulation: a frequent token's row sums thousands of terms, where f32 sums would drift.
  using A = double;
  const int64_t N = args.positions, V = args.vocab, C = args.channels;
  // bucket_start[v] .. bucket_start[v + 1] indexes the positions holding id v, in increasing order.
  // An id outside [0, V) (which the op layer rejects before calling) adds to no row, as on the GPU.
  auto valid = [&](int64_t i) { return args.ids[i] >= 0 && args.ids[i] < V; };
  std::vector<int64_t> bucket_start(size_t(V) + 1, 0);
  for (int64_t i = 0; i < N; ++i)
    if (valid(i)) ++bucket_start[size_t(args.ids[i]) + 1];
  for (int64_t v = 0; v < V; ++v) bucket_start[size_t(v) + 1] += bucket_start[size_t(v)];
  std::vector<int64_t> positions(static_cast<size_t>(N));
  std::vector<int64_t> next(bucket_start.begin(), bucket_start.end() - 1);
  for (int64_t i = 0; i < N; ++i)
    if (valid(i)) positions[size_t(next[size_t(args.ids[i])]++)] = i;

#pragma omp parallel
  {
    std::vector<A> row_sum(static_cast<size_t>(C));
    // Dynamic: buckets are very uneven (frequent tokens), and each row is reduced by one thread only.
#pragma omp for schedule(dynamic, 16)
    for (int64_t v = 0; v < V; ++v) {
      if (args.accumulate && bucket_start[size_t(v)] == bucket_start[size_t(v) + 1]) continue;  // left as it is
      std::fill(row_sum.begin(), row_sum.end(), A(0));
      for (int64_t k = bucket_start[size_t(v)]; k < bucket_start[size_t(v) + 1]; ++k) {
        const T* g = args.dy + positions[size_t(k)] * C;
        for (int64_t c = 0; c < C; ++c) row_sum[size_t(c)] += A(g[c]);
      }
      G* out = args.dtable + v * C;
      if (args.accumulate)
        for (int64_t c = 0; c < C; ++c) row_sum[size_t(c)] += A(out[c]);
      for (int64_t c = 0; c < C; ++c) out[c] = G(row_sum[size_t(c)]);
    }
  }
}

#define ALPHA_INSTANTIATE(T)                           \
  template void embedding<T>(const EmbeddingArgs<T>&); \
  template void embedding_backward<T, T>(const EmbeddingBackwardArgs<T, T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
