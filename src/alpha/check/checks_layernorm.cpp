// Harness checks of the CUDA layer norm (kernels/cuda/layernorm.cu) against the CPU kernels in f64, at row
// lengths 1, 7, 64, 768, 1000, 1024 (one warp per row, held in registers), 1025 and 16384 (a block per row;
// past 8192 the rest of the row is read again) and one row of 1000003 elements, with and without bias, and
// with more rows than the backward has teams (4099 rows: teams take several rows each) or none (dweight
// and dbias are then 0). The backward's inputs include mean and rstd from the forward in f64 rounded to
// f32, given to both sides. dweight and dbias (sums over rows) must repeat bit for bit, and outputs left
// out (nullptr) must not change the others' bits.
#if ALPHA_WITH_CUDA
#include <algorithm>
#include <string>

#include "alpha/check/families.h"
#include "alpha/kernels/layernorm.h"
#include "alpha/ops/elementwise.h"

namespace alpha::check {

namespace {

struct RowShape {
  int64_t rows, cols;
};
// Element counts around kSizes (1, 64, 4096, 65536, 1048576) and odd ones (kOddSizes: 7, 4099, 1000003).
constexpr RowShape kShapes[] = {{1, 1},    {64, 1},     {9, 7},    {64, 64},     {3, 1000},     {85, 768},
                                {4099, 64}, {64, 1025}, {16, 16384}, {1024, 1024}, {1, 1000003}, {0, 5}};

constexpr float kEps = 1e-5f;

struct Grads {
  Tensor dx, dweight, dbias;
};

template <class T>
void check_shape(Context& ctx, RowShape shape, bool with_bias) {
  using kernels::LayerNormArgs, kernels::LayerNormBackwardArgs;
  const DType dtype = dtype_of<T>;
  const int64_t rows = shape.rows, cols = shape.cols;
  Tensor x = ctx.random({rows, cols}, dtype), weight = ctx.random({cols}, dtype), bias = ctx.random({cols}, dtype);
  Tensor gx = ctx.to_gpu(x, dtype), gweight = ctx.to_gpu(weight, dtype), gbias = ctx.to_gpu(bias, dtype);

  // Forward.
  Tensor y = ctx.poisoned({rows, cols}, dtype), mean = ctx.poisoned({rows}, DType::f32),
         rstd = ctx.poisoned({rows}, DType::f32);
  kernels::cuda::layernorm(LayerNormArgs<T>{gx.data<T>(), gweight.data<T>(), with_bias ? gbias.data<T>() : nullptr,
                                            y.data<T>(), mean.data<float>(), rstd.data<float>(), rows, cols, kEps},
                           ctx.stream());
  Tensor want_y = Tensor::empty({rows, cols}, DType::f64), want_mean = Tensor::empty({rows}, DType::f64),
         want_rstd = Tensor::empty({rows}, DType::f64);
  kernels::cpu::layernorm(LayerNormArgs<double>{x.data<double>(), weight.data<double>(),
                                                with_bias ? bias.data<double>() : nullptr, want_y.data<double>(),
                                                want_mean.data<double>(), want_rstd.data<double>(), rows, cols,
                                                double(kEps)});
  const std::string bias_tag = with_bias ? "" : ".no_bias";
  ctx.compare("layernorm.y" + bias_tag, y, want_y, "cuda.layernorm");
  ctx.compare("layernorm.mean", mean, want_mean, "cuda.layernorm");
  ctx.compare("layernorm.rstd", rstd, want_rstd, "cuda.layernorm");

  // Backward, from the reference's statistics rounded to f32 (what the CUDA kernel takes).
  Tensor dy = ctx.random({rows, cols}, dtype);
  Tensor mean32 = want_mean.to(DType::f32), rstd32 = want_rstd.to(DType::f32);
  Tensor gdy = ctx.to_gpu(dy, dtype), gmean = mean32.to(ctx.gpu()), grstd = rstd32.to(ctx.gpu());
  Tensor mean64 = mean32.to(DType::f64), rstd64 = rstd32.to(DType::f64);
  // dx_into: dx is added into it (accumulate_dx) instead of written into a poisoned buffer.
  auto backward = [&](bool dx, bool dweight, bool dbias, const Tensor& dx_into = Tensor()) {
    // The parameters' gradients are f32 sums whatever T is.
    Grads g{dx_into.defined() ? dx_into : ctx.poisoned({rows, cols}, dtype), ctx.poisoned({cols}, DType::f32),
            ctx.poisoned({cols}, DType::f32)};
    kernels::cuda::layernorm_backward(
        LayerNormBackwardArgs<T>{gdy.data<T>(), gx.data<T>(), gweight.data<T>(), gmean.data<float>(),
                                 grstd.data<float>(), dx ? g.dx.data<T>() : nullptr, dx_into.defined(),
                                 dweight ? g.dweight.data<float>() : nullptr, dbias ? g.dbias.data<float>() : nullptr,
                                 rows, cols},
        ctx.stream());
    return g;
  };
  Grads got = backward(true, true, true);
  Grads want{Tensor::empty({rows, cols}, DType::f64), Tensor::empty({cols}, DType::f64),
             Tensor::empty({cols}, DType::f64)};
  kernels::cpu::layernorm_backward(LayerNormBackwardArgs<double>{
      dy.data<double>(), x.data<double>(), weight.data<double>(), mean64.data<double>(), rstd64.data<double>(),
      want.dx.data<double>(), false, want.dweight.data<double>(), want.dbias.data<double>(), rows, cols});
  ctx.compare("layernorm_backward.dx", got.dx, want.dx, "cuda.layernorm");
  // Added into an earlier gradient (the residual stream's): earlier + dx, rounded once.
  Tensor earlier = ctx.random({rows, cols}, dtype);
  Grads into = backward(true, false, false, ctx.to_gpu(earlier, dtype));
  ctx.compare("layernorm_backward.dx_added", into.dx, ops::add(want.dx, earlier), "cuda.layernorm");
  ctx.compare("layernorm_backward.dweight", got.dweight, want.dweight, layernorm_param_grad_tolerance(dtype, rows));
  ctx.compare("layernorm_backward.dbias", got.dbias, want.dbias, layernorm_param_grad_tolerance(dtype, rows));

  Grads again = backward(true, true, true);
  ctx.compare_bits("layernorm_backward.dx.repeats", again.dx, got.dx);
  ctx.compare_bits("layernorm_backward.dweight.repeats", again.dweight, got.dweight);
  ctx.compare_bits("layernorm_backward.dbias.repeats", again.dbias, got.dbias);
  // Outputs left out: the others keep their bits (and nothing is written where nullptr was given).
  if (with_bias) {
    Grads only_dx = backward(true, false, false), only_dweight = backward(false, true, false),
          only_dbias = backward(false, false, true);
    ctx.compare_bits("layernorm_backward.dx_alone", only_dx.dx, got.dx);
    ctx.compare_bits("layernorm_backward.dweight_alone", only_dweight.dweight, got.dweight);
    ctx.compare_bits("layernorm_backward.dbias_alone", only_dbias.dbias, got.dbias);
  }
}

}  // namespace

void check_layernorm(Context& ctx) {
  for_each_cuda_dtype([&]<class T>() {
    for (size_t i = 0; i < std::size(kShapes); ++i)
      if (ctx.includes(kShapes[i].rows * kShapes[i].cols)) check_shape<T>(ctx, kShapes[i], i % 2 == 0);
  });
}

}  // namespace alpha::check
#endif
