// Times Alpha's Native Sparse Attention on the GPU (ops::nsa and ops::nsa_backward, kernels/cuda/nsa.cu) next to
// our dense causal flash attention (ops::flash_attention) and flash attention with a causal sliding window of
// --window tokens, on the same q, k, v, and prints one JSON line of median milliseconds over --iters runs after
// --warmup: "nsa_forward_ms", "nsa_backward_ms", "dense_forward_ms", "dense_backward_ms", "window_forward_ms",
// "window_backward_ms". Driven by bench/nsa.py, which computes the speedups. A benchmark, not a test: it asserts
// nothing. NSA uses the paper's blocks by default (l 32, d 16, l' 64, n 16, w 512).
//
// Usage: alpha_nsa_bench --seq T [--batch 1] [--heads 64] [--kv-heads 4] [--head-dim 128] [--dtype bf16|f16|f32]
//                        [--iters 10] [--warmup 3] [--no-dense]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/ops/attention.h"
#include "alpha/ops/nsa.h"
#include "alpha/runtime/cuda_backend.h"

namespace {

// Median milliseconds of fn over `iters` runs: every run between its own pair of events on the device's default
// stream, queued back to back, read after one synchronisation at the end.
double median_ms(const std::function<void()>& fn, int warmup, int iters) {
  cudaStream_t stream = static_cast<cudaStream_t>(alpha::cuda::default_stream(0).handle);
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<cudaEvent_t> marks(size_t(iters) + 1);
  for (cudaEvent_t& e : marks) cudaEventCreate(&e);
  cudaEventRecord(marks[0], stream);
  for (int i = 0; i < iters; ++i) {
    fn();
    cudaEventRecord(marks[size_t(i) + 1], stream);
  }
  cudaEventSynchronize(marks.back());
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, marks[size_t(i)], marks[size_t(i) + 1]);
    times.push_back(ms);
  }
  for (cudaEvent_t& e : marks) cudaEventDestroy(e);
  std::nth_element(times.begin(), times.begin() + long(times.size() / 2), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time Alpha's NSA forward and backward next to dense and sliding-window flash attention"};
  int64_t batch = 1, heads = 64, kv_heads = 4, seq = 8192, head_dim = 128;
  alpha::ops::NsaConfig nsa;
  std::string dtype_name = "bf16";
  int iters = 10, warmup = 3;
  bool no_dense = false, forward_only = false;
  app.add_option("--seq", seq)->required();
  app.add_option("--batch", batch);
  app.add_option("--heads", heads);
  app.add_option("--kv-heads", kv_heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--block", nsa.block_len);
  app.add_option("--stride", nsa.block_stride);
  app.add_option("--select-block", nsa.select_len);
  app.add_option("--select-count", nsa.select_count);
  app.add_option("--window", nsa.window);
  app.add_option("--dtype", dtype_name)->check(CLI::IsMember({"bf16", "f16", "f32"}));
  app.add_option("--iters", iters);
  app.add_option("--warmup", warmup);
  app.add_flag("--no-dense", no_dense, "time NSA only");
  app.add_flag("--forward-only", forward_only, "time the forward passes only");
  CLI11_PARSE(app, argc, argv);
  try {
    const alpha::Device gpu = alpha::Device::cuda(0);
    const alpha::DType dtype = dtype_name == "bf16"  ? alpha::DType::bf16
                               : dtype_name == "f16" ? alpha::DType::f16
                                                     : alpha::DType::f32;
    auto uniform = [&](alpha::Shape shape, double bound, uint64_t seed) {
      return alpha::Tensor::uniform(std::move(shape), -bound, bound, seed, alpha::DType::f32, gpu).to(dtype);
    };
    const int64_t l = nsa.block_len, D = head_dim;
    alpha::ops::NsaInputs in{uniform({batch, seq, heads, D}, 1.0, 1),
                             uniform({batch, seq, kv_heads, D}, 1.0, 2),
                             uniform({batch, seq, kv_heads, D}, 1.0, 3),
                             uniform({batch, seq, heads, 3}, 2.0, 4),
                             uniform({l, D}, 1.0, 5),
                             uniform({D, l * D}, 1.0 / std::sqrt(double(l * D)), 6),
                             uniform({l, D}, 1.0, 7),
                             uniform({D, l * D}, 1.0 / std::sqrt(double(l * D)), 8)};
    const alpha::Tensor dout = uniform({batch, seq, heads, D}, 1.0, 9);
    alpha::ops::NsaOutput out = alpha::ops::nsa(in, nsa);
    const double nsa_forward = median_ms([&] { out = alpha::ops::nsa(in, nsa); }, warmup, iters);
    std::printf("{\"nsa_forward_ms\": %.6f", nsa_forward);
    if (!forward_only)
      std::printf(", \"nsa_backward_ms\": %.6f",
                  median_ms([&] { alpha::ops::nsa_backward(dout, in, out, nsa); }, warmup, iters));
    if (!no_dense) {
      for (bool windowed : {false, true}) {
        alpha::ops::AttentionConfig config;
        config.causal = true;
        if (windowed) config.window_left = nsa.window - 1;
        alpha::ops::AttentionOutput dense = alpha::ops::flash_attention(in.q, in.k, in.v, config);
        const double forward =
            median_ms([&] { dense = alpha::ops::flash_attention(in.q, in.k, in.v, config); }, warmup, iters);
        const char* name = windowed ? "window" : "dense";
        std::printf(", \"%s_forward_ms\": %.6f", name, forward);
        if (forward_only) continue;
        const double backward = median_ms(
            [&] {
              alpha::ops::flash_attention_backward(dout, in.q, in.k, in.v, dense.out, dense.row_max, dense.row_sum,
                                                   config);
            },
            warmup, iters);
        std::printf(", \"%s_backward_ms\": %.6f", name, backward);
      }
    }
    std::printf("}\n");
  } catch (const alpha::Error& e) {
    std::fprintf(stderr, "alpha_nsa_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
