// The GPU side of the constant-time checks of flash attention's bf16 forward (issue 8; rules and results in
// docs/SECURITY.md). Three subcommands, each on one shape, against input classes chosen to drive the
// softmax into its corners:
//   zeros        q = k = v = 0 (every score 0, every row uniform)
//   one_hot      q, k ~ N(0, 16²): scores so large that each row's softmax is one-hot
//   denormal     every element ±1e-39 (bf16 subnormals; the products flush to zero)
//   huge         q, k, v ~ N(0, 1e4²): logits near 1e9
//   masked_rows  q = +1e20, k = −1e20: every score overflows to −inf, so every row is masked by its values
//   random       q, k, v ~ N(0, 1), the class every fixed one is compared with
//
//   timing    dudect (Reparaz et al. 2017): launches of all classes interleaved in one random order, each
//             timed by the events around it, on one working set of buffers (Problem), then a Welch t-test
//             of each fixed class against random, on all samples and on those under the pooled 90th
//             percentile (dudect's cropping: the tail is where scheduling noise lives). Fails at
//             |t| >= 4.5. With --leaky it times the positive control instead (the same kernel with a
//             branch on the sign of each score, flash_attention_mma_forward.cuh) and fails unless a class
//             is flagged.
//             With --pad P each timed launch is padded on the GPU to a time budget: a one-thread kernel
//             stamps %globaltimer before the forward and another spins on it after the forward until the
//             budget has passed since the stamp (pad_* below); the budget is P times the 99.9th
//             percentile of the constant-time kernel's time on random inputs, measured first (the leaky
//             control gets the same budget, which it overruns); launches that overrun are counted. An
//             experiment (docs/SECURITY.md: it did not remove the difference), not a library feature.
//             With --record FILE it also writes each timed launch's class and time, in launch order, for
//             `bench/constant_time.py --mode clocks`, which runs it under Nsight Compute to read each
//             launch's clock cycles beside its duration.
//   counters  one warm-up and --repeats measured launches of a class, for Nsight Compute
//             (bench/constant_time.py compares executed instructions, branches and memory sectors across
//             classes, and across the repeats of one class).
//   repeat    the forward run --runs times on random inputs: every output bit must match the first run.
//
// The constant-time kernel is the library's own (kernels::cuda::flash_attention_forward on bf16, the tensor-core
// kernel); the leaky control is its instantiation with kLeakyControl, built only here.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "alpha/kernels/cuda/flash_attention_mma_forward.cuh"
#include "alpha/kernels/flash_attention.h"
#include "attention_shape.h"

namespace {

using alpha::bf16;
using alpha::kernels::AttentionForwardArgs;
using alpha::kernels::AttentionParams;

using Shape = alpha::bench::AttentionShape;

void check(cudaError_t status, const char* what) { alpha::bench::check_cuda(status, "constant_time", what); }

const std::vector<std::string> kClasses = {"zeros", "one_hot", "denormal", "huge", "masked_rows", "random"};

// Host values of q, k and v for a class.
std::vector<float> class_values(const std::string& name, int which, size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t e = 0; e < n; ++e) {
    const float g = normal(rng);
    if (name == "zeros") x[e] = 0.0f;
    else if (name == "one_hot") x[e] = which == 2 ? g : 16.0f * g;
    else if (name == "denormal") x[e] = g < 0 ? -1e-39f : 1e-39f;
    else if (name == "huge") x[e] = 1e4f * g;
    else if (name == "masked_rows") x[e] = which == 0 ? 1e20f : which == 1 ? -1e20f : g;
    else x[e] = g;
  }
  return x;
}

// The time budget of --pad: the stamp kernel reads the GPU's nanosecond timer (the same for every SM), the
// wait kernel spins on it until `nanoseconds` have passed since the stamp and counts the launches that
// reached it late.
struct TimeBudget {
  uint64_t nanoseconds = 0;  // 0: launches are not padded
  uint64_t* stamp = nullptr;
  unsigned long long* overruns = nullptr;
};

__device__ __forceinline__ uint64_t global_nanoseconds() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void pad_stamp_kernel(uint64_t* stamp) { *stamp = global_nanoseconds(); }

__global__ void pad_wait_kernel(const uint64_t* stamp, uint64_t nanoseconds, unsigned long long* overruns) {
  const uint64_t deadline = *stamp + nanoseconds;
  uint64_t now = global_nanoseconds();
  if (now > deadline) atomicAdd(overruns, 1ull);
  while (now < deadline) now = global_nanoseconds();
}

