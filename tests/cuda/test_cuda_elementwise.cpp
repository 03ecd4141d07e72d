// The CUDA kernel correctness harness. Every CUDA element-wise kernel runs against the CPU kernel on the
// same values, called directly into poisoned (NaN) outputs, at element counts from 1 to 2^20 and odd ones,
// with three pointer layouts: aligned, all shifted by one element (scalar head, vector body, scalar tail)
// and shifted differently (the scalar path). Each comparison prints max_abs, mean_abs and max_rel.
// Beside it: the runtime (copies between host and device in every layout, fills, devices), the ops
// dispatching by device, and the errors.
//
// bf16/f16 results are compared as the f32 values they hold, with the f32 rows: both backends compute in
// f32 and round once to the storage type, so they agree exactly and the f32 row admits no bf16/f16 ulp.
//
// Every test skips itself (GTEST_SKIP, which CTest reports as skipped) in a build without CUDA or on a
// machine without a GPU, except CudaDevices, which checks exactly that situation's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <string>
#include <ostream>

#include "alpha/kernels/elementwise.h"
#include "alpha/ops/check.h"
#include "alpha/ops/elementwise.h"
#include "support/checks.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha {
namespace {

void require_gpu() {
#if ALPHA_WITH_CUDA
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine (no GPU or no driver)";
#else
  GTEST_SKIP() << "built without the CUDA backend (-DALPHA_CUDA=OFF, or no nvcc found)";
#endif
}

// A fixture whose tests skip (before their body runs) unless a GPU is there to run them.
template <class Base>
class GpuOnly : public Base {
 protected:
  void SetUp() override { require_gpu(); }
};

// Element offsets of the operands a, b and out from the start of their blocks (which are 512-byte aligned).
struct Layout {
  const char* name;
  int64_t a, b, out;
};
constexpr Layout kLayouts[] = {{"aligned", 0, 0, 0}, {"shifted", 1, 1, 1}, {"mixed", 1, 0, 3}};
const std::vector<int64_t> kCudaSizes = {1, 7, 64, 4096, 4099, 65536, 1000003, 1048576};

struct Case {
  int64_t n;
  DType dtype;
  int layout;  // index into kLayouts
  friend std::ostream& operator<<(std::ostream& os, const Case& c) {
    return os << "n " << c.n << ", " << dtype_name(c.dtype) << ", " << kLayouts[c.layout].name;
  }
};
class CudaElementwise : public GpuOnly<::testing::TestWithParam<Case>> {};
class CudaRuntime : public GpuOnly<::testing::Test> {};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = std::to_string(c.n);  // appended piecewise: GCC 12 misreports "n" + to_string(n) (-Wrestrict)
  name.insert(0, 1, 'n').append("_").append(dtype_name(c.dtype)).append("_").append(kLayouts[c.layout].name);
  return name;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int64_t n : kCudaSizes)
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      for (int layout = 0; layout < int(std::size(kLayouts)); ++layout) cases.push_back({n, dtype, layout});
  return cases;
}

#if ALPHA_WITH_CUDA
const Device kGpu = Device::cuda(0);

// A view on the GPU holding host's values, starting `offset` elements into a fresh block.
Tensor on_gpu(const Tensor& host, int64_t offset) {
  int64_t n = host.numel();
  Tensor view = Tensor::empty({n + offset}, host.dtype(), kGpu).slice(0, offset, offset + n);
  view.copy_from(host);
  return view;
}

template <class Fn>
void visit_gpu_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::bf16: fn.template operator()<bf16>(); break;
    case DType::f16: fn.template operator()<f16>(); break;
    default: fn.template operator()<float>(); break;
  }
}

