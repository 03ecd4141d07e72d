// Times configurations of the Hopper flash attention forward (tma_forward_kernel,
// kernels/cuda/flash_attention_tma_forward.cuh) side by side on the same inputs, to choose the library's
// configuration per head-dimension bucket and key range (flash_attention_tma_forward.cu). Each
// configuration's output is first compared with the library's call (its current choice) on fresh N(0, 1)
// inputs, the output poisoned before each run: a configuration that is wrong is reported, not timed. At D 128 the
// library's call is timed too ("library"), which shows the configuration it chose. A benchmark, not a test (the GPU
// tests check the library's choices against the CPU reference).
//
// Output: one JSON line per (shape, configuration): milliseconds (mean of --iters calls queued back to
// back after --warmup, the best of three such rounds), TFLOP/s (4·B·H·T·T·D, halved when causal), and the
// largest difference from the library's output.
//
// Build: cmake --build build/cuda --target alpha_tma_forward_configs (it is not part of `all`).
// Usage: alpha_tma_forward_configs [--iters 30] [--warmup 5] [--head-dim 64|128] [--causal-only]   (needs an sm_90a
// GPU)
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "alpha/kernels/cuda/flash_attention_tma_forward.cuh"
#include "alpha/kernels/flash_attention.h"
#include "attention_shape.h"

namespace {

using alpha::bf16;
using alpha::kernels::AttentionForwardArgs;
using alpha::kernels::AttentionParams;
namespace tf = alpha::kernels::cuda::tma_forward;

using Shape = alpha::bench::AttentionShape;

void check(cudaError_t status, const char* what) { alpha::bench::check_cuda(status, "tma_forward_configs", what); }

struct Problem {
  Shape shape;
  AttentionParams<bf16> params;
  bf16 *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
  float *row_max = nullptr, *row_sum = nullptr;
  size_t elements = 0;
  std::vector<bf16> expected;  // the library's output, on the host

  Problem(const Shape& s, std::mt19937_64& rng) : shape(s), params(s.params()) {
    elements = size_t(s.elements());
    const size_t rows = size_t(s.rows());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<bf16> host(elements);
    for (bf16** operand : {&q, &k, &v}) {
      for (bf16& x : host) x = bf16(normal(rng));
      check(cudaMalloc(operand, elements * sizeof(bf16)), "cudaMalloc");
      check(cudaMemcpy(*operand, host.data(), elements * sizeof(bf16), cudaMemcpyHostToDevice), "copy");
    }
    check(cudaMalloc(&out, elements * sizeof(bf16)), "cudaMalloc");
    check(cudaMalloc(&row_max, rows * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&row_sum, rows * sizeof(float)), "cudaMalloc");
    alpha::kernels::cuda::flash_attention_forward(args(out), alpha::Stream{nullptr});
    expected.resize(elements);
    check(cudaMemcpy(expected.data(), out, elements * sizeof(bf16), cudaMemcpyDeviceToHost), "library forward");
  }
  ~Problem() {
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)out, (void*)row_max, (void*)row_sum}) cudaFree(p);
  }
  AttentionForwardArgs<bf16> args(bf16* o) const { return {q, k, v, o, row_max, row_sum, params}; }
  double tflop() const {
    const double f = 4.0 * double(shape.batch * shape.heads) * double(shape.seq) * double(shape.seq) * double(shape.head_dim);
    return (shape.causal ? f / 2 : f) / 1e12;
  }
};