// Device buffers of q, k and v (and, for the working set, out and the row statistics).
struct Buffers {
  bf16 *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
  float *row_max = nullptr, *row_sum = nullptr;
};

// Every class's inputs, and one working set the kernel runs on: each launch first copies its class's
// inputs into the working set (untimed), so every class runs at the same addresses. Without that, the
// classes' own buffers sit at different addresses, whose L2-slice and DRAM-bank mapping differ, and the
// timing test would measure placement, not values.
struct Problem {
  Shape shape;
  AttentionParams<bf16> params;
  std::map<std::string, Buffers> inputs;
  Buffers work;
  size_t operand_bytes = 0;
  TimeBudget budget;

  explicit Problem(const Shape& s, uint64_t seed) : shape(s), params(s.params()) {
    const int64_t elements = s.elements(), rows = s.rows();
    operand_bytes = size_t(elements) * sizeof(bf16);
    std::mt19937_64 rng(seed);
    for (const std::string& name : kClasses) {
      Buffers& b = inputs[name];
      bf16** operands[3] = {&b.q, &b.k, &b.v};
      for (int which = 0; which < 3; ++which) {
        std::vector<float> values = class_values(name, which, size_t(elements), rng);
        std::vector<bf16> host(values.size());
        std::transform(values.begin(), values.end(), host.begin(), [](float f) { return bf16(f); });
        check(cudaMalloc(operands[which], operand_bytes), "cudaMalloc");
        check(cudaMemcpy(*operands[which], host.data(), operand_bytes, cudaMemcpyHostToDevice), "copy");
      }
    }
    for (bf16** operand : {&work.q, &work.k, &work.v, &work.out}) check(cudaMalloc(operand, operand_bytes), "cudaMalloc");
    check(cudaMalloc(&work.row_max, size_t(rows) * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&work.row_sum, size_t(rows) * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&budget.stamp, sizeof(uint64_t)), "cudaMalloc");
    check(cudaMalloc(&budget.overruns, sizeof(unsigned long long)), "cudaMalloc");
    check(cudaMemset(budget.overruns, 0, sizeof(unsigned long long)), "cudaMemset");
  }

  // Copies a class's inputs into the working set (queued on `stream`).
  void stage(const std::string& name, cudaStream_t stream) const {
    const Buffers& from = inputs.at(name);
    for (auto [to, source] : {std::pair{work.q, from.q}, {work.k, from.k}, {work.v, from.v}})
      check(cudaMemcpyAsync(to, source, operand_bytes, cudaMemcpyDeviceToDevice, stream), "stage");
  }

  // The forward, padded to the time budget when one is set.
  void launch(bool leaky, cudaStream_t stream) const {
    if (budget.nanoseconds == 0) return launch_kernel(leaky, stream);
    pad_stamp_kernel<<<1, 1, 0, stream>>>(budget.stamp);
    launch_kernel(leaky, stream);
    pad_wait_kernel<<<1, 1, 0, stream>>>(budget.stamp, budget.nanoseconds, budget.overruns);
    check(cudaGetLastError(), "padding");
  }
  unsigned long long overruns() const {
    unsigned long long n = 0;
    check(cudaMemcpy(&n, budget.overruns, sizeof(n), cudaMemcpyDeviceToHost), "copy");
    return n;
  }

 private:
  void launch_kernel(bool leaky, cudaStream_t stream) const {
    const AttentionForwardArgs<bf16> args{work.q, work.k, work.v, work.out, work.row_max, work.row_sum, params};
    if (leaky) {
      if (shape.head_dim != 64) {
        std::fprintf(stderr, "constant_time: the leaky control is built for head_dim 64 only\n");
        std::exit(2);
      }
      alpha::kernels::cuda::mma_forward::launch_mma_forward<bf16, 64, true>(args, stream);
    } else {
      alpha::kernels::cuda::flash_attention_forward(args, alpha::Stream{stream});
    }
  }
};

struct Welch {
  double t;
  size_t n_fixed, n_random;
  double mean_fixed, mean_random;
};

Welch welch(const std::vector<double>& a, const std::vector<double>& b) {
  auto stats = [](const std::vector<double>& x) {
    double mean = 0, var = 0;
    for (double v : x) mean += v;
    mean /= double(x.size());
    for (double v : x) var += (v - mean) * (v - mean);
    return std::pair{mean, var / double(x.size() - 1)};
  };
  const auto [ma, va] = stats(a);
  const auto [mb, vb] = stats(b);
  return {(ma - mb) / std::sqrt(va / double(a.size()) + vb / double(b.size())), a.size(), b.size(), ma, mb};
}

