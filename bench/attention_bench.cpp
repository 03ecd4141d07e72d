// Times Alpha's GPU attention on one shape and prints one JSON line of milliseconds per call (the median of
// --iters synchronised calls after --warmup; with --queued, the mean of --iters calls back to back: see
// call_ms). --mode train (the default): ops::flash_attention and its backward ("forward_ms",
// "backward_ms"; "backward_atomic_ms": the opt-in non-deterministic atomic-dQ backward, except with
// --constant-time), driven by bench/flash_attention.py beside PyTorch's SDPA backends. --mode jvp: the forward
// again ("forward_ms"), the fused JVP ops::attention_jvp_fused ("jvp_fused_ms"), the saved-statistics JVP
// ops::attention_jvp on the forward's results ("jvp_saved_ms"), and the device memory the fused JVP call
// allocates ("jvp_fused_bytes": out, tangent and statistics, O(B·H·T·Dv); no T×T buffer), driven by
// bench/attention_jvp.py beside torch.func.jvp. The drivers compute TFLOP/s and ratios. A benchmark, not
// a test: it asserts nothing.
//
// Usage: alpha_attention_bench --batch B --heads H --kv-heads HKV --seq T --head-dim D [--causal]
//                              [--dtype bf16|f16] [--mode train|jvp] [--iters 20] [--warmup 5] [--queued]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/attention_jvp.h"
#include "alpha/runtime/cuda_backend.h"
#include "alpha/tensor/allocator.h"

namespace {

// Milliseconds per call of fn on the device's default stream, after `warmup` calls. By default the median of
// `iters` calls, each between two events and synchronised: its latency, the host's time before the launch
// included. queued: the mean of `iters` calls issued back to back between one pair of events: the
// throughput of a loop whose host runs ahead of the GPU, as in training.
double call_ms(const std::function<void()>& fn, int warmup, int iters, bool queued) {
  cudaStream_t stream = static_cast<cudaStream_t>(alpha::cuda::default_stream(0).handle);
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  auto elapsed_ms = [&] {
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return double(ms);
  };
  std::vector<double> times;
  if (queued) {
    cudaEventRecord(start, stream);
    for (int i = 0; i < iters; ++i) fn();
    cudaEventRecord(stop, stream);
    times.push_back(elapsed_ms() / iters);
  } else {
    for (int i = 0; i < iters; ++i) {
      cudaEventRecord(start, stream);
      fn();
      cudaEventRecord(stop, stream);
      times.push_back(elapsed_ms());
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time Alpha's GPU attention (forward and backward, or the JVP) on one shape"};
  int64_t batch = 1, heads = 1, kv_heads = 0, seq = 512, head_dim = 64;
  bool causal = false;
  std::string dtype_name = "bf16", mode = "train";
  int iters = 20, warmup = 5;
  bool queued = false;
  app.add_option("--batch", batch)->required();
  app.add_option("--heads", heads)->required();
  app.add_option("--kv-heads", kv_heads, "0: as many as --heads");
  app.add_option("--seq", seq)->required();
  app.add_option("--head-dim", head_dim)->required();
  app.add_flag("--causal", causal);
  bool constant_time = false;
  app.add_flag("--constant-time", constant_time, "config.constant_time (issue 8)");
  app.add_option("--dtype", dtype_name)->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--mode", mode)->check(CLI::IsMember({"train", "jvp"}));
  app.add_option("--iters", iters);
  app.add_option("--warmup", warmup);
  app.add_flag("--queued", queued, "time --iters calls back to back between one pair of events (see call_ms)");
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
    config.constant_time = constant_time;
    alpha::ops::AttentionOutput out = alpha::ops::flash_attention(q, k, v, config);
    auto timed = [&](const std::function<void()>& fn) { return call_ms(fn, warmup, iters, queued); };
    if (mode == "jvp") {
      alpha::Tensor tq = input(heads, 5), tk = input(kv_heads, 6), tv = input(kv_heads, 7);
      const double forward_ms = timed([&] { out = alpha::ops::flash_attention(q, k, v, config); });
      alpha::CachingAllocator& memory = alpha::allocator_for(gpu);
      const uint64_t before = memory.stats().bytes_in_use;
      memory.reset_peak();
      alpha::ops::AttentionJvpOutput jvp = alpha::ops::attention_jvp_fused(q, k, v, tq, tk, tv, config);
      const uint64_t fused_bytes = memory.stats().peak_bytes_in_use - before;
      const double fused_ms = timed([&] { jvp = alpha::ops::attention_jvp_fused(q, k, v, tq, tk, tv, config); });
      const double saved_ms =
          timed([&] { alpha::ops::attention_jvp(q, k, v, tq, tk, tv, out.out, out.row_max, out.row_sum, config); });
      std::printf("{\"forward_ms\": %.6f, \"jvp_fused_ms\": %.6f, \"jvp_saved_ms\": %.6f, \"jvp_fused_bytes\": %llu}\n",
                  forward_ms, fused_ms, saved_ms, static_cast<unsigned long long>(fused_bytes));
      return 0;
    }
    alpha::Tensor dout = input(heads, 4);
    const double forward_ms = timed([&] { out = alpha::ops::flash_attention(q, k, v, config); });
    auto backward_ms = [&] {
      return timed(
          [&] { alpha::ops::flash_attention_backward(dout, q, k, v, out.out, out.row_max, out.row_sum, config); });
    };
    const double deterministic_ms = backward_ms();
    if (constant_time) {  // the atomic-dQ backward is not constant-time (ops refuse the pair)
      std::printf("{\"forward_ms\": %.6f, \"backward_ms\": %.6f}\n", forward_ms, deterministic_ms);
      return 0;
    }
    config.deterministic = false;
    const double atomic_ms = backward_ms();
    std::printf("{\"forward_ms\": %.6f, \"backward_ms\": %.6f, \"backward_atomic_ms\": %.6f}\n", forward_ms,
                deterministic_ms, atomic_ms);
  } catch (const alpha::Error& e) {
    std::fprintf(stderr, "alpha_attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
