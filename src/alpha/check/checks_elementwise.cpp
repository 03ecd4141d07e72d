// Harness checks of the CUDA element-wise kernels (kernels/cuda/elementwise.cu): add, mul, scale and axpy
// at every size, in three pointer layouts (all aligned to 16 bytes; all one element past it, which takes
// the scalar head, the vector body and the scalar tail; at different offsets, which takes the scalar
// path), against the CPU kernels in f64 and, bit for bit, against the CPU kernels in f32 rounded to the
// dtype (both backends round once per f32 operation); sum_rows (2 and 3 rows, the vector and the scalar path) the
// same way; and sum, against f64 with a bound scaled by Σ|x|, and against itself run again (it must repeat bit for
// bit).
#if ALPHA_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <string>

#include "alpha/check/families.h"
#include "alpha/kernels/elementwise.h"

namespace alpha::check {

namespace {

template <class T>
void check_maps(Context& ctx, int64_t n, const OperandLayout& at) {
  using kernels::AxpyArgs, kernels::BinaryArgs, kernels::ScaleArgs;
  const DType dtype = dtype_of<T>;
  const std::string suffix = std::string(".") + at.name;
  Tensor a = ctx.random({n}, dtype), b = ctx.random({n}, dtype);
  Tensor da = ctx.to_gpu_at(a, dtype, at.first), db = ctx.to_gpu_at(b, dtype, at.second);
  auto gpu_out = [&] { return ctx.poisoned({n + at.out}, dtype).slice(0, at.out, at.out + n); };
  auto cpu_out = [&](DType d) { return Tensor::full({n}, NAN, d); };
  // once per kernel and dtype, at the largest count: the exact-rounding claim
  const bool bitwise = n == ctx.element_counts().back() && at.out == 0;
  Tensor a32 = a.to(DType::f32), b32 = b.to(DType::f32);

  // Runs the CUDA kernel (which returns its output), and the CPU kernel in f64 (and in f32 when bitwise)
  // into poisoned outputs.
  auto run = [&](const char* name, auto gpu, auto cpu64, auto cpu32) {
    Tensor got = gpu();
    Tensor want = cpu_out(DType::f64);
    cpu64(want.data<double>());
    ctx.compare(name + suffix, got, want, "cuda.elementwise");
    if (bitwise) {
      Tensor exact = cpu_out(DType::f32);
      cpu32(exact.data<float>());
      ctx.compare_bits(std::string(name) + ".same_bits_as_cpu_f32", got, exact.to(dtype));
    }
  };
  const double* a64 = a.data<double>();
  const double* b64 = b.data<double>();
  const float* a32p = a32.data<float>();
  const float* b32p = b32.data<float>();
  auto gpu_map = [&](auto kernel) {
    return [&ctx, &gpu_out, kernel] {
      Tensor out = gpu_out();
      kernel(out.data<T>(), ctx.stream());
      return out;
    };
  };
  run("add", gpu_map([&](T* out, Stream s) { kernels::cuda::add(BinaryArgs<T>{da.data<T>(), db.data<T>(), out, n}, s); }),
      [&](double* out) { kernels::cpu::add(BinaryArgs<double>{a64, b64, out, n}); },
      [&](float* out) { kernels::cpu::add(BinaryArgs<float>{a32p, b32p, out, n}); });
  run("mul", gpu_map([&](T* out, Stream s) { kernels::cuda::mul(BinaryArgs<T>{da.data<T>(), db.data<T>(), out, n}, s); }),
      [&](double* out) { kernels::cpu::mul(BinaryArgs<double>{a64, b64, out, n}); },
      [&](float* out) { kernels::cpu::mul(BinaryArgs<float>{a32p, b32p, out, n}); });
  run("scale", gpu_map([&](T* out, Stream s) { kernels::cuda::scale(ScaleArgs<T>{da.data<T>(), out, -1.7f, n}, s); }),
      [&](double* out) { kernels::cpu::scale(ScaleArgs<double>{a64, out, double(-1.7f), n}); },
      [&](float* out) { kernels::cpu::scale(ScaleArgs<float>{a32p, out, -1.7f, n}); });
  // axpy updates y in place: y starts as b on every side.
  run("axpy",
      [&] {
        Tensor y = ctx.to_gpu_at(b, dtype, at.out);
        kernels::cuda::axpy(AxpyArgs<T>{y.data<T>(), da.data<T>(), 0.3f, n}, ctx.stream());
        return y;
      },
      [&](double* y) {
        std::copy(b64, b64 + n, y);
        kernels::cpu::axpy(AxpyArgs<double>{y, a64, double(0.3f), n});
      },
      [&](float* y) {
        std::copy(b32p, b32p + n, y);
        kernels::cpu::axpy(AxpyArgs<float>{y, a32p, 0.3f, n});
      });
}

// The rank-order sum of the data-parallel reduction: k rows of n added in order, scaled by 1/k.
template <class T>
void check_sum_rows(Context& ctx, int64_t k, int64_t n, const OperandLayout& at) {
  using kernels::SumRowsArgs;
  const DType dtype = dtype_of<T>;
  Tensor rows = ctx.random({k, n}, dtype);
  Tensor drows = ctx.to_gpu_at(rows, dtype, at.first);
  Tensor got = ctx.poisoned({n + at.out}, dtype).slice(0, at.out, at.out + n);
  const float scale = 1.0f / float(k);
  kernels::cuda::sum_rows(SumRowsArgs<T>{drows.data<T>(), got.data<T>(), k, n, scale}, ctx.stream());
  Tensor want = Tensor::full({n}, NAN, DType::f64);
  kernels::cpu::sum_rows(SumRowsArgs<double>{rows.data<double>(), want.data<double>(), k, n, double(scale)});
  const std::string name = "sum_rows." + std::to_string(k) + "." + at.name;
  ctx.compare(name, got, want, "cuda.elementwise");
  Tensor rows32 = rows.to(DType::f32), exact = Tensor::full({n}, NAN, DType::f32);
  kernels::cpu::sum_rows(SumRowsArgs<float>{rows32.data<float>(), exact.data<float>(), k, n, scale});
  ctx.compare_bits(name + ".same_bits_as_cpu_f32", got, exact.to(dtype));
}

template <class T>
void check_sum(Context& ctx, int64_t n) {
  const DType dtype = dtype_of<T>;
  // Values in [0, 1): no cancellation, so Σ|x| = Σx sets the scale of the rounding of the partial sums.
  Tensor x = ctx.random({n}, dtype, 0.0, 1.0);
  Tensor dx = ctx.to_gpu(x, dtype);
  Context::Label label(ctx, dtype, x.shape());  // the output is one f32 whatever the input
  auto gpu_sum = [&] {
    Tensor total = ctx.poisoned({1}, DType::f32);
    kernels::cuda::sum(kernels::SumArgs<T>{dx.data<T>(), total.data<float>(), n}, ctx.stream());
    return total;
  };
  Tensor first = gpu_sum(), second = gpu_sum();
  double want = 0.0;
  kernels::cpu::sum(kernels::SumArgs<double>{x.data<double>(), &want, n});
  Tolerance tol = tolerance("cuda.sum", dtype);
  tol.abs *= want;
  ctx.compare("sum", first, Tensor::from_vector<double>({want}, {1}), tol);
  ctx.compare_bits("sum.repeats", second, first);
}

}  // namespace

void check_elementwise(Context& ctx) {
  const std::vector<int64_t> sizes = ctx.element_counts();
  for_each_cuda_dtype([&]<class T>() {
    for (int64_t n : sizes) {
      for (const OperandLayout& at : kOperandLayouts) check_maps<T>(ctx, n, at);
      for (int64_t k : {2, 3})
        for (const OperandLayout& at : {kOperandLayouts[0], kOperandLayouts[2]}) check_sum_rows<T>(ctx, k, n, at);
      check_sum<T>(ctx, n);
    }
  });
}

}  // namespace alpha::check
#endif