// Each launch's microseconds: launches of the classes order[l] names (indices into `classes`), each after its
// inputs are staged, timed by the events around it, in batches between one host synchronisation.
std::vector<double> timed_launches(const Problem& problem, bool leaky, const std::vector<std::string>& classes,
                                   const std::vector<int>& order, cudaStream_t stream) {
  constexpr size_t kBatch = 2048;
  std::vector<cudaEvent_t> starts(kBatch), stops(kBatch);
  for (size_t l = 0; l < kBatch; ++l) check(cudaEventCreate(&starts[l]), "event"), check(cudaEventCreate(&stops[l]), "event");
  std::vector<double> times;
  for (size_t first = 0; first < order.size(); first += kBatch) {
    const size_t count = std::min(kBatch, order.size() - first);
    for (size_t l = 0; l < count; ++l) {
      problem.stage(classes[size_t(order[first + l])], stream);
      check(cudaEventRecord(starts[l], stream), "record");
      problem.launch(leaky, stream);
      check(cudaEventRecord(stops[l], stream), "record");
    }
    check(cudaEventSynchronize(stops[count - 1]), "sync");
    for (size_t l = 0; l < count; ++l) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, starts[l], stops[l]), "elapsed");
      times.push_back(1000.0 * ms);
    }
  }
  for (size_t l = 0; l < kBatch; ++l) cudaEventDestroy(starts[l]), cudaEventDestroy(stops[l]);
  return times;
}

int run_timing(Problem& problem, bool leaky, int64_t per_class, uint64_t seed, double pad, const std::string& record) {
  // Opened before the run, so that a path that cannot be written fails at once, not after it.
  FILE* record_file = record.empty() ? nullptr : std::fopen(record.c_str(), "w");
  if (!record.empty() && record_file == nullptr) {
    std::fprintf(stderr, "constant_time: timing --record: cannot write %s\n", record.c_str());
    return 2;
  }
  const std::vector<std::string> classes = leaky ? std::vector<std::string>{"zeros", "random"} : kClasses;
  std::vector<int> order;
  for (size_t c = 0; c < classes.size(); ++c) order.insert(order.end(), size_t(per_class), int(c));
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  for (const std::string& name : classes)
    for (int w = 0; w < 20; ++w) problem.stage(name, stream), problem.launch(leaky, stream);
  double random_p999 = 0;
  if (pad > 0) {  // the budget: pad × the constant-time kernel's 99.9th percentile on random inputs
    std::vector<double> calibration = timed_launches(problem, false, {"random"}, std::vector<int>(4000, 0), stream);
    std::sort(calibration.begin(), calibration.end());
    random_p999 = calibration[size_t(0.999 * double(calibration.size() - 1))];
    problem.budget.nanoseconds = uint64_t(pad * random_p999 * 1e3);
  }
  const unsigned long long overruns_before = problem.overruns();
  const std::vector<double> in_order = timed_launches(problem, leaky, classes, order, stream);
  const unsigned long long overruns = problem.overruns() - overruns_before;
  std::vector<std::vector<double>> times(classes.size());
  for (size_t l = 0; l < order.size(); ++l) times[size_t(order[l])].push_back(in_order[l]);
  if (record_file != nullptr) {
    std::fprintf(record_file, "launch,class,microseconds\n");
    for (size_t l = 0; l < order.size(); ++l)
      std::fprintf(record_file, "%zu,%s,%.4f\n", l, classes[size_t(order[l])].c_str(), in_order[l]);
    std::fclose(record_file);
  }
  std::vector<double> pooled = in_order;
  std::sort(pooled.begin(), pooled.end());
  const double crop = pooled[size_t(0.9 * double(pooled.size() - 1))];
  auto cropped = [crop](const std::vector<double>& x) {
    std::vector<double> kept;
    std::copy_if(x.begin(), x.end(), std::back_inserter(kept), [crop](double v) { return v <= crop; });
    return kept;
  };
  const std::vector<double>& random = times.back();
  std::printf("%s kernel, B %ld H %ld T %ld D %ld%s, %ld launches per class, %zu in all (microseconds)\n",
              leaky ? "leaky control" : "constant-time", long(problem.shape.batch), long(problem.shape.heads),
              long(problem.shape.seq), long(problem.shape.head_dim), problem.shape.causal ? " causal" : "",
              long(per_class), order.size());
  if (pad > 0)
    std::printf("padded to %.2f us (%.2f x the constant-time kernel's 99.9th percentile on random inputs, %.2f us); "
                "%llu of %zu launches overran it\n",
                1e-3 * double(problem.budget.nanoseconds), pad, random_p999, overruns, order.size());
  std::printf("%-12s %10s %10s %9s %9s\n", "class", "mean", "random", "t", "t(p90)");
  double worst = 0;
  for (size_t c = 0; c + 1 < classes.size(); ++c) {
    const Welch all = welch(times[c], random);
    const Welch low = welch(cropped(times[c]), cropped(random));
    worst = std::max({worst, std::abs(all.t), std::abs(low.t)});
    std::printf("%-12s %10.3f %10.3f %9.2f %9.2f\n", classes[c].c_str(), all.mean_fixed, all.mean_random, all.t,
                low.t);
  }
  const bool leak_found = worst >= 4.5;
  std::printf("max |t| = %.2f: %s\n", worst,
              leaky ? (leak_found ? "PASS (the leak is detected)" : "FAIL (the positive control was not detected)")
                    : (leak_found ? "FAIL (timing depends on the input class)" : "PASS"));
  return leaky != leak_found ? 1 : 0;
}

