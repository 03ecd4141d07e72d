// Alpha's data-parallel trainer reduces gradient buckets with NCCL while backward runs, and the collectives
// slow the backward's kernels about as much as they hide. Before changing the trainer: do NCCL 2.28's buffer
// registration (ncclMemAlloc memory in a symmetric window, or registered locally) and its CTA policies
// (EFFICIENCY; ZERO: copy-engine collectives where possible) (a) make the trainer's collectives faster and
// (b) slow a GEMM running beside them less? One process drives every visible GPU (two expected); for each
// variant (plain cudaMalloc as today, window, window+efficiency, window+zero, local) and each collective
// (in place: all-reduce f32 25 and 154 MiB, reduce-scatter f32 154 MiB, all-gather bf16 124 MiB; all-to-all f32
// 154 MiB; and the reductions composed of NCCL's all-to-all, Alpha's rank-order sum (kernels::cuda::sum_rows) and
// NCCL's all-gather, Kind below, each checked once against the rank-order sum) it times the collective alone, then a
// loop of cuBLAS bf16 4096³ GEMMs with the collective running back to back beside it, against the loop alone. A variant
// NCCL refuses is printed as "unsupported: <NCCL's error>". Measured on 2 H200s: docs/PERFORMANCE.md (twenty-seventh
// session); only the all-gather between symmetric windows under NCCL_CTA_POLICY=2 escaped the GEMMs. Exit status 2 when
// a composed reduction's result was wrong.
//
// The loaded measurement (run_loaded): the host queues the whole GEMM loop on each device's compute stream
// (between a start and an end event), then issues the collective in a loop on the comm streams (one group
// across devices per collective), keeping at most kDepth in flight per device (polling events recorded on the
// comm streams), and stops issuing once every device's GEMM end event has completed. The GEMMs are queued
// first, so the collectives overlap them from the start but begin a little later: that skew (device 0's GEMM
// start event to its first collective's start event) is reported as start_skew_ms. No host call inside the
// loop waits on a compute stream, and nothing in it allocates lazily: cuBLAS has an explicit workspace, one
// GEMM per device runs at setup, and every collective runs once, untimed, before it is measured. Every host
// wait polls (cudaEventQuery/cudaStreamQuery) against a wall-clock limit: a variant that takes longer than
// 30 s in all is printed as "timeout: ...", its communicators are aborted and the next variant runs.
//
// Build: cmake --build build/cuda --target alpha_nccl_buffers (not part of `all`)
// Run:   NCCL_NVLS_ENABLE=0 build/cuda/alpha_nccl_buffers --out nccl_buffers.json
//        [--iters 20] [--warmup 5] [--gemms 40] [--only plain --only window+zero]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "alpha/kernels/elementwise.h"