// Prints max_abs, mean_abs and max_rel of got (any device) against want, both taken as f32 values, and
// returns all_close's verdict with the f32 row of `check`.
::testing::AssertionResult matches(const char* what, const Tensor& got, const Tensor& want, std::string_view check) {
  Tensor g = got.to(Device::cpu()).to(DType::f32), w = want.to(Device::cpu()).to(DType::f32);
  std::vector<double> gv = g.to_vector<double>(), wv = w.to_vector<double>();
  double max_abs = 0, sum_abs = 0, max_rel = 0;
  for (size_t i = 0; i < gv.size(); ++i) {
    double err = std::fabs(gv[i] - wv[i]);
    max_abs = std::max(max_abs, err);
    sum_abs += err;  // a NaN left in got makes the mean NaN
    if (wv[i] != 0) max_rel = std::max(max_rel, err / std::fabs(wv[i]));
  }
  std::printf("  %-5s max_abs %.3e  mean_abs %.3e  max_rel %.3e\n", what, max_abs,
              gv.empty() ? 0.0 : sum_abs / double(gv.size()), max_rel);
  return test::all_close(g, w, check);
}
#endif

TEST_P(CudaElementwise, KernelsMatchCpu) {
#if ALPHA_WITH_CUDA
  auto [n, dtype, layout] = GetParam();
  const Layout& at = kLayouts[layout];
  Tensor a = test::random({n}, dtype), b = test::random({n}, dtype);
  Tensor a32 = a.to(DType::f32), b32 = b.to(DType::f32);  // the same values, for the CPU kernels
  Tensor da = on_gpu(a, at.a), db = on_gpu(b, at.b);
  auto gpu_out = [&] { return on_gpu(test::poisoned({n}, dtype), at.out); };
  auto cpu_out = [&] { return test::poisoned({n}, DType::f32); };
  visit_gpu_dtype(dtype, [&]<class T>() {
    using kernels::AxpyArgs, kernels::BinaryArgs, kernels::ScaleArgs;
    Tensor want = cpu_out(), got = gpu_out();
    kernels::cpu::add(BinaryArgs<float>{a32.data<float>(), b32.data<float>(), want.data<float>(), n});
    kernels::cuda::add(BinaryArgs<T>{da.data<T>(), db.data<T>(), got.data<T>(), n}, Stream{});
    EXPECT_TRUE(matches("add", got, want.to(dtype), "elementwise"));

    want = cpu_out();
    got = gpu_out();
    kernels::cpu::mul(BinaryArgs<float>{a32.data<float>(), b32.data<float>(), want.data<float>(), n});
    kernels::cuda::mul(BinaryArgs<T>{da.data<T>(), db.data<T>(), got.data<T>(), n}, Stream{});
    EXPECT_TRUE(matches("mul", got, want.to(dtype), "elementwise"));

    want = cpu_out();
    got = gpu_out();
    kernels::cpu::scale(ScaleArgs<float>{a32.data<float>(), want.data<float>(), -1.7f, n});
    kernels::cuda::scale(ScaleArgs<T>{da.data<T>(), got.data<T>(), -1.7f, n}, Stream{});
    EXPECT_TRUE(matches("scale", got, want.to(dtype), "elementwise"));

    // axpy updates y in place; y starts as b on both sides and sits where out would.
    want = b32.clone();
    got = on_gpu(b, at.out);
    kernels::cpu::axpy(AxpyArgs<float>{want.data<float>(), a32.data<float>(), 0.3f, n});
    kernels::cuda::axpy(AxpyArgs<T>{got.data<T>(), da.data<T>(), 0.3f, n}, Stream{});
    EXPECT_TRUE(matches("axpy", got, want.to(dtype), "elementwise"));
  });
#endif
}

TEST_P(CudaElementwise, SumMatchesCpuAndRepeatsBitForBit) {
#if ALPHA_WITH_CUDA
  auto [n, dtype, layout] = GetParam();
  // Values in [0, 1): a sum without cancellation, so the relative row bounds the difference between the
  // two backends' (each fixed) summation orders.
  Tensor x = test::random({n}, dtype, 0.0, 1.0);
  Tensor x32 = x.to(DType::f32);
  Tensor dx = on_gpu(x, kLayouts[layout].a);
  float want = std::numeric_limits<float>::quiet_NaN();
  kernels::cpu::sum(kernels::SumArgs<float>{x32.data<float>(), &want, n});
  visit_gpu_dtype(dtype, [&]<class T>() {
    auto gpu_sum = [&] {
      Tensor total = on_gpu(test::poisoned({1}, DType::f32), 0);
      kernels::cuda::sum(kernels::SumArgs<T>{dx.data<T>(), total.data<float>(), n}, Stream{});
      return total.to(Device::cpu());
    };
    Tensor first = gpu_sum(), second = gpu_sum();
    EXPECT_EQ(first.item(), second.item()) << "two runs of the same sum differ";
    EXPECT_TRUE(matches("sum", first, Tensor::from_vector<float>({want}, {1}), "sum"));
  });
#endif
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaElementwise, ::testing::ValuesIn(all_cases()), case_name);

