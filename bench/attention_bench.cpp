// Times Alpha's GPU attention (ops::flash_attention and its backward) on one shape and prints one JSON
// line: the median forward and backward milliseconds over --iters runs after --warmup. The Python driver
// bench/flash_attention.py runs it for every benchmark row beside PyTorch's SDPA backends and computes
// TFLOP/s and ratios. A benchmark, not a test: it asserts nothing.
//
// Usage: alpha_attention_bench --batch B --heads H --kv-heads HKV --seq T --head-dim D [--causal]
//                              [--dtype bf16|f16] [--iters 20] [--warmup 5]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/ops/attention.h"
#include "alpha/runtime/cuda_backend.h"

namespace {

// Median milliseconds of fn over `iters` runs, each timed with events on the device's default stream.
double median_ms(const std::function<void()>& fn, int warmup, int iters) {
  cudaStream_t stream = static_cast<cudaStream_t>(alpha::cuda::default_stream(0).handle);
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start, stream);
    fn();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time Alpha's GPU attention forward and backward on one shape"};
  int64_t batch = 1, heads = 1, kv_heads = 0, seq = 512, head_dim = 64;
  bool causal = false;
  std::string dtype_name = "bf16";
  int iters = 20, warmup = 5;
  app.add_option("--batch", batch)->required();
  app.add_option("--heads", heads)->required();
  app.add_option("--kv-heads", kv_heads, "0: as many as --heads");
  app.add_option("--seq", seq)->required();
  app.add_option("--head-dim", head_dim)->required();
  app.add_flag("--causal", causal);
  app.add_option("--dtype", dtype_name)->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--iters", iters);
  app.add_option("--warmup", warmup);
  CLI11_PARSE(app, argc, argv);
  if (kv_heads == 0) kv_heads = heads;
  try {
    const alpha::Device gpu = alpha::Device::cuda(0);
    const alpha::DType dtype = dtype_name == "bf16" ? alpha::DType::bf16 : alpha::DType::f16;
    auto input = [&](int64_t h, uint64_t seed) {
      return alpha::Tensor::uniform({batch, seq, h, head_dim}, -1.0, 1.0, seed, alpha::DType::f32, gpu).to(dtype);
    };
    alpha::Tensor q = input(heads, 1), k = input(kv_heads, 2), v = input(kv_heads, 3);
    alpha::ops::AttentionConfig config;
    config.causal = causal;
    alpha::ops::AttentionOutput out = alpha::ops::flash_attention(q, k, v, config);
    alpha::Tensor dout = input(heads, 4);
    const double forward_ms = median_ms([&] { out = alpha::ops::flash_attention(q, k, v, config); }, warmup, iters);
    const double backward_ms = median_ms(
        [&] { alpha::ops::flash_attention_backward(dout, q, k, v, out.out, out.row_max, out.row_sum, config); },
        warmup, iters);
    std::printf("{\"forward_ms\": %.6f, \"backward_ms\": %.6f}\n", forward_ms, backward_ms);
  } catch (const alpha::Error& e) {
    std::fprintf(stderr, "alpha_attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
