// Harness checks of the CUDA embedding kernels (kernels/cuda/embedding.cu) against the CPU kernels in f64:
// the lookup copies bits, so it must match bit for bit; the backward sums in f64 in the CPU's order, so it
// must match the CPU kernel's f64 result rounded to the dtype bit for bit, and repeat bit for bit. Shapes
// (positions, vocab, channels) cover channels 1, 7, 64, 768 and 100003 (vectorised and scalar rows),
// GPT-2's vocabulary 50257 (most rows unused: they must be 0), a vocabulary of 3 under 4099 positions
// (every id repeated ~1400 times), and no positions at all (dtable all 0); and the backward accumulating onto
// a gradient already there (used rows get their sums added, the others keep their values).
#if ALPHA_WITH_CUDA
#include <string>

#include "alpha/check/families.h"
#include "alpha/kernels/embedding.h"

namespace alpha::check {

namespace {

struct Lookup {
  int64_t positions, vocab, channels;
};
constexpr Lookup kLookups[] = {{1, 1, 1},        {64, 7, 1},    {9, 13, 7},       {64, 7, 64},
                               {1024, 50257, 16}, {85, 1000, 768}, {4099, 3, 16},  {2, 3, 100003},
                               {0, 5, 8}};

template <class T>
void check_lookup(Context& ctx, const Lookup& shape) {
  using kernels::EmbeddingArgs, kernels::EmbeddingBackwardArgs;
  const DType dtype = dtype_of<T>;
  const int64_t N = shape.positions, V = shape.vocab, C = shape.channels;
  Tensor table = ctx.random({V, C}, dtype), ids = ctx.random_ids({N}, V), dy = ctx.random({N, C}, dtype);
  Tensor gtable = ctx.to_gpu(table, dtype), gids = ids.to(ctx.gpu()), gdy = ctx.to_gpu(dy, dtype);

  Tensor out = ctx.poisoned({N, C}, dtype), want_out = Tensor::empty({N, C}, DType::f64);
  kernels::cuda::embedding(EmbeddingArgs<T>{gids.data<int32_t>(), gtable.data<T>(), out.data<T>(), N, V, C},
                           ctx.stream());
  kernels::cpu::embedding(
      EmbeddingArgs<double>{ids.data<int32_t>(), table.data<double>(), want_out.data<double>(), N, V, C});
  ctx.compare_bits("embedding.same_bits_as_cpu", out, want_out.to(dtype));

  auto backward = [&] {
    Tensor dtable = ctx.poisoned({V, C}, dtype);
    kernels::cuda::embedding_backward(
        EmbeddingBackwardArgs<T>{gdy.data<T>(), gids.data<int32_t>(), dtable.data<T>(), N, V, C}, ctx.stream());
    return dtable;
  };
  Tensor dtable = backward(), again = backward();
  Tensor want = Tensor::empty({V, C}, DType::f64);
  kernels::cpu::embedding_backward(
      EmbeddingBackwardArgs<double>{dy.data<double>(), ids.data<int32_t>(), want.data<double>(), N, V, C});
  ctx.compare("embedding_backward", dtable, want, "cuda.embedding");
  ctx.compare_bits("embedding_backward.same_bits_as_cpu", dtable, want.to(dtype));
  ctx.compare_bits("embedding_backward.repeats", again, dtable);

  // Accumulating onto a gradient already there (random, not poison: unused rows must keep it).
  Tensor before = ctx.random({V, C}, dtype), sums = ctx.to_gpu(before, dtype);
  kernels::cuda::embedding_backward(
      EmbeddingBackwardArgs<T>{gdy.data<T>(), gids.data<int32_t>(), sums.data<T>(), N, V, C, true}, ctx.stream());
  kernels::cpu::embedding_backward(
      EmbeddingBackwardArgs<double>{dy.data<double>(), ids.data<int32_t>(), before.data<double>(), N, V, C, true});
  ctx.compare("embedding_backward.accumulate", sums, before, "cuda.embedding");
}

}  // namespace

void check_embedding(Context& ctx) {
  for_each_cuda_dtype([&]<class T>() {
    for (const Lookup& shape : kLookups)
      if (ctx.includes(std::max(shape.positions, shape.vocab) * shape.channels)) check_lookup<T>(ctx, shape);
  });
}

}  // namespace alpha::check
#endif