namespace {

// ---------------------------------------------------------------------------------------------------------
// Checks: any failure ends the program (exit 1) with the call, where it is and the library's message, except
// the NCCL calls of one variant (registration, policy, its collectives), which throw NcclRefused instead, and
// a variant past its wall-clock limit, which throws VariantTimeout.

void fail(const char* call, const char* file, int line, const char* message) {
  std::fprintf(stderr, "nccl_buffers: %s:%d: %s failed: %s\n", file, line, call, message);
  std::exit(1);
}

#define CUDA_CHECK(call)                                                                      \
  do {                                                                                        \
    cudaError_t status_ = (call);                                                             \
    if (status_ != cudaSuccess) fail(#call, __FILE__, __LINE__, cudaGetErrorString(status_)); \
  } while (0)

#define NCCL_CHECK(call)                                                                                  \
  do {                                                                                                    \
    ncclResult_t status_ = (call);                                                                        \
    if (status_ != ncclSuccess) {                                                                         \
      std::string message_ = std::string(ncclGetErrorString(status_)) + ": " + ncclGetLastError(nullptr); \
      fail(#call, __FILE__, __LINE__, message_.c_str());                                                  \
    }                                                                                                     \
  } while (0)

#define CUBLAS_CHECK(call)                                                                                 \
  do {                                                                                                     \
    cublasStatus_t status_ = (call);                                                                       \
    if (status_ != CUBLAS_STATUS_SUCCESS) fail(#call, __FILE__, __LINE__, cublasGetStatusString(status_)); \
  } while (0)

// An NCCL call of one variant that NCCL refused: the variant's rows say so and the program goes on.
struct NcclRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A variant that ran past its wall-clock limit: its rows say "timeout", its communicators are aborted and the
// program goes on with the next variant.
struct VariantTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Clock = std::chrono::steady_clock;

// A wall-clock limit: every host wait polls the device and checks it.
struct Deadline {
  Clock::time_point at;
  double limit_s;
  static Deadline in(double seconds) {
    return {Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)),
            seconds};
  }
  bool passed() const { return Clock::now() > at; }
  void check(const char* where) const {
    if (passed()) throw VariantTimeout("over " + std::to_string(int(limit_s)) + " s (while " + where + ")");
  }
};

// Keeps the first NCCL error of a sequence of calls (a group: ncclGroupEnd must still be called after a
// failed call inside it), then throws it.
struct FirstError {
  ncclResult_t status = ncclSuccess;
  std::string call;
  void operator()(ncclResult_t s, const char* what) {
    if (s != ncclSuccess && status == ncclSuccess) {
      status = s;
      call = what;
    }
  }
  void throw_if_failed() const {
    if (status == ncclSuccess) return;
    std::string last = ncclGetLastError(nullptr);
    throw NcclRefused(std::string(ncclGetErrorString(status)) + " (" + call + (last.empty() ? "" : ": " + last) + ")");
  }
};

#define SOFT(errors, call) (errors)((call), #call)

// ---------------------------------------------------------------------------------------------------------
// Kernels: a deterministic fill (a hash of the index, uniform in [-1, 1)).

__host__ __device__ inline float hash_uniform(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return float(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_f32(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = hash_uniform(i, seed);
}

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(hash_uniform(i, seed));
}

// ---------------------------------------------------------------------------------------------------------
// Setup: the devices with their streams and GEMM operands, the collectives and the variants.

constexpr size_t kMiB = size_t(1) << 20;
constexpr int kGemmSize = 4096;  // M = N = K
constexpr int kLoadedReps = 3;   // loaded runs per (variant, collective); the median is reported
constexpr int kGemmAloneReps = 3;
constexpr size_t kDepth = 3;             // collectives in flight per device in a loaded run
constexpr double kVariantLimitS = 30;    // wall clock of one variant, all its collectives
constexpr double kGemmAloneLimitS = 60;  // the GEMM loop alone (warm-up and kGemmAloneReps runs)
constexpr double kDrainLimitS = 30;      // draining the devices after a variant (after ncclCommAbort, say)

struct Device {
  int id = 0;
  cudaStream_t comm = nullptr, compute = nullptr;
  cublasHandle_t blas = nullptr;
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  void* workspace = nullptr;
  cudaEvent_t gemm_start = nullptr, gemm_stop = nullptr;  // compute stream: the GEMM loop
  cudaEvent_t comm_start = nullptr;                       // comm stream: before a loaded run's first collective
  std::vector<cudaEvent_t> coll_end;                      // comm stream: after each collective of a loaded run
};

// The composed kinds reduce without NCCL's reduction kernels: NCCL's all-to-all hands rank r every rank's block r
// (into a receive area after the buffer), the trainer's sum_rows on the comm stream adds them in rank order into the
// buffer's block r (ReduceScatterComposed), and for the all-reduce NCCL all-gathers the blocks in place. Between
// symmetric windows under NCCL_CTA_POLICY_ZERO, NCCL 2.28 moves the all-to-all and the all-gather with the copy
// engines, so the only kernel on the GPU's cores is the sum.
enum class Kind { AllReduce, ReduceScatter, AllGather, AlltoAll, ReduceScatterComposed, AllReduceComposed };

struct Collective {
  std::string name;
  Kind kind;
  ncclDataType_t type;
  size_t elem;   // bytes per element
  size_t count;  // elements of the full buffer (the all-reduce's, the reduce-scatter's input, the all-gather's output)
  size_t bytes() const { return count * elem; }
  double bus_factor(int n) const {
    const bool all_reduce = kind == Kind::AllReduce || kind == Kind::AllReduceComposed;
    return all_reduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
  }
  bool composed() const { return kind == Kind::ReduceScatterComposed || kind == Kind::AllReduceComposed; }
  // The buffer's bytes it uses: the composed kinds and the all-to-all receive into a second area as large.
  size_t buffer_bytes() const { return (composed() || kind == Kind::AlltoAll ? 2 : 1) * bytes(); }
};

// The largest count of `elem`-byte elements in `bytes` that divides by n ranks with each rank's shard a
// multiple of NCCL_WIN_REQUIRED_ALIGNMENT bytes.
size_t round_count(size_t bytes, size_t elem, int n) {
  const size_t unit = size_t(n) * (NCCL_WIN_REQUIRED_ALIGNMENT / elem);
  return bytes / elem / unit * unit;
}

enum class Buffers { Plain, Window, Local };

struct Variant {
  std::string name;
  Buffers buffers;
  int policy;  // NCCL_CONFIG_UNDEF_INT: NCCL's default, as Alpha's trainer
  const char* policy_name;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> all = {
      {"plain", Buffers::Plain, NCCL_CONFIG_UNDEF_INT, "default"},
      {"window", Buffers::Window, NCCL_CONFIG_UNDEF_INT, "default"},
      {"window+efficiency", Buffers::Window, NCCL_CTA_POLICY_EFFICIENCY, "efficiency"},
      {"window+zero", Buffers::Window, NCCL_CTA_POLICY_ZERO, "zero"},
      {"local", Buffers::Local, NCCL_CONFIG_UNDEF_INT, "default"},
  };
  return all;
}

const char* buffers_name(Buffers b) {
  return b == Buffers::Plain ? "cudaMalloc" : b == Buffers::Window ? "ncclMemAlloc+window" : "ncclMemAlloc+local";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return ms;
}

void fill_device_f32(float* p, size_t n, uint32_t seed, cudaStream_t stream) {
  fill_f32<<<1024, 256, 0, stream>>>(p, n, seed);
  CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------------------
// The harness: the devices, the GEMM loop and the host's polling waits.

struct Harness {
  std::vector<Device> devices;
  int gemms = 40;
  cudaEvent_t alone_start = nullptr, alone_stop = nullptr;  // device 0's comm stream
  size_t most_issued = 0;                                   // collectives of the longest loaded run so far

  int n() const { return int(devices.size()); }

  void setup(int count, int gemm_count) {
    gemms = gemm_count;
    devices.resize(count);
    const size_t operand = size_t(kGemmSize) * kGemmSize;
    for (int d = 0; d < count; ++d) {
      Device& dev = devices[d];
      dev.id = d;
      CUDA_CHECK(cudaSetDevice(d));
      CUDA_CHECK(cudaStreamCreateWithFlags(&dev.comm, cudaStreamNonBlocking));
      CUDA_CHECK(cudaStreamCreateWithFlags(&dev.compute, cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreate(&dev.gemm_start));
      CUDA_CHECK(cudaEventCreate(&dev.gemm_stop));
      CUDA_CHECK(cudaEventCreate(&dev.comm_start));
      for (__nv_bfloat16** p : {&dev.a, &dev.b, &dev.c}) CUDA_CHECK(cudaMalloc(p, operand * sizeof(__nv_bfloat16)));
      fill_bf16<<<1024, 256, 0, dev.compute>>>(dev.a, operand, 1000 + 2 * d);
      CUDA_CHECK(cudaGetLastError());
      fill_bf16<<<1024, 256, 0, dev.compute>>>(dev.b, operand, 1001 + 2 * d);
      CUDA_CHECK(cudaGetLastError());
      CUBLAS_CHECK(cublasCreate(&dev.blas));
      CUBLAS_CHECK(cublasSetStream(dev.blas, dev.compute));
      // An explicit workspace, so that cuBLAS never allocates one (cudaMalloc) inside a measurement.
      const size_t workspace_bytes = 32 * kMiB;  // cuBLAS's recommendation for Hopper
      CUDA_CHECK(cudaMalloc(&dev.workspace, workspace_bytes));
      CUBLAS_CHECK(cublasSetWorkspace(dev.blas, dev.workspace, workspace_bytes));
      // Warm-up: one GEMM through the same handle and stream (loads cuBLAS's kernel, runs its heuristics).
      gemm(dev);
      CUDA_CHECK(cudaStreamSynchronize(dev.compute));
    }
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaEventCreate(&alone_start));
    CUDA_CHECK(cudaEventCreate(&alone_stop));
  }

  void teardown() {
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaEventDestroy(alone_start));
    CUDA_CHECK(cudaEventDestroy(alone_stop));
    for (Device& dev : devices) {
      CUDA_CHECK(cudaSetDevice(dev.id));
      CUDA_CHECK(cudaStreamSynchronize(dev.comm));
      CUDA_CHECK(cudaStreamSynchronize(dev.compute));
      CUBLAS_CHECK(cublasDestroy(dev.blas));
      CUDA_CHECK(cudaFree(dev.workspace));
      for (__nv_bfloat16* p : {dev.a, dev.b, dev.c}) CUDA_CHECK(cudaFree(p));
      for (cudaEvent_t e : dev.coll_end) CUDA_CHECK(cudaEventDestroy(e));
      CUDA_CHECK(cudaEventDestroy(dev.gemm_start));
      CUDA_CHECK(cudaEventDestroy(dev.gemm_stop));
      CUDA_CHECK(cudaEventDestroy(dev.comm_start));
      CUDA_CHECK(cudaStreamDestroy(dev.comm));
      CUDA_CHECK(cudaStreamDestroy(dev.compute));
    }
  }

  // Makes sure every device has at least `count` collective end events (created before a loaded run, so that
  // its loop creates none).
  void reserve_coll_events(size_t count) {
    for (Device& dev : devices) {
      if (dev.coll_end.size() >= count) continue;
      CUDA_CHECK(cudaSetDevice(dev.id));
      while (dev.coll_end.size() < count) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        dev.coll_end.push_back(e);
      }
    }
  }

  // C = A·B, bf16 operands and output, f32 accumulation, on the device's compute stream.
  void gemm(Device& dev) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(dev.blas, CUBLAS_OP_N, CUBLAS_OP_N, kGemmSize, kGemmSize, kGemmSize, &one, dev.a,
                              CUDA_R_16BF, kGemmSize, dev.b, CUDA_R_16BF, kGemmSize, &zero, dev.c, CUDA_R_16BF,
                              kGemmSize, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // --gemms GEMMs on each device's compute stream.
  void queue_gemms(Device& dev) {
    CUDA_CHECK(cudaSetDevice(dev.id));
    for (int i = 0; i < gemms; ++i) gemm(dev);
  }
};

// True once the event's work has completed; false while it is pending.
bool event_done(cudaEvent_t e) {
  const cudaError_t s = cudaEventQuery(e);
  if (s == cudaErrorNotReady) return false;
  CUDA_CHECK(s);
  return true;
}

bool stream_idle(cudaStream_t stream) {
  const cudaError_t s = cudaStreamQuery(stream);
  if (s == cudaErrorNotReady) return false;
  CUDA_CHECK(s);
  return true;
}

bool all_streams_idle(const Harness& h) {
  for (const Device& dev : h.devices)
    if (!stream_idle(dev.comm) || !stream_idle(dev.compute)) return false;
  return true;
}

// One communicator set with its buffers (one per device, sized for the largest collective).
struct CommSet {
  std::vector<ncclComm_t> comms;
  std::vector<void*> buffers;
  std::vector<ncclWindow_t> windows;
  std::vector<void*> handles;  // ncclCommRegister's
  Buffers kind = Buffers::Plain;
  size_t buffer_bytes = 0;
  bool broken = false;     // a call failed: the communicators are aborted, not finalized
  bool timed_out = false;  // the variant ran past its limit: aborted first, before anything is freed
};

// Queues one collective on every device's comm stream, in one group.
void issue(const Collective& c, Harness& h, CommSet& set) {
  const int n = h.n();
  FirstError errors;
  SOFT(errors, ncclGroupStart());
  for (int d = 0; d < n; ++d) {
    char* base = static_cast<char*>(set.buffers[d]);
    cudaStream_t stream = h.devices[d].comm;
    switch (c.kind) {
      case Kind::AllReduce:
        SOFT(errors, ncclAllReduce(base, base, c.count, c.type, ncclSum, set.comms[d], stream));
        break;
      case Kind::ReduceScatter: {
        const size_t shard = c.count / n;
        SOFT(errors, ncclReduceScatter(base, base + d * shard * c.elem, shard, c.type, ncclSum, set.comms[d], stream));
        break;
      }
      case Kind::AllGather: {
        const size_t shard = c.count / n;
        SOFT(errors, ncclAllGather(base + d * shard * c.elem, base, shard, c.type, set.comms[d], stream));
        break;
      }
      case Kind::AlltoAll:
      case Kind::ReduceScatterComposed:
      case Kind::AllReduceComposed:
        SOFT(errors, ncclAlltoAll(base, base + c.bytes(), c.count / n, c.type, set.comms[d], stream));
        break;
    }
  }
  SOFT(errors, ncclGroupEnd());
  errors.throw_if_failed();
  if (!c.composed()) return;
  const size_t shard = c.count / n;
  for (int d = 0; d < n; ++d) {
    CUDA_CHECK(cudaSetDevice(d));
    char* base = static_cast<char*>(set.buffers[d]);
    // The trainer's rank-order sum (kernels/elementwise.h), unscaled, on the comm stream as DataParallel queues it.
    alpha::kernels::cuda::sum_rows(
        alpha::kernels::SumRowsArgs<float>{reinterpret_cast<const float*>(base + c.bytes()),
                                           reinterpret_cast<float*>(base + d * shard * c.elem), n, int64_t(shard),
                                           1.0f},
        alpha::Stream{h.devices[d].comm});
  }
  if (c.kind != Kind::AllReduceComposed) return;
  SOFT(errors, ncclGroupStart());
  for (int d = 0; d < n; ++d) {
    char* base = static_cast<char*>(set.buffers[d]);
    SOFT(errors, ncclAllGather(base + d * shard * c.elem, base, shard, c.type, set.comms[d], h.devices[d].comm));
  }
  SOFT(errors, ncclGroupEnd());
  errors.throw_if_failed();
}

// The composed reductions' result after one run on freshly filled buffers (device d's element i is
// hash_uniform(i, 7 + d)): every rank's reduced blocks must hold the sum over the ranks in rank order, bit for bit.
// Returns the number of elements that differ (printed; the row is kept, so a wrong result shows beside its time).
size_t verify_composed(const Collective& c, Harness& h, CommSet& set) {
  const int n = h.n();
  const size_t shard = c.count / n;
  std::vector<float> got(c.count);
  size_t wrong = 0;
  for (int d = 0; d < n; ++d) {
    CUDA_CHECK(cudaSetDevice(d));
    CUDA_CHECK(cudaMemcpy(got.data(), set.buffers[d], c.bytes(), cudaMemcpyDeviceToHost));
    const size_t first = c.kind == Kind::AllReduceComposed ? 0 : d * shard;
    const size_t last = c.kind == Kind::AllReduceComposed ? c.count : first + shard;
    for (size_t i = first; i < last; ++i) {
      float sum = hash_uniform(i, 7);
      for (int r = 1; r < n; ++r) sum += hash_uniform(i, 7 + r);
      if (std::memcmp(&sum, &got[i], sizeof sum) != 0 && wrong++ < 3)
        std::fprintf(stderr, "nccl_buffers: %s: device %d element %zu: %.9g, expected %.9g\n", c.name.c_str(), d, i,
                     got[i], sum);
    }
  }
  return wrong;
}

// An asynchronous error on any communicator refuses the variant.
void check_async(const CommSet& set) {
  FirstError errors;
  for (ncclComm_t comm : set.comms) {
    ncclResult_t async = ncclSuccess;
    SOFT(errors, ncclCommGetAsyncError(comm, &async));
    errors(async, "asynchronous error (ncclCommGetAsyncError)");
  }
  errors.throw_if_failed();
}

// Polls done() (which must not block) until it holds; throws VariantTimeout once the deadline passes, and
// with a set, NcclRefused on an asynchronous NCCL error (rather than waiting for a collective that cannot end).
template <class Done>
void poll(Done done, const Deadline& deadline, const CommSet* set, const char* what) {
  for (unsigned spin = 0;; ++spin) {
    if (done()) return;
    deadline.check(what);
    if (set && spin % 256 == 0) check_async(*set);
    std::this_thread::yield();
  }
}

// Waits until every comm and compute stream is idle.
void wait_idle(const Harness& h, const Deadline& deadline, const CommSet* set, const char* what) {
  poll([&] { return all_streams_idle(h); }, deadline, set, what);
}

// Creates the communicators (one group, so that one thread can initialize every rank), allocates the buffers
// and registers them. Throws NcclRefused when NCCL refuses the config, the allocation or the registration;
// what was made is kept in `set` for release().
void create(const Variant& v, Harness& h, size_t buffer_bytes, CommSet& set) {
  const int n = h.n();
  set.kind = v.buffers;
  set.buffer_bytes = buffer_bytes;
  set.comms.assign(n, nullptr);
  set.buffers.assign(n, nullptr);
  set.windows.assign(n, nullptr);
  set.handles.assign(n, nullptr);

  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<ncclConfig_t> configs(n);  // alive until ncclGroupEnd returns
  FirstError init;
  SOFT(init, ncclGroupStart());
  for (int d = 0; d < n; ++d) {
    configs[d] = NCCL_CONFIG_INITIALIZER;
    configs[d].CTAPolicy = v.policy;
    configs[d].commName = "alpha_nccl_buffers";
    CUDA_CHECK(cudaSetDevice(d));
    SOFT(init, ncclCommInitRankConfig(&set.comms[d], n, id, d, &configs[d]));
  }
  SOFT(init, ncclGroupEnd());
  if (init.status != ncclSuccess) set.broken = true;
  init.throw_if_failed();

  FirstError alloc;
  for (int d = 0; d < n; ++d) {
    CUDA_CHECK(cudaSetDevice(d));
    if (v.buffers == Buffers::Plain) {
      CUDA_CHECK(cudaMalloc(&set.buffers[d], buffer_bytes));
    } else {
      const ncclResult_t s = ncclMemAlloc(&set.buffers[d], buffer_bytes);
      if (s != ncclSuccess) set.buffers[d] = nullptr;
      alloc(s, "ncclMemAlloc");
    }
  }
  alloc.throw_if_failed();

  if (v.buffers == Buffers::Window) {
    // Collective: every rank registers in one group.
    FirstError reg;
    SOFT(reg, ncclGroupStart());
    for (int d = 0; d < n; ++d) {
      CUDA_CHECK(cudaSetDevice(d));
      SOFT(reg, ncclCommWindowRegister(set.comms[d], set.buffers[d], buffer_bytes, &set.windows[d],
                                       NCCL_WIN_COLL_SYMMETRIC));
    }
    SOFT(reg, ncclGroupEnd());
    reg.throw_if_failed();
    // Where the communicator has no symmetric memory support NCCL 2.28 returns success and no window.
    for (int d = 0; d < n; ++d)
      if (set.windows[d] == nullptr)
        throw NcclRefused("no window (ncclCommWindowRegister returned success and a null window on rank " +
                          std::to_string(d) + ": this communicator has no symmetric memory support)");
  } else if (v.buffers == Buffers::Local) {
    FirstError reg;
    for (int d = 0; d < n; ++d) {
      CUDA_CHECK(cudaSetDevice(d));
      SOFT(reg, ncclCommRegister(set.comms[d], set.buffers[d], buffer_bytes, &set.handles[d]));
    }
    reg.throw_if_failed();
  }
}

// Deregisters (windows before ncclMemFree), frees, and finalizes and destroys the communicators (aborts them
// after a failure). Failures of a broken set's NCCL calls are reported, not fatal. A set that timed out (or
// whose streams do not drain within kDrainLimitS) is aborted first, so that NCCL's kernels return before its
// buffers are freed; ncclCommAbort releases its registrations.
void release(Harness& h, CommSet& set) {
  const int n = int(set.comms.size());
  auto drained = [&] {
    const Deadline drain = Deadline::in(kDrainLimitS);
    while (!all_streams_idle(h)) {
      if (drain.passed()) return false;
      std::this_thread::yield();
    }
    for (Device& dev : h.devices) {  // NCCL's own streams too (the streams are idle: this does not wait long)
      CUDA_CHECK(cudaSetDevice(dev.id));
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    return true;
  };
  auto nccl_teardown = [&](ncclResult_t s, const char* call) {
    if (s == ncclSuccess) return;
    if (!set.broken) fail(call, __FILE__, __LINE__, ncclGetErrorString(s));
    std::fprintf(stderr, "nccl_buffers: warning: %s failed while releasing a refused or timed-out variant: %s\n", call,
                 ncclGetErrorString(s));
  };
  auto abort_all = [&] {
    ncclGroupStart();
    for (int d = 0; d < n; ++d)
      if (set.comms[d]) nccl_teardown(ncclCommAbort(set.comms[d]), "ncclCommAbort");
    ncclGroupEnd();
  };
  if (!set.timed_out && !drained()) {
    std::fprintf(stderr, "nccl_buffers: warning: the streams did not drain within %.0f s: aborting\n", kDrainLimitS);
    set.timed_out = true;
  }
  if (set.timed_out) {
    set.broken = true;
    abort_all();
    if (!drained()) {
      std::fprintf(stderr, "nccl_buffers: the streams did not drain within %.0f s after ncclCommAbort\n", kDrainLimitS);
      std::exit(1);
    }
  } else {
    for (int d = 0; d < n; ++d) {
      CUDA_CHECK(cudaSetDevice(d));
      if (set.windows[d])
        nccl_teardown(ncclCommWindowDeregister(set.comms[d], set.windows[d]), "ncclCommWindowDeregister");
      if (set.handles[d]) nccl_teardown(ncclCommDeregister(set.comms[d], set.handles[d]), "ncclCommDeregister");
    }
  }
  for (int d = 0; d < n; ++d) {
    set.windows[d] = nullptr;
    set.handles[d] = nullptr;
  }
  for (int d = 0; d < n; ++d) {
    if (!set.buffers[d]) continue;
    CUDA_CHECK(cudaSetDevice(d));
    if (set.kind == Buffers::Plain)
      CUDA_CHECK(cudaFree(set.buffers[d]));
    else
      NCCL_CHECK(ncclMemFree(set.buffers[d]));
    set.buffers[d] = nullptr;
  }
  if (set.timed_out) {
    // Aborted above.
  } else if (!set.broken) {
    NCCL_CHECK(ncclGroupStart());
    for (int d = 0; d < n; ++d) NCCL_CHECK(ncclCommFinalize(set.comms[d]));
    NCCL_CHECK(ncclGroupEnd());
    for (int d = 0; d < n; ++d) NCCL_CHECK(ncclCommDestroy(set.comms[d]));
  } else {
    abort_all();
  }
  set.comms.clear();
}

// ---------------------------------------------------------------------------------------------------------
// Measurements.

struct LoadedRun {
  std::vector<double> gemm_ms;  // per device
  double gemm_mean_ms = 0;
  size_t issued = 0;                  // collectives queued
  double count_in_window = 0;         // collectives inside the GEMM loop's window on device 0 (the last one's part)
  double coll_loaded_ms = 0;          // mean time of those completed inside the window
  std::vector<double> start_skew_ms;  // per device: the GEMM loop's start event to the first collective's start
};

// Runs the GEMM loop on every device and, with a collective, that collective back to back on the comm streams
// until the loop ends. The GEMMs are queued first (each device's whole loop between its start and end events);
// then the host issues the collective (one group across devices) while polling: at most kDepth in flight per
// device (events on the comm streams), and none issued once every device's GEMM end event has completed. Once
// the GEMMs are queued the host calls only cudaEventRecord on the comm streams, cudaEventQuery and NCCL's
// enqueue (every collective ran before, so nothing of it is set up lazily): nothing waits on a compute stream.
LoadedRun run_loaded(Harness& h, const Collective* c, CommSet* set, const Deadline& deadline) {
  wait_idle(h, deadline, set, "waiting for the devices before a loaded run");
  if (c) h.reserve_coll_events(2 * h.most_issued + 64);  // created now, not inside the loop
  for (Device& dev : h.devices) {
    CUDA_CHECK(cudaSetDevice(dev.id));
    CUDA_CHECK(cudaEventRecord(dev.gemm_start, dev.compute));
    h.queue_gemms(dev);
    CUDA_CHECK(cudaEventRecord(dev.gemm_stop, dev.compute));
  }
  auto gemms_done = [&] {
    for (const Device& dev : h.devices)
      if (!event_done(dev.gemm_stop)) return false;
    return true;
  };
  size_t issued = 0;
  if (c) {
    for (Device& dev : h.devices) {
      CUDA_CHECK(cudaSetDevice(dev.id));
      CUDA_CHECK(cudaEventRecord(dev.comm_start, dev.comm));
    }
    auto collective_done = [&](size_t i) {  // collective i has completed on every device
      for (const Device& dev : h.devices)
        if (!event_done(dev.coll_end[i])) return false;
      return true;
    };
    while (true) {
      h.reserve_coll_events(issued + 1);  // a no-op unless this run outgrows the reserve
      issue(*c, h, *set);
      for (Device& dev : h.devices) {
        CUDA_CHECK(cudaSetDevice(dev.id));
        CUDA_CHECK(cudaEventRecord(dev.coll_end[issued], dev.comm));
      }
      ++issued;
      // Until the GEMMs end (stop) or fewer than kDepth collectives are in flight (issue the next). Events on
      // a stream complete in order: the oldest in flight, issued - kDepth, is the one to wait for.
      bool stop = false;
      poll(
          [&] {
            if (gemms_done()) return stop = true;
            return issued < kDepth || collective_done(issued - kDepth);
          },
          deadline, set, "issuing the collective beside the GEMM loop");
      if (stop) break;
    }
    h.most_issued = std::max(h.most_issued, issued);
  }
  wait_idle(h, deadline, set, c ? "finishing the collectives after the GEMM loop" : "running the GEMM loop");

  LoadedRun run;
  run.issued = issued;
  for (Device& dev : h.devices) run.gemm_ms.push_back(elapsed_ms(dev.gemm_start, dev.gemm_stop));
  double sum = 0;
  for (double ms : run.gemm_ms) sum += ms;
  run.gemm_mean_ms = sum / run.gemm_ms.size();
  if (c) {
    for (Device& dev : h.devices) run.start_skew_ms.push_back(elapsed_ms(dev.gemm_start, dev.comm_start));
    // Times on device 0 from the GEMM loop's start.
    const Device& d0 = h.devices[0];
    const double window = run.gemm_ms[0];
    const double start = run.start_skew_ms[0];
    size_t k = 0;  // collectives completed inside the window
    double prev = start, next = start;
    for (size_t i = 0; i < issued; ++i) {
      const double end = elapsed_ms(d0.gemm_start, d0.coll_end[i]);
      if (end <= window) {
        k = i + 1;
        prev = end;
      } else {
        next = end;
        break;
      }
    }
    const double part = k < issued && next > prev ? std::clamp((window - prev) / (next - prev), 0.0, 1.0) : 0.0;
    run.count_in_window = double(k) + part;
    run.coll_loaded_ms = k > 0 ? (prev - start) / double(k) : elapsed_ms(d0.comm_start, d0.coll_end[0]);
  }
  return run;
}

double measure_gemm_alone(Harness& h, std::vector<double>* per_device) {
  const Deadline deadline = Deadline::in(kGemmAloneLimitS);
  run_loaded(h, nullptr, nullptr, deadline);  // warm-up: cuBLAS's heuristics and kernels
  std::vector<LoadedRun> runs;
  for (int r = 0; r < kGemmAloneReps; ++r) runs.push_back(run_loaded(h, nullptr, nullptr, deadline));
  std::sort(runs.begin(), runs.end(),
            [](const LoadedRun& x, const LoadedRun& y) { return x.gemm_mean_ms < y.gemm_mean_ms; });
  *per_device = runs[runs.size() / 2].gemm_ms;
  return runs[runs.size() / 2].gemm_mean_ms;
}

std::vector<double> measure_alone(Harness& h, const Collective& c, CommSet& set, int warmup, int iters,
                                  const Deadline& deadline) {
  for (int i = 0; i < warmup; ++i) issue(c, h, set);
  wait_idle(h, deadline, &set, "warming up the collective alone");
  check_async(set);
  std::vector<double> samples;
  CUDA_CHECK(cudaSetDevice(0));
  for (int i = 0; i < iters; ++i) {
    wait_idle(h, deadline, &set, "timing the collective alone");
    CUDA_CHECK(cudaEventRecord(h.alone_start, h.devices[0].comm));
    issue(c, h, set);
    CUDA_CHECK(cudaEventRecord(h.alone_stop, h.devices[0].comm));
    poll([&] { return event_done(h.alone_stop); }, deadline, &set, "timing the collective alone");
    samples.push_back(elapsed_ms(h.alone_start, h.alone_stop));
  }
  wait_idle(h, deadline, &set, "timing the collective alone");
  check_async(set);
  return samples;
}

// One line of the output, per variant and collective:
//   alone_ms        median over --iters (after --warmup) of one collective, cudaEvents on device 0's comm stream
//   busbw_gbps      bus bandwidth of alone_ms, nccl-tests' convention (all-reduce 2(n-1)/n, others (n-1)/n)
//   gemm_loaded_ms  the GEMM loop (--gemms GEMMs on each device's compute stream) while the comm streams run
//                   the collective back to back (run_loaded); mean over devices, median of kLoadedReps runs
//   start_skew_ms   in that run, device 0's GEMM loop start to its first collective's start (the collectives
//                   are issued once the GEMMs are queued); start_skew_ms_per_device in the JSON
//   gemm_slowdown   gemm_loaded_ms / gemm_alone_ms (the loop alone, once per program, median of 3)
//   coll_loaded_ms  mean time of the collectives that completed inside the GEMM loop's window (device 0)
//   count           collectives queued in that run; count_in_window: those inside the window, the last in part
//   hidden_fraction 1 - (gemm_loaded_ms - gemm_alone_ms) / (count_in_window * alone_ms): how much of the
//                   collectives' own time hid behind the GEMMs
// or, instead, "unsupported: <NCCL's error>" or "timeout: <where the variant passed kVariantLimitS>".
struct Row {
  const Variant* variant = nullptr;
  const Collective* collective = nullptr;
  std::optional<std::string> error;
  bool timed_out = false;  // error is a timeout, not NCCL's refusal
  std::vector<double> alone_samples;
  double alone_ms = 0, busbw_gbps = 0;
  LoadedRun loaded;
  double gemm_slowdown = 0, hidden_fraction = 0;
  std::optional<size_t> wrong_elements;  // the composed reductions: elements not the rank-order sum (verify_composed)
};

// One variant: its communicators and buffers, then every collective alone and loaded. The whole variant has
// kVariantLimitS of wall clock: past it, the collective being measured and those after it are "timeout" rows and
// the communicators are aborted.
void run_variant(const Variant& v, Harness& h, const std::vector<Collective>& collectives, size_t buffer_bytes,
                 double gemm_alone_ms, int warmup, int iters, std::vector<Row>& rows) {
  std::fprintf(stderr, "nccl_buffers: %s\n", v.name.c_str());
  const Deadline deadline = Deadline::in(kVariantLimitS);
  CommSet set;
  std::optional<std::string> refused;    // the whole variant: its config, allocation or registration
  std::optional<std::string> timed_out;  // the variant ran out of time: the rows not yet measured
  try {
    create(v, h, buffer_bytes, set);
    deadline.check("creating the communicators and registering the buffers");
  } catch (const NcclRefused& e) {
    refused = e.what();
    set.broken = true;
  } catch (const VariantTimeout& e) {
    timed_out = std::string(e.what());
    set.timed_out = true;
  }
  for (const Collective& c : collectives) {
    Row& row = rows.emplace_back();
    row.variant = &v;
    row.collective = &c;
    if (refused) {
      row.error = *refused;
      continue;
    }
    if (timed_out) {
      row.error = "not run: the variant was " + *timed_out;
      row.timed_out = true;
      continue;
    }
    try {
      // Fresh data for each collective (the in-place sums grow it).
      for (Device& dev : h.devices) {
        CUDA_CHECK(cudaSetDevice(dev.id));
        fill_device_f32(static_cast<float*>(set.buffers[dev.id]), buffer_bytes / sizeof(float), 7 + dev.id, dev.comm);
      }
      wait_idle(h, deadline, &set, "filling the buffers");
      // One untimed collective, whatever --warmup says: whatever NCCL sets up on first use (connections,
      // buffers) is set up before anything is measured.
      issue(c, h, set);
      wait_idle(h, deadline, &set, "running the collective once, untimed");
      check_async(set);
      if (c.composed()) row.wrong_elements = verify_composed(c, h, set);
      row.alone_samples = measure_alone(h, c, set, warmup, iters, deadline);
      row.alone_ms = median(row.alone_samples);
      row.busbw_gbps = double(c.bytes()) * c.bus_factor(h.n()) / (row.alone_ms * 1e-3) / 1e9;
      std::vector<LoadedRun> runs;
      for (int r = 0; r < kLoadedReps; ++r) {
        runs.push_back(run_loaded(h, &c, &set, deadline));
        check_async(set);
      }
      std::sort(runs.begin(), runs.end(),
                [](const LoadedRun& x, const LoadedRun& y) { return x.gemm_mean_ms < y.gemm_mean_ms; });
      row.loaded = runs[runs.size() / 2];
      row.gemm_slowdown = row.loaded.gemm_mean_ms / gemm_alone_ms;
      row.hidden_fraction = row.loaded.count_in_window > 0 ? 1.0 - (row.loaded.gemm_mean_ms - gemm_alone_ms) /
                                                                       (row.loaded.count_in_window * row.alone_ms)
                                                           : 0.0;
    } catch (const NcclRefused& e) {
      // This collective is refused; the next ones run unless a communicator holds an error.
      row.error = e.what();
      set.broken = true;  // aborted at the end rather than finalized
      try {
        check_async(set);
      } catch (const NcclRefused& async) {
        refused = async.what();
      }
    } catch (const VariantTimeout& e) {
      // The device may still be running this collective: the communicators are aborted in release().
      row.error = e.what();
      row.timed_out = true;
      timed_out = std::string(e.what()) + " on " + c.name;
      set.timed_out = true;
    }
  }
  if (timed_out) std::fprintf(stderr, "nccl_buffers: %s: timeout: %s\n", v.name.c_str(), timed_out->c_str());
  if (!set.comms.empty()) release(h, set);
}

// ---------------------------------------------------------------------------------------------------------
// Output.

void print_table(const std::vector<Row>& rows, double gemm_alone_ms) {
  std::printf("gemm loop alone: %.3f ms (mean over devices, median of %d)\n", gemm_alone_ms, kGemmAloneReps);
  std::printf("%-18s %-26s %9s %10s %9s %8s %8s %6s %7s %7s %7s\n", "variant", "collective", "alone_ms", "busbw_GB/s",
              "gemm_ms", "slowdown", "coll_ms", "count", "in_win", "hidden", "skew_ms");
  for (const Row& r : rows) {
    if (r.error) {
      std::printf("%-18s %-26s %s: %s\n", r.variant->name.c_str(), r.collective->name.c_str(),
                  r.timed_out ? "timeout" : "unsupported", r.error->c_str());
      continue;
    }
    std::printf("%-18s %-26s %9.3f %10.1f %9.3f %8.3f %8.3f %6zu %7.2f %7.3f %7.3f%s\n", r.variant->name.c_str(),
                r.collective->name.c_str(), r.alone_ms, r.busbw_gbps, r.loaded.gemm_mean_ms, r.gemm_slowdown,
                r.loaded.coll_loaded_ms, r.loaded.issued, r.loaded.count_in_window, r.hidden_fraction,
                r.loaded.start_skew_ms[0],
                r.wrong_elements ? (*r.wrong_elements ? "  WRONG ELEMENTS" : "  verified") : "");
  }
}

nlohmann::json to_json(const std::vector<Row>& rows, const Harness& h, double gemm_alone_ms,
                       const std::vector<double>& gemm_alone_per_device, int warmup, int iters) {
  int version = 0;
  NCCL_CHECK(ncclGetVersion(&version));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  nlohmann::json out;
  out["nccl_version"] = version;
  out["devices"] = h.n();
  out["device_name"] = prop.name;
  out["nccl_nvls_enable"] = nvls ? nlohmann::json(nvls) : nlohmann::json(nullptr);
  out["iters"] = iters;
  out["warmup"] = warmup;
  out["collectives_in_flight"] = kDepth;
  out["variant_limit_s"] = kVariantLimitS;
  out["gemm"] = {{"m", kGemmSize},
                 {"n", kGemmSize},
                 {"k", kGemmSize},
                 {"count", h.gemms},
                 {"alone_ms", gemm_alone_ms},
                 {"alone_ms_per_device", gemm_alone_per_device}};
  nlohmann::json list = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json row = {{"variant", r.variant->name},
                          {"buffers", buffers_name(r.variant->buffers)},
                          {"cta_policy", r.variant->policy_name},
                          {"collective", r.collective->name},
                          {"bytes", r.collective->bytes()},
                          {"count_elements", r.collective->count},
                          {"status", !r.error      ? "ok"
                                     : r.timed_out ? "timeout"
                                                   : "unsupported"},
                          // Unknown (null) for a timeout.
                          {"supported", r.timed_out ? nlohmann::json(nullptr) : nlohmann::json(!r.error)}};
    if (r.error) {
      row["error"] = std::string(r.timed_out ? "timeout: " : "unsupported: ") + *r.error;
    } else {
      row["alone_ms"] = r.alone_ms;
      row["alone_ms_samples"] = r.alone_samples;
      row["busbw_gbps"] = r.busbw_gbps;
      row["gemm_alone_ms"] = gemm_alone_ms;
      row["gemm_loaded_ms"] = r.loaded.gemm_mean_ms;
      row["gemm_loaded_ms_per_device"] = r.loaded.gemm_ms;
      row["gemm_slowdown"] = r.gemm_slowdown;
      row["coll_loaded_ms"] = r.loaded.coll_loaded_ms;
      row["count"] = r.loaded.issued;
      row["count_in_window"] = r.loaded.count_in_window;
      row["start_skew_ms"] = r.loaded.start_skew_ms[0];
      row["start_skew_ms_per_device"] = r.loaded.start_skew_ms;
      row["hidden_fraction"] = r.hidden_fraction;
      if (r.wrong_elements) row["wrong_elements"] = *r.wrong_elements;
    }
    list.push_back(row);
  }
  out["rows"] = list;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"NCCL buffer registration and CTA policies: collectives alone and beside a GEMM loop"};
  int iters = 20, warmup = 5, gemms = 40;
  std::string out;
  std::vector<std::string> only;
  app.add_option("--iters", iters, "timed collectives alone (median)")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "untimed collectives before")->check(CLI::Range(0, 100000));
  app.add_option("--gemms", gemms, "GEMMs in the loop")->check(CLI::Range(1, 100000));
  app.add_option("--out", out, "write the results as JSON to this file");
  std::vector<std::string> names;
  for (const Variant& v : variants()) names.push_back(v.name);
  app.add_option("--only", only, "run only these variants")->check(CLI::IsMember(names));
  CLI11_PARSE(app, argc, argv);

  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (!nvls || std::strcmp(nvls, "0") != 0)
    std::fprintf(stderr, "nccl_buffers: warning: NCCL_NVLS_ENABLE is %s, not 0 (the GPU machine runs with 0)\n",
                 nvls ? nvls : "unset");

  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) std::fprintf(stderr, "nccl_buffers: warning: %d GPU visible (two expected)\n", n);
  int version = 0;
  NCCL_CHECK(ncclGetVersion(&version));
  std::printf("NCCL %d, %d GPUs, %d GEMMs of %d³ per loop, %d timed collectives after %d warm-up\n", version, n, gemms,
              kGemmSize, iters, warmup);

