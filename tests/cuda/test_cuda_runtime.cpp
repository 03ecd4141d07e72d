// The CUDA runtime beside the kernel harness (test_kernel_harness.cpp): copies between host and device in
// every layout, fills, the ops dispatching by the device of their tensors, and the errors.
//
// Every test skips itself (GTEST_SKIP, which CTest reports as skipped) in a build without CUDA or on a
// machine without a GPU, except CudaDevices, which checks exactly that situation's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "alpha/kernels/elementwise.h"
#include "alpha/ops/check.h"
#include "alpha/ops/elementwise.h"
#include "alpha/tensor/cuda_graph.h"
#include "support/checks.h"
#include "support/gpu.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#include "alpha/runtime/kernel_trace.h"
#endif

namespace alpha {
namespace {

class CudaRuntime : public test::GpuTest<> {};

#if ALPHA_WITH_CUDA
const Device kGpu = Device::cuda(0);

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

// copy_many in one launch per list: runs of every word size it picks (16-byte vectors, 4-, 2- and 1-byte
// words), f32 runs converted into bf16 or f16 (the gradients packed into bf16 buckets: rounded as the CPU's
// conversion rounds), odd lengths and offsets, more runs than one launch takes, into a poisoned buffer whose
// gaps must keep the poison; and a list with a strided pair, which goes pair by pair.
TEST_F(CudaRuntime, CopyManyWritesEveryRunAndNothingBeside) {
#if ALPHA_WITH_CUDA
  struct Case {
    DType dtype;
    std::vector<int64_t> lengths;
    int64_t first, gap;  // offset of the first run; poisoned elements between two runs
    DType source;        // the runs' dtype: dtype, or f32 converted
  };
  const std::vector<Case> cases{
      {DType::f32, {4, 8, 1024, 4100}, 0, 4, DType::f32},             // 16-byte aligned throughout: vectors
      {DType::f32, {3, 1, 1001, 70000}, 1, 1, DType::f32},            // 4-byte words
      {DType::bf16, {7, 1, 333, 4097}, 1, 1, DType::bf16},            // 2-byte words
      {DType::u8, {5, 1, 999, 17}, 3, 1, DType::u8},                  // bytes
      {DType::f32, std::vector<int64_t>(300, 37), 2, 1, DType::f32},  // 300 runs: three launches
      {DType::bf16, {7, 1, 333, 70001}, 1, 1, DType::f32},            // converted
      {DType::f16, {5, 2, 1025, 4099}, 3, 2, DType::f32},
      {DType::bf16, std::vector<int64_t>(300, 37), 2, 1, DType::f32},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.source)) + " into " + std::string(dtype_name(c.dtype)) + " runs " +
                 std::to_string(c.lengths.size()));
    int64_t total = c.first;
    for (int64_t n : c.lengths) total += n + c.gap;
    Tensor poison = Tensor::full({total}, 3.0, c.dtype);
    Tensor buffer = poison.to(kGpu), want = poison.clone();
    std::vector<Tensor> dsts, srcs;
    int64_t at = c.first;
    for (int64_t n : c.lengths) {
      Tensor src = c.dtype == DType::u8 ? Tensor::full({n}, double(n % 251), DType::u8) : test::random({n}, c.source);
      want.slice(0, at, at + n).copy_from(src);
      dsts.push_back(buffer.slice(0, at, at + n));
      srcs.push_back(src.to(kGpu));
      at += n + c.gap;
    }
    copy_many(dsts, srcs);
    EXPECT_TRUE(test::bit_equal(buffer.to(Device::cpu()), want));
  }
  // A strided source among contiguous ones: pair by pair, the same values.
  Tensor a = test::random({6, 4}).to(kGpu), b = test::random({9}).to(kGpu);
  Tensor out_a = Tensor::zeros({4, 6}, DType::f32, kGpu), out_b = Tensor::zeros({9}, DType::f32, kGpu);
  std::vector<Tensor> dsts{out_a, out_b}, srcs{a.transpose(0, 1), b};
  copy_many(dsts, srcs);
  EXPECT_TRUE(test::bit_equal(out_a.to(Device::cpu()), a.transpose(0, 1).contiguous().to(Device::cpu())));
  EXPECT_TRUE(test::bit_equal(out_b.to(Device::cpu()), b.to(Device::cpu())));
#endif
}