TEST_F(CudaRuntime, CopiesKeepEveryValueInEveryLayout) {
#if ALPHA_WITH_CUDA
  const Device cpu = Device::cpu();
  Tensor host = test::random({5, 7, 3}, DType::f32);
  Tensor dev = host.to(kGpu);
  EXPECT_EQ(dev.device(), kGpu);
  EXPECT_EQ(dev.to(cpu).to_vector<float>(), host.to_vector<float>());
  // Strided device source; dtype conversion on the device.
  EXPECT_EQ(dev.permute({2, 0, 1}).contiguous().to(cpu).to_vector<float>(),
            host.permute({2, 0, 1}).contiguous().to_vector<float>());
  EXPECT_EQ(dev.to(DType::bf16).to(cpu).to_vector<float>(), host.to(DType::bf16).to_vector<float>());
  // A strided device destination keeps the elements between its own.
  Tensor dst = Tensor::zeros({4, 6}, DType::f32, kGpu), want = Tensor::zeros({4, 6}, DType::f32);
  Tensor src = test::random({4, 3}, DType::f32);
  dst.slice(1, 1, 6, 2).copy_from(src);
  want.slice(1, 1, 6, 2).copy_from(src);
  EXPECT_EQ(dst.to(cpu).to_vector<float>(), want.to_vector<float>());
  // Overlapping views of one device storage.
  Tensor v = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10}, kGpu);
  v.slice(0, 1, 10).copy_from(v.slice(0, 0, 9));
  EXPECT_EQ(v.to(cpu).to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3, 4, 5, 6, 7, 8}));
  // A clone shares nothing; fill_ and zero_ on contiguous and strided views.
  Tensor c = dev.clone();
  c.fill_(2.5);
  EXPECT_EQ(dev.to(cpu).to_vector<float>(), host.to_vector<float>());
  EXPECT_EQ(c.to(cpu).to_vector<float>(), std::vector<float>(105, 2.5f));
  Tensor h = Tensor::full({3, 4}, 1.0, DType::f16, kGpu), h_want = Tensor::full({3, 4}, 1.0, DType::f16);
  h.transpose(0, 1).slice(0, 0, 4, 2).fill_(-3.0);
  h_want.transpose(0, 1).slice(0, 0, 4, 2).fill_(-3.0);
  EXPECT_EQ(h.to(cpu).to_vector<float>(), h_want.to_vector<float>());
  Tensor z = Tensor::full({1000}, 7.0, DType::bf16, kGpu);
  z.zero_();
  EXPECT_EQ(z.to(cpu).to_vector<float>(), std::vector<float>(1000, 0.0f));
  // Between two GPUs, contiguous and strided, when the machine has them.
  if (cuda::device_count() >= 2) {
    Tensor other = dev.to(Device::cuda(1));
    EXPECT_EQ(other.device(), Device::cuda(1));
    EXPECT_EQ(other.to(cpu).to_vector<float>(), host.to_vector<float>());
    EXPECT_EQ(other.transpose(0, 2).to(kGpu).to(cpu).to_vector<float>(),
              host.transpose(0, 2).contiguous().to_vector<float>());
  }
#endif
}

