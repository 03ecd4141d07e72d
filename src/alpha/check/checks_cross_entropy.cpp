// Harness checks of the CUDA cross-entropy (kernels/cuda/cross_entropy.cu) against the CPU kernels in f64:
// vocabularies 1, 7, 64, 1000 (a warp per row), 1025, 50257 (GPT-2's, odd: rows start at every alignment)
// and one row of 1000003 (a block per row), every fifth row ignored, a batch with every row ignored (loss
// and gradient 0) and one with no rows. lse, loss and counted_rows come from the device; the loss must
// repeat bit for bit. The backward runs with the factor given on the host (scale = dloss / counted) and read
// from device memory (dloss_device, counted_rows_device: the forward's own count), which must agree bit for
// bit; both take the reference forward's lse rounded to f32.
#if ALPHA_WITH_CUDA
#include <algorithm>
#include <string>

#include "alpha/check/families.h"
#include "alpha/kernels/cross_entropy.h"

namespace alpha::check {

namespace {

struct Batch {
  int64_t rows, vocab;
  bool all_ignored = false;
};
constexpr Batch kBatches[] = {{1, 1},     {64, 1},     {9, 7},       {64, 64},    {3, 1000},   {64, 1025},
                              {8, 50257}, {1, 1000003}, {4099, 16},  {5, 11, true}, {0, 5}};

constexpr int32_t kIgnore = -1;

struct Forward {
  Tensor lse, loss, counted;
};
constexpr double kDloss = 0.75;

template <class T>
void check_batch(Context& ctx, const Batch& batch) {
  using kernels::CrossEntropyArgs, kernels::CrossEntropyBackwardArgs;
  const DType dtype = dtype_of<T>;
  const int64_t N = batch.rows, V = batch.vocab;
  Tensor logits = ctx.random({N, V}, dtype, -4.0, 4.0);
  Tensor targets = ctx.random_ids({N}, V);
  int32_t* t = targets.data<int32_t>();
  for (int64_t r = 0; r < N; ++r)
    if (batch.all_ignored || r % 5 == 1) t[r] = kIgnore;
  Tensor glogits = ctx.to_gpu(logits, dtype), gtargets = targets.to(ctx.gpu());

  // Forward, twice.
  auto forward = [&] {
    Forward f{ctx.poisoned({N}, DType::f32), ctx.poisoned({1}, DType::f32), ctx.poisoned({1}, DType::i64)};
    kernels::cuda::cross_entropy(CrossEntropyArgs<T>{glogits.data<T>(), gtargets.data<int32_t>(), f.lse.data<float>(),
                                                     f.loss.data<float>(), f.counted.data<int64_t>(), N, V, kIgnore},
                                 ctx.stream());
    return f;
  };
  Forward got = forward(), again = forward();
  Tensor want_lse = Tensor::empty({N}, DType::f64);
  double want_loss = -1.0;
  int64_t want_counted = -1;
  kernels::cpu::cross_entropy(CrossEntropyArgs<double>{logits.data<double>(), targets.data<int32_t>(),
                                                       want_lse.data<double>(), &want_loss, &want_counted, N, V,
                                                       kIgnore});
  ctx.compare("cross_entropy.lse", got.lse, want_lse, "cuda.cross_entropy");
  ctx.compare("cross_entropy.loss", got.loss, Tensor::from_vector<double>({want_loss}, {1}), "cuda.cross_entropy");
  ctx.compare("cross_entropy.counted_rows", got.counted, Tensor::from_vector<double>({double(want_counted)}, {1}),
              Tolerance{0, 0});
  ctx.compare_bits("cross_entropy.loss.repeats", again.loss, got.loss);
  ctx.compare_bits("cross_entropy.lse.repeats", again.lse, got.lse);

  // Backward from the reference's lse rounded to f32, with the factor from the host, then from the device.
  Tensor lse32 = want_lse.to(DType::f32);
  Tensor glse = lse32.to(ctx.gpu()), lse64 = lse32.to(DType::f64);
  const double scale = want_counted > 0 ? kDloss / double(want_counted) : 0.0;
  Tensor host_factor = ctx.poisoned({N, V}, dtype), device_factor = ctx.poisoned({N, V}, dtype);
  kernels::cuda::cross_entropy_backward(
      CrossEntropyBackwardArgs<T>{glogits.data<T>(), gtargets.data<int32_t>(), glse.data<float>(),
                                  host_factor.data<T>(), float(scale), N, V, kIgnore, nullptr, nullptr},
      ctx.stream());
  Tensor gdloss = ctx.to_gpu(Tensor::from_vector<double>({kDloss}, {1}), DType::f32);
  kernels::cuda::cross_entropy_backward(
      CrossEntropyBackwardArgs<T>{glogits.data<T>(), gtargets.data<int32_t>(), glse.data<float>(),
                                  device_factor.data<T>(), 1.0f, N, V, kIgnore, got.counted.data<int64_t>(),
                                  gdloss.data<float>()},
      ctx.stream());
  Tensor want_dlogits = Tensor::empty({N, V}, DType::f64);
  kernels::cpu::cross_entropy_backward(CrossEntropyBackwardArgs<double>{
      logits.data<double>(), targets.data<int32_t>(), lse64.data<double>(), want_dlogits.data<double>(),
      double(float(scale)), N, V, kIgnore, nullptr, nullptr});
  // The gradient's scale is the factor: abs is per unit of it (see tolerances.h).
  Tolerance tol = tolerance("cuda.cross_entropy", dtype);
  tol.abs = std::max(tol.abs * (scale > 0 ? scale : 1.0), subnormal_rounding(dtype));
  ctx.compare("cross_entropy_backward.dlogits", host_factor, want_dlogits, tol);
  ctx.compare_bits("cross_entropy_backward.device_factor", device_factor, host_factor);
}

}  // namespace

void check_cross_entropy(Context& ctx) {
  for_each_cuda_dtype([&]<class T>() {
    for (const Batch& batch : kBatches)
      if (ctx.includes(batch.rows * batch.vocab)) check_batch<T>(ctx, batch);
  });
}

}  // namespace alpha::check
#endif