int run_repeat(Problem& problem, int runs) {
  std::vector<unsigned char> first(problem.operand_bytes), now(problem.operand_bytes);
  problem.stage("random", nullptr);
  int identical = 0;
  for (int r = 0; r < runs; ++r) {
    check(cudaMemset(problem.work.out, 0xff, problem.operand_bytes), "poison");  // NaN: a skipped write fails
    problem.launch(false, nullptr);
    check(cudaMemcpy(r == 0 ? first.data() : now.data(), problem.work.out, problem.operand_bytes,
                     cudaMemcpyDeviceToHost),
          "copy");
    identical += r == 0 || std::memcmp(first.data(), now.data(), problem.operand_bytes) == 0;
  }
  std::printf("repeat: %d of %d runs bitwise identical to the first\n", identical, runs);
  return identical == runs ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Constant-time checks of the bf16 flash attention forward (docs/SECURITY.md)"};
  app.require_subcommand(1);
  Shape shape{1, 16, 1024, 64, true};
  uint64_t seed = 1;
  app.add_option("--batch", shape.batch);
  app.add_option("--heads", shape.heads);
  app.add_option("--seq", shape.seq);
  app.add_option("--head-dim", shape.head_dim);
  app.add_option("--causal", shape.causal, "bottom-right causal mask (default true)");
  app.add_option("--seed", seed);
  bool leaky = false;
  int64_t per_class = 100000;
  std::string class_name = "random";
  int runs = 1000, repeats = 1;
  std::string record;
  double pad = 0;
  CLI::App* timing = app.add_subcommand("timing", "dudect timing test");
  timing->add_flag("--leaky", leaky, "time the positive control");
  timing->add_option("--launches-per-class", per_class)->check(CLI::Range(int64_t(2), int64_t(1) << 40));
  timing->add_option("--record", record, "write each timed launch's class and microseconds here (CSV)");
  timing->add_option("--pad", pad, "pad each launch to this multiple of the random class's 99.9th percentile")
      ->check(CLI::NonNegativeNumber);
  CLI::App* counters = app.add_subcommand("counters", "one warm-up and --repeats measured launches, for ncu");
  counters->add_option("--class", class_name)->check(CLI::IsMember(kClasses));
  counters->add_flag("--leaky", leaky, "launch the positive control");
  counters->add_option("--repeats", repeats, "measured launches after the warm-up")->check(CLI::PositiveNumber);
  CLI::App* repeat = app.add_subcommand("repeat", "bitwise reproducibility");
  repeat->add_option("--runs", runs);
  CLI11_PARSE(app, argc, argv);

  Problem problem(shape, seed);
  if (timing->parsed()) return run_timing(problem, leaky, per_class, seed, pad, record);
  if (repeat->parsed()) return run_repeat(problem, runs);
  problem.stage(class_name, nullptr);
  for (int r = 0; r <= repeats; ++r) problem.launch(leaky, nullptr);
  check(cudaDeviceSynchronize(), "sync");
  std::printf("counters: launched class %s%s %d times after a warm-up\n", class_name.c_str(),
              leaky ? " (leaky control)" : "", repeats);
  return 0;
}