TEST_F(CudaRuntime, OpsDispatchToTheTensorsDevice) {
#if ALPHA_WITH_CUDA
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor a = test::random({33, 65}, dtype), bt = test::random({65, 33}, dtype);
    Tensor ga = a.to(kGpu), gb = bt.to(kGpu).transpose(0, 1);  // gb: a strided device input
    Tensor a32 = a.to(DType::f32), b32 = bt.transpose(0, 1).to(DType::f32);
    uint64_t launches = ops::kernel_launches();
    Tensor sum_ab = ops::add(ga, gb);
    EXPECT_EQ(ops::kernel_launches(), launches + 1);
    EXPECT_EQ(sum_ab.device(), kGpu);
    EXPECT_EQ(sum_ab.dtype(), dtype);
    EXPECT_TRUE(matches("add", sum_ab, ops::add(a32, b32).to(dtype), "elementwise"));
    EXPECT_TRUE(matches("mul", ops::mul(ga, gb), ops::mul(a32, b32).to(dtype), "elementwise"));
    EXPECT_TRUE(matches("scale", ops::scale(gb, 0.3), ops::scale(b32, 0.3).to(dtype), "elementwise"));
    Tensor y = ga.clone(), y32 = a32.clone();
    ops::add_(y, gb, -0.6);
    ops::add_(y32, b32, -0.6);
    EXPECT_TRUE(matches("add_", y, y32.to(dtype), "elementwise"));
    // sum: the op returns the kernel's f32 total rounded to the dtype.
    Tensor total = ops::sum(gb);
    EXPECT_EQ(total.dtype(), dtype);
    EXPECT_EQ(total.device(), kGpu);
    Tensor kernel_total = Tensor::empty({}, DType::f32, kGpu), gbc = gb.contiguous();
    visit_gpu_dtype(dtype, [&]<class T>() {
      kernels::cuda::sum(kernels::SumArgs<T>{gbc.data<T>(), kernel_total.data<float>(), gbc.numel()}, Stream{});
    });
    EXPECT_EQ(total.to(Device::cpu()).item(), kernel_total.to(dtype).to(Device::cpu()).item());
  }
  Tensor p = test::random({300001}, DType::f32, 0.0, 1.0);
  EXPECT_TRUE(matches("sum", ops::sum(p.to(kGpu)).reshape({1}), ops::sum(p).reshape({1}), "sum"));
#endif
}

TEST_F(CudaRuntime, BadInputsRaise) {
#if ALPHA_WITH_CUDA
  Tensor g = test::random({4}).to(kGpu);
  EXPECT_ALPHA_ERROR(ops::add(g, test::random({4})), DeviceError, "[add]", "'b'", "cuda:0", "cpu");
  EXPECT_ALPHA_ERROR(ops::mul(test::random({4}, DType::f64).to(kGpu), g), DTypeError, "[mul]", "'a'",
                     "f32 or bf16 or f16", "f64");
  EXPECT_ALPHA_ERROR(ops::sum(Tensor::zeros({4}, DType::i32, kGpu)), DTypeError, "[sum]", "'x'", "i32");
  EXPECT_ALPHA_ERROR(ops::add_(g, test::random({5}).to(kGpu)), ShapeError, "[add_]", "'x'", "[4]", "[5]");
#endif
}

// Runs in every build: the errors for a GPU this build or machine does not have.
TEST(CudaDevices, MissingDevicesRaiseNamedErrors) {
#if ALPHA_WITH_CUDA
  int count = cuda::device_count();  // 0 on a machine without GPU or driver, not an error
  ASSERT_GE(count, 0);
  std::string missing = Device::cuda(count).str();
  EXPECT_ALPHA_ERROR(Tensor::empty({4}, DType::f32, Device::cuda(count)), DeviceError, "[allocator_for]",
                     "'device'", missing.c_str(), count == 0 ? "no GPU or no driver" : "cuda:0..");
  EXPECT_ALPHA_ERROR(test::random({4}).to(Device::cuda(count)), DeviceError, "[Tensor::to]", missing.c_str());
  // A failing CUDA call names the call, the CUDA error and where it was made.
  EXPECT_ALPHA_ERROR(cuda::set_device(count), BackendError, "[cudaSetDevice(ordinal)]", "expected cudaSuccess",
                     "cudaError", "cuda_backend.cu:");
#else
  EXPECT_ALPHA_ERROR(Tensor::empty({4}, DType::f32, Device::cuda(0)), DeviceError, "[allocator_for]", "'device'",
                     "no CUDA backend", "-DALPHA_CUDA=ON", "cuda:0");
  EXPECT_ALPHA_ERROR(test::random({4}).to(Device::cuda(1)), DeviceError, "[Tensor::to]", "no CUDA backend", "cuda:1");
#endif
}

}  // namespace
}  // namespace alpha