  std::vector<Collective> collectives = {
      {"all_reduce_f32_25MiB", Kind::AllReduce, ncclFloat32, 4, round_count(25 * kMiB, 4, n)},
      {"all_reduce_f32_154MiB", Kind::AllReduce, ncclFloat32, 4, round_count(154 * kMiB, 4, n)},
      {"reduce_scatter_f32_154MiB", Kind::ReduceScatter, ncclFloat32, 4, round_count(154 * kMiB, 4, n)},
      {"all_gather_bf16_124MiB", Kind::AllGather, ncclBfloat16, 2, round_count(124 * kMiB, 2, n)},
      {"all_to_all_f32_154MiB", Kind::AlltoAll, ncclFloat32, 4, round_count(154 * kMiB, 4, n)},
      {"rs_composed_f32_154MiB", Kind::ReduceScatterComposed, ncclFloat32, 4, round_count(154 * kMiB, 4, n)},
      {"ar_composed_f32_25MiB", Kind::AllReduceComposed, ncclFloat32, 4, round_count(25 * kMiB, 4, n)},
      {"ar_composed_f32_154MiB", Kind::AllReduceComposed, ncclFloat32, 4, round_count(154 * kMiB, 4, n)},
  };
  size_t buffer_bytes = 0;
  for (const Collective& c : collectives) buffer_bytes = std::max(buffer_bytes, c.buffer_bytes());

