// Harness checks of the CUDA dropout kernels (kernels/cuda/dropout.cu):
// - dropout_mask against the CPU's mask bit for bit, at every size, from a 16-byte boundary and from 3
//   bytes past one (scalar head, vector body, scalar tail), at a counter offset mid-way through a Philox
//   block, at one whose Philox block counter crosses 2³², and at drop probabilities 0, 0.5 and 0.9;
// - dropout and residual_dropout_add at every size in three pointer layouts (aligned; shifted by one
//   element; operands at different offsets, the scalar path), against the CPU kernels in f64 (row
//   cuda.dropout) and bit for bit against the CPU kernels in f32 rounded to the dtype: both backends round
//   scale·x once in f32, the residual sum once in f32, then once to T, so exact agreement is the claim;
// - both in place (out == x, out == residual), bit for bit.
#if ALPHA_WITH_CUDA
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "alpha/check/families.h"
#include "alpha/kernels/dropout.h"

namespace alpha::check {

namespace {

constexpr double kP = 0.3;
constexpr uint64_t kOffset = 4099;  // not a multiple of 4: the first element sits in lane 3 of its Philox block

void check_masks(Context& ctx, int64_t n) {
  struct MaskCase {
    double p;
    uint64_t offset;
    int64_t at;  // bytes past a 16-byte boundary
  };
  const MaskCase cases[] = {{kP, kOffset, 0}, {kP, kOffset, 3}, {kP, (uint64_t(1) << 34) - 5, 0},
                            {0.0, kOffset, 0}, {0.5, 1, 5}, {0.9, 0, 0}};
  for (const MaskCase& c : cases) {
    const uint64_t seed = ctx.next_seed();
    const float p = float(c.p);
    Tensor got = ctx.poisoned({n + c.at}, DType::u8).slice(0, c.at, c.at + n);
    kernels::cuda::dropout_mask(kernels::DropoutMaskArgs{got.data<uint8_t>(), p, seed, c.offset, n}, ctx.stream());
    Tensor want = Tensor::full({n}, 255, DType::u8);
    kernels::cpu::dropout_mask(kernels::DropoutMaskArgs{want.data<uint8_t>(), p, seed, c.offset, n});
    char name[96];
    std::snprintf(name, sizeof name, "dropout_mask.p%g.offset%llu.at%lld", c.p,
                  static_cast<unsigned long long>(c.offset), static_cast<long long>(c.at));
    ctx.compare_bits(name, got, want);
  }
}

template <class T>
void check_values(Context& ctx, int64_t n, const OperandLayout& at) {
  using kernels::DropoutArgs, kernels::ResidualDropoutArgs;
  const DType dtype = dtype_of<T>;
  const std::string suffix = std::string(".") + at.name;
  const float p = float(kP);
  const double scale = 1.0 / (1.0 - kP);
  const uint64_t seed = ctx.next_seed();
  Tensor x = ctx.random({n}, dtype), residual = ctx.random({n}, dtype);
  Tensor dx = ctx.to_gpu_at(x, dtype, at.first), dr = ctx.to_gpu_at(residual, dtype, at.second);
  Tensor x32 = x.to(DType::f32), r32 = residual.to(DType::f32);
  auto cpu_out = [&](DType d) { return Tensor::full({n}, NAN, d); };

  // Runs the CUDA kernel into a poisoned output; compares with the CPU kernel in f64 and, bit for bit, in f32.
  auto run = [&](const char* name, auto gpu, auto cpu64, auto cpu32) {
    Tensor got = ctx.poisoned({n + at.out}, dtype).slice(0, at.out, at.out + n);
    gpu(got.data<T>());
    Tensor want = cpu_out(DType::f64), exact = cpu_out(DType::f32);
    cpu64(want.data<double>());
    cpu32(exact.data<float>());
    ctx.compare(name + suffix, got, want, "cuda.dropout");
    ctx.compare_bits(std::string(name) + suffix + ".same_bits_as_cpu_f32", got, exact.to(dtype));
  };
  run("dropout",
      [&](T* out) {
        kernels::cuda::dropout(DropoutArgs<T>{dx.data<T>(), out, p, acc_t<T>(scale), seed, kOffset, n}, ctx.stream());
      },
      [&](double* out) {
        kernels::cpu::dropout(DropoutArgs<double>{x.data<double>(), out, p, scale, seed, kOffset, n});
      },
      [&](float* out) {
        kernels::cpu::dropout(DropoutArgs<float>{x32.data<float>(), out, p, float(scale), seed, kOffset, n});
      });
  run("residual_dropout_add",
      [&](T* out) {
        const ResidualDropoutArgs<T> args{dr.data<T>(), dx.data<T>(), out, p, acc_t<T>(scale), seed, kOffset, n};
        kernels::cuda::residual_dropout_add(args, ctx.stream());
      },
      [&](double* out) {
        kernels::cpu::residual_dropout_add(
            ResidualDropoutArgs<double>{residual.data<double>(), x.data<double>(), out, p, scale, seed, kOffset, n});
      },
      [&](float* out) {
        kernels::cpu::residual_dropout_add(
            ResidualDropoutArgs<float>{r32.data<float>(), x32.data<float>(), out, p, float(scale), seed, kOffset, n});
      });
}

// out == x for dropout, out == residual for residual_dropout_add: each element is read before it is written.
template <class T>
void check_in_place(Context& ctx, int64_t n) {
  const DType dtype = dtype_of<T>;
  const float p = float(kP), scale = float(1.0 / (1.0 - kP));
  const uint64_t seed = ctx.next_seed();
  Tensor x = ctx.random({n}, dtype), residual = ctx.random({n}, dtype);
  Tensor x32 = x.to(DType::f32), r32 = residual.to(DType::f32);
  Tensor dx = ctx.to_gpu(x, dtype), dr = ctx.to_gpu(residual, dtype);
  kernels::cuda::dropout(kernels::DropoutArgs<T>{dx.data<T>(), dx.data<T>(), p, scale, seed, kOffset, n}, ctx.stream());
  Tensor want = Tensor::full({n}, NAN, DType::f32);
  kernels::cpu::dropout(kernels::DropoutArgs<float>{x32.data<float>(), want.data<float>(), p, scale, seed, kOffset, n});
  ctx.compare_bits("dropout.in_place", dx, want.to(dtype));
  Tensor dx2 = ctx.to_gpu(x, dtype);
  const kernels::ResidualDropoutArgs<T> args{dr.data<T>(), dx2.data<T>(), dr.data<T>(), p, scale, seed, kOffset, n};
  kernels::cuda::residual_dropout_add(args, ctx.stream());
  kernels::cpu::residual_dropout_add(
      kernels::ResidualDropoutArgs<float>{r32.data<float>(), x32.data<float>(), want.data<float>(), p, scale, seed,
                                          kOffset, n});
  ctx.compare_bits("residual_dropout_add.in_place", dr, want.to(dtype));
}

}  // namespace

void check_dropout(Context& ctx) {
  const std::vector<int64_t> sizes = ctx.element_counts();
  for (int64_t n : sizes) check_masks(ctx, n);
  for_each_cuda_dtype([&]<class T>() {
    for (int64_t n : sizes)
      for (const OperandLayout& at : kOperandLayouts) check_values<T>(ctx, n, at);
    check_in_place<T>(ctx, kOddSizes[1]);
  });
}

}  // namespace alpha::check
#endif
