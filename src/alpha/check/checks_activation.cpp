// Harness checks of the CUDA activation kernels (kernels/cuda/activation.cu) against the CPU kernels in
// f64: GELU, softcap and their backwards at every size of kSizes and kOddSizes (the element-wise map's
// layouts are covered by the element-wise checks); softmax and its backward at row lengths 1, 7, 64, 768,
// 1000, 1024 (a warp per row), 1025, 16384 (a block per row, partly re-read) and one row of 1000003.
// The backwards take the reference forward's output rounded to the dtype, on both sides.
#if ALPHA_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <string>

#include "alpha/check/families.h"
#include "alpha/kernels/activation.h"

namespace alpha::check {

namespace {

constexpr double kCap = 15.0;

template <class T>
void check_pointwise(Context& ctx, int64_t n) {
  using kernels::GeluArgs, kernels::GeluBackwardArgs, kernels::SoftcapArgs, kernels::SoftcapBackwardArgs;
  const DType dtype = dtype_of<T>;
  auto f64 = [&] { return Tensor::empty({n}, DType::f64); };
  Tensor x = ctx.random({n}, dtype, -5.0, 5.0), dy = ctx.random({n}, dtype);
  Tensor gx = ctx.to_gpu(x, dtype), gdy = ctx.to_gpu(dy, dtype);

  Tensor y = ctx.poisoned({n}, dtype), want = f64();
  kernels::cuda::gelu(GeluArgs<T>{gx.data<T>(), y.data<T>(), n}, ctx.stream());
  kernels::cpu::gelu(GeluArgs<double>{x.data<double>(), want.data<double>(), n});
  ctx.compare("gelu", y, want, "cuda.activation");

  Tensor dx = ctx.poisoned({n}, dtype);
  want = f64();
  kernels::cuda::gelu_backward(GeluBackwardArgs<T>{gdy.data<T>(), gx.data<T>(), dx.data<T>(), n}, ctx.stream());
  kernels::cpu::gelu_backward(GeluBackwardArgs<double>{dy.data<double>(), x.data<double>(), want.data<double>(), n});
  ctx.compare("gelu_backward", dx, want, "cuda.activation");

  // Softcap of inputs up to three caps, then its backward from the capped values.
  Tensor xc = ctx.random({n}, dtype, -3 * kCap, 3 * kCap);
  Tensor gxc = ctx.to_gpu(xc, dtype);
  y = ctx.poisoned({n}, dtype);
  want = f64();
  kernels::cuda::softcap(SoftcapArgs<T>{gxc.data<T>(), y.data<T>(), float(kCap), n}, ctx.stream());
  kernels::cpu::softcap(SoftcapArgs<double>{xc.data<double>(), want.data<double>(), double(float(kCap)), n});
  ctx.compare("softcap", y, want, "cuda.activation");

  Tensor capped = want.to(dtype).to(DType::f64);
  Tensor gcapped = ctx.to_gpu(capped, dtype);
  dx = ctx.poisoned({n}, dtype);
  want = f64();
  kernels::cuda::softcap_backward(SoftcapBackwardArgs<T>{gdy.data<T>(), gcapped.data<T>(), dx.data<T>(), float(kCap), n},
                         ctx.stream());
  kernels::cpu::softcap_backward(
      SoftcapBackwardArgs<double>{dy.data<double>(), capped.data<double>(), want.data<double>(), double(float(kCap)), n});
  ctx.compare("softcap_backward", dx, want, "cuda.activation");
}

struct RowShape {
  int64_t rows, cols;
};
constexpr RowShape kSoftmaxShapes[] = {{1, 1},    {64, 1},     {9, 7},      {64, 64},     {3, 1000},
                                       {85, 768}, {64, 1025},  {16, 16384}, {1024, 1024}, {1, 1000003}};

double max_abs(const Tensor& t) {
  const double* p = t.data<double>();
  double m = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(p[i]));
  return m;
}

// cuda.softmax's abs is per unit of the largest y (see tolerances.h).
Tolerance softmax_tolerance(DType dtype, const Tensor& y) {
  Tolerance tol = tolerance("cuda.softmax", dtype);
  tol.abs = std::max(tol.abs * max_abs(y), subnormal_rounding(dtype));
  return tol;
}

template <class T>
void check_softmax(Context& ctx, RowShape shape) {
  using kernels::SoftmaxArgs, kernels::SoftmaxBackwardArgs;
  const DType dtype = dtype_of<T>;
  const int64_t rows = shape.rows, cols = shape.cols;
  Tensor x = ctx.random({rows, cols}, dtype, -4.0, 4.0);
  Tensor gx = ctx.to_gpu(x, dtype);
  Tensor y = ctx.poisoned({rows, cols}, dtype), want = Tensor::empty({rows, cols}, DType::f64);
  kernels::cuda::softmax(SoftmaxArgs<T>{gx.data<T>(), y.data<T>(), rows, cols}, ctx.stream());
  kernels::cpu::softmax(SoftmaxArgs<double>{x.data<double>(), want.data<double>(), rows, cols});
  ctx.compare("softmax", y, want, softmax_tolerance(dtype, want));

  Tensor y_in = want.to(dtype).to(DType::f64), dy = ctx.random({rows, cols}, dtype);
  Tensor gy = ctx.to_gpu(y_in, dtype), gdy = ctx.to_gpu(dy, dtype);
  Tensor dx = ctx.poisoned({rows, cols}, dtype), want_dx = Tensor::empty({rows, cols}, DType::f64);
  kernels::cuda::softmax_backward(SoftmaxBackwardArgs<T>{gdy.data<T>(), gy.data<T>(), dx.data<T>(), rows, cols}, ctx.stream());
  kernels::cpu::softmax_backward(
      SoftmaxBackwardArgs<double>{dy.data<double>(), y_in.data<double>(), want_dx.data<double>(), rows, cols});
  ctx.compare("softmax_backward", dx, want_dx, softmax_tolerance(dtype, y_in));
}

}  // namespace

void check_activation(Context& ctx) {
  const std::vector<int64_t> sizes = ctx.element_counts();
  for_each_cuda_dtype([&]<class T>() {
    for (int64_t n : sizes) check_pointwise<T>(ctx, n);
    for (const RowShape& shape : kSoftmaxShapes) check_softmax<T>(ctx, shape);
  });
}

}  // namespace alpha::check
#endif