  Harness h;
  h.setup(n, gemms);
  std::vector<double> gemm_alone_per_device;
  double gemm_alone_ms = 0;
  try {
    gemm_alone_ms = measure_gemm_alone(h, &gemm_alone_per_device);
  } catch (const VariantTimeout& e) {
    std::fprintf(stderr, "nccl_buffers: the GEMM loop alone: %s\n", e.what());
    return 1;
  }

  std::vector<Row> rows;
  for (const Variant& v : variants()) {
    if (!only.empty() && std::find(only.begin(), only.end(), v.name) == only.end()) continue;
    run_variant(v, h, collectives, buffer_bytes, gemm_alone_ms, warmup, iters, rows);
  }
  print_table(rows, gemm_alone_ms);

  if (!out.empty()) {
    std::ofstream file(out);
    file << to_json(rows, h, gemm_alone_ms, gemm_alone_per_device, warmup, iters).dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "nccl_buffers: could not write %s\n", out.c_str());
      return 1;
    }
  }
  h.teardown();
  for (const Row& r : rows)
    if (r.wrong_elements && *r.wrong_elements) {
      std::fprintf(stderr, "nccl_buffers: %s under %s gave wrong elements\n", r.collective->name.c_str(),
                   r.variant->name.c_str());
      return 2;
    }
  return 0;
}