// The largest |out − expected|, after a run of `launch` on an output poisoned with NaN.
template <class Launch>
double difference(const Problem& problem, const Launch& launch) {
  check(cudaMemset(problem.out, 0xff, problem.elements * sizeof(bf16)), "poison");
  launch(problem.args(problem.out));
  std::vector<bf16> got(problem.elements);
  check(cudaMemcpy(got.data(), problem.out, got.size() * sizeof(bf16), cudaMemcpyDeviceToHost), "copy");
  double worst = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const double d = std::abs(double(float(got[e])) - double(float(problem.expected[e])));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

template <class Launch>
double milliseconds(const Problem& problem, int warmup, int iters, const Launch& launch) {
  const auto args = problem.args(problem.out);
  for (int i = 0; i < warmup; ++i) launch(args);
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  double best = INFINITY;
  for (int round = 0; round < 3; ++round) {
    check(cudaEventRecord(start), "record");
    for (int i = 0; i < iters; ++i) launch(args);
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    best = std::min(best, double(ms) / iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

template <class Launch>
void measure_launch(const char* name, const Problem& problem, int warmup, int iters, const Launch& launch) {
  const Shape& s = problem.shape;
  const double diff = difference(problem, launch);
  // bf16 outputs of two summation orders differ by a few units in the last place of values below ~4.
  const bool agrees = diff <= 0.0625;
  const double ms = agrees ? milliseconds(problem, warmup, iters, launch) : NAN;
  std::printf("{\"batch\": %ld, \"heads\": %ld, \"seq\": %ld, \"head_dim\": %ld, \"causal\": %s, \"config\": \"%s\", "
              "\"max_diff\": %.4g, \"ms\": %.4f, \"tflops\": %.1f}\n",
              long(s.batch), long(s.heads), long(s.seq), long(s.head_dim), s.causal ? "true" : "false", name, diff,
              ms, agrees ? problem.tflop() / (ms * 1e-3) : 0.0);
  std::fflush(stdout);
}

template <class Traits>
void measure(const char* name, const Problem& problem, int warmup, int iters) {
  measure_launch(name, problem, warmup, iters,
                 [](const AttentionForwardArgs<bf16>& args) { tf::launch_tma_forward<bf16, Traits>(args, nullptr); });
}

// The library's call, whichever configuration it chooses.
void measure_library(const Problem& problem, int warmup, int iters) {
  measure_launch("library", problem, warmup, iters, [](const AttentionForwardArgs<bf16>& args) {
    alpha::kernels::cuda::flash_attention_forward(args, alpha::Stream{nullptr});
  });
}

// The configurations compared: TmaForwardConfig<bucket, consumer warpgroups, keys per tile, stages,
// consumer registers, producer registers, blocks per SM, tile schedule>.
using D64Short = tf::TmaForward64Short;
using D64ShortPersistent = tf::TmaForwardConfig<64, 1, 64, 4, 136, 24, 3, tf::TileSchedule::kPersistentByHead>;
using D64Long = tf::TmaForward64Long;
using D64LongPersistent = tf::TmaForwardConfig<64, 3, 128, 2, 160, 32, 1, tf::TileSchedule::kPersistentByHead>;
using D64TwoConsumersShort = tf::TmaForwardConfig<64, 2, 64, 4, 104, 24, 2, tf::TileSchedule::kOnePerBlock>;
using D64Long96Keys = tf::TmaForwardConfig<64, 3, 96, 2, 160, 32, 1, tf::TileSchedule::kOnePerBlock>;
// D 128's persistent shape at D 64 (not yet timed).
using D64TwoConsumersPersistent = tf::TmaForwardConfig<64, 2, 128, 3, 232, 40, 1, tf::TileSchedule::kPersistentByHead>;
using D128Short = tf::TmaForward128Short;
using D128Long = tf::TmaForward128;
using D128LongPersistent = tf::TmaForward128Persistent;
using D128LongPersistentByTile = tf::TmaForward128PersistentByTile;
using D128LongPersistent240 = tf::TmaForwardConfig<128, 2, 128, 2, 240, 24, 1, tf::TileSchedule::kPersistentByHead>;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Configurations of the Hopper flash attention forward, side by side"};
  int iters = 30, warmup = 5, head_dim = 0;
  bool causal_only = false;
  app.add_option("--iters", iters);
  app.add_option("--warmup", warmup);
  app.add_option("--head-dim", head_dim, "only this head dimension's shapes (64 or 128; 0: both)")
      ->check(CLI::IsMember({0, 64, 128}));
  app.add_flag("--causal-only", causal_only, "only the shapes under a causal mask");
  CLI11_PARSE(app, argc, argv);
  std::mt19937_64 rng(7);
  const bool d64 = head_dim != 128, d128 = head_dim != 64;
  const auto measure_d128 = [&](const Problem& problem, bool with_240_registers) {
    measure<D128Short>("128 short: 1 consumer, 64 keys, 3 stages, 2 blocks/SM", problem, warmup, iters);
    measure<D128Long>("128 long: 2 consumers, 128 keys, 2 stages", problem, warmup, iters);
    measure<D128LongPersistent>("128 long, persistent (232 / 32 registers)", problem, warmup, iters);
    measure<D128LongPersistentByTile>("128 long, persistent, tiles ordered tile by tile", problem, warmup, iters);
    if (with_240_registers)
      measure<D128LongPersistent240>("128 long, persistent, 240 / 24 registers", problem, warmup, iters);
    measure_library(problem, warmup, iters);
  };
  for (const bool causal : {false, true}) {
    if (causal_only && !causal) continue;
    for (const Shape& s :
         {Shape{32, 32, 512, 64, causal}, Shape{16, 12, 1024, 64, causal}, Shape{8, 32, 2048, 64, causal},
          Shape{4, 32, 4096, 64, causal}, Shape{2, 32, 8192, 64, causal}, Shape{1, 32, 16384, 64, causal}}) {
      if (!d64) break;
      const Problem problem(s, rng);
      measure<D64Short>("64 short: 1 consumer, 64 keys, 4 stages, 3 blocks/SM", problem, warmup, iters);
      measure<D64ShortPersistent>("64 short, persistent", problem, warmup, iters);
      measure<D64Long>("64 long: 3 consumers, 128 keys, 2 stages", problem, warmup, iters);
      measure<D64LongPersistent>("64 long, persistent", problem, warmup, iters);
      measure<D64TwoConsumersShort>("64: 2 consumers, 64 keys, 4 stages, 2 blocks/SM", problem, warmup, iters);
      measure<D64Long96Keys>("64: 3 consumers, 96 keys, 2 stages", problem, warmup, iters);
      measure<D64TwoConsumersPersistent>("64: 2 consumers, 128 keys, 3 stages, persistent", problem, warmup, iters);
    }
    for (const Shape& s :
         {Shape{32, 16, 512, 128, causal}, Shape{16, 16, 1024, 128, causal}, Shape{8, 16, 2048, 128, causal},
          Shape{4, 16, 4096, 128, causal}, Shape{2, 16, 8192, 128, causal}, Shape{1, 16, 1280, 128, causal}}) {
      if (!d128) break;
      measure_d128(Problem(s, rng), true);
    }
  }
  // Causal shapes of few tiles a block, where persistent blocks' fixed shares head by head balance badly, and of heads
  // about as many as blocks: what flash_attention_wgmma_forward's choice between the two orders rests on.
  for (const Shape& s : {Shape{1, 12, 2048, 128, true}, Shape{2, 12, 2048, 128, true}, Shape{1, 32, 2048, 128, true},
                         Shape{2, 32, 2048, 128, true}, Shape{4, 16, 2048, 128, true}, Shape{3, 7, 1500, 128, true},
                         Shape{1, 48, 4096, 128, true}, Shape{2, 32, 4096, 128, true}}) {
    if (!d128) break;
    measure_d128(Problem(s, rng), false);
  }
  return 0;
}