TEST_F(CudaRuntime, OpsDispatchToTheTensorsDevice) {
#if ALPHA_WITH_CUDA
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor a = test::random({33, 65}, dtype), bt = test::random({65, 33}, dtype);
    Tensor ga = a.to(kGpu), gb = bt.to(kGpu).transpose(0, 1);  // gb: a strided device input
    Tensor a32 = a.to(DType::f32), b32 = bt.transpose(0, 1).to(DType::f32);
    uint64_t launches = kernel_launches();
    Tensor sum_ab = ops::add(ga, gb);
    EXPECT_EQ(kernel_launches(), launches + 1);
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

// f32, bf16 and f16 to f64, and f64 to f32, on the device: the CPU's values bit for bit, contiguous and strided,
// and no copy through the host (CUPTI sees kernels only: a conversion through the host would show a memcpy
// each way, and wait for the device).
TEST_F(CudaRuntime, F64ConversionsRunOnTheDeviceWithTheCpusBits) {
#if ALPHA_WITH_CUDA
  std::vector<std::pair<Tensor, Tensor>> pairs;  // (converted on the GPU, the CPU's conversion)
  std::vector<Tensor> sources;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) sources.push_back(test::random({67, 130}, dtype).to(kGpu));
  sources.push_back(test::random({67, 130}, DType::f64).to(kGpu));
  cuda::KernelTrace trace;
  trace.start("F64ConversionsRunOnTheDeviceWithTheCpusBits");
  for (const Tensor& src : sources) {
    const DType to = src.dtype() == DType::f64 ? DType::f32 : DType::f64;
    pairs.push_back({src.to(to), Tensor()});
    pairs.push_back({src.transpose(0, 1).to(to), Tensor()});  // strided: the element kernel
  }
  const std::vector<cuda::TracedActivity> ran = trace.stop();
  for (size_t k = 0; k < sources.size(); ++k) {
    const Tensor host = sources[k].to(Device::cpu());
    const DType to = host.dtype() == DType::f64 ? DType::f32 : DType::f64;
    pairs[2 * k].second = host.to(to);
    pairs[2 * k + 1].second = host.transpose(0, 1).to(to);
  }
  for (const auto& [got, want] : pairs) {
    EXPECT_TRUE(got.device().is_cuda());
    EXPECT_TRUE(test::bit_equal(got.to(Device::cpu()), want)) << want.describe();
  }
  ASSERT_FALSE(ran.empty());
  for (const cuda::TracedActivity& a : ran)
    EXPECT_EQ(a.kind, cuda::TracedActivity::Kind::kernel) << a.name << ": a conversion went through the host";
#endif
}

// HostCopy of a GPU tensor: the values the work queued before it produced, not those of work queued after it
// (an in-place fill the copy must not see); one read pending per device; the staging buffer's size enforced.
TEST_F(CudaRuntime, HostCopyReadsWhatTheWorkBeforeItWrote) {
#if ALPHA_WITH_CUDA
  const Tensor host = test::random({3, 1001}, DType::f32);
  Tensor x = host.to(kGpu);
  x.copy_from(ops::scale(x, 2.0));  // queued before the copy: seen
  const Tensor want = ops::scale(host, 2.0);
  const Tensor norm = Tensor::full({}, 1.25, DType::f64).to(kGpu);
  HostCopy copy({x.slice(1, 7, 600), norm});  // two tensors of two dtypes, one read
  x.fill_(7.0);  // queued after it: not seen
  EXPECT_ALPHA_ERROR(HostCopy({x.slice(0, 0, 1)}), ValueError, "[begin_host_read]", "pending");
  const std::vector<Tensor> got = copy.wait();
  EXPECT_TRUE(got[0].device().is_cpu());
  EXPECT_TRUE(test::bit_equal(got[0], want.slice(1, 7, 600)));
  EXPECT_EQ(got[1].item(), 1.25);
  HostCopy again({x.slice(0, 2, 3)});  // the slot is free again
  EXPECT_TRUE(test::bit_equal(again.wait()[0], Tensor::full({1, 1001}, 7.0, DType::f32)));
  const Tensor too_big = Tensor::zeros({int64_t(cuda::kHostReadBytes / 4 + 1)}, DType::f32, kGpu);
  EXPECT_ALPHA_ERROR(HostCopy({too_big}), ValueError, "[begin_host_read]", "'bytes'");
  EXPECT_ALPHA_ERROR(HostCopy({norm, Tensor::full({}, 1.0, DType::f64)}), DeviceError, "[HostCopy]", "sources[1]");
#endif
}

// A CUDA graph replays its recorded work on what its inputs hold at the replay, into the tensors the capture
// allocated (its output), and leaves the memory it worked in to no other tensor; a capture that waits for the
// device (a read to the host) raises BackendError, and the device and its allocator work on afterwards.
TEST_F(CudaRuntime, GraphReplaysItsWorkOnNewInputsInItsOwnMemory) {
#if ALPHA_WITH_CUDA
  const Tensor first = test::random({1001}, DType::f32), second = test::random({1001}, DType::f32, -3.0, 3.0);
  Tensor x = Tensor::zeros({1001}, DType::f32, kGpu);
  Tensor y;
  const Tensor poison = Tensor::full({1001}, std::nan(""), DType::f32);
  CudaGraph graph(kGpu, [&] { y = ops::scale(ops::add(x, x), 3.0); });  // add's output is freed in the capture
  EXPECT_GE(graph.nodes(), 2u);
  y.copy_from(poison);  // nothing ran yet: the replay writes it
  x.copy_from(first);
  graph.replay();
  EXPECT_TRUE(test::bit_equal(y.to(Device::cpu()), ops::scale(ops::add(first, first), 3.0)));
  x.copy_from(second);
  graph.replay();
  EXPECT_TRUE(test::bit_equal(y.to(Device::cpu()), ops::scale(ops::add(second, second), 3.0)));
  // Eager tensors of the intermediate's size are never the graph's blocks: the replay does not change them.
  std::vector<Tensor> eager;
  for (int i = 0; i < 4; ++i) eager.push_back(Tensor::full({1001}, double(i), DType::f32, kGpu));
  graph.replay();
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(test::bit_equal(eager[size_t(i)].to(Device::cpu()), Tensor::full({1001}, double(i), DType::f32)));
  EXPECT_THROW(CudaGraph(kGpu, [&] { (void)ops::add(x, x).to(Device::cpu()); }), BackendError);
  EXPECT_TRUE(test::bit_equal(ops::add(x, x).to(Device::cpu()), ops::add(second, second)));
#endif
}

}  // namespace
}  // namespace alpha
