// A trace of the GPU work between start() and stop(): every kernel, copy and memset that ran on any CUDA device,
// with its start and end on the GPU's clock, read through CUPTI's activity API (the library under Nsight and
// PyTorch's profiler). Launches made while a tag is pushed carry it (CUPTI's external correlation), so the
// caller can say which of its operations each kernel belongs to; cuBLASLt's and NCCL's kernels are seen too.
//
// CUPTI is loaded with dlopen on the first start(), not linked: a binary runs where CUPTI is missing and only
// tracing raises. It is looked for in ALPHA_CUPTI_LIBRARY (a file), then as libcupti.so.13 / libcupti.so on
// the loader's path, then in the CUDA toolkit's folders ($CUDA_HOME, /usr/local/cuda: lib64, lib,
// extras/CUPTI/lib64). Plain C++ (no CUDA headers here); exists only in builds with ALPHA_WITH_CUDA.
#pragma once
#if ALPHA_WITH_CUDA
#include <cstdint>
#include <string>
#include <vector>

namespace alpha::cuda {

struct TracedActivity {
  enum class Kind { kernel, memcpy, memset };
  Kind kind = Kind::kernel;
  std::string name;    // a kernel's demangled name; "memcpy HtoD" and the like; "memset"
  uint64_t start_ns = 0;  // GPU timestamps
  uint64_t end_ns = 0;
  uint32_t device = 0;
  uint64_t tag = 0;  // the innermost tag pushed when it was launched; 0 when none was
};

class KernelTrace {
 public:
  KernelTrace() = default;
  ~KernelTrace();  // stops a trace still running (its records are dropped)
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // Starts recording (one trace at a time in a process). Raises BackendError naming `op` when CUPTI cannot be
  // loaded (the paths tried) or refuses (its message), or when another trace is running.
  void start(const char* op);
  // Tags the calling thread's launches until the matching pop (tags nest; a tag is a non-zero number).
  void push_tag(uint64_t tag);
  void pop_tag();
  // Waits for every device's queued work, stops recording and returns what ran, in order of start.
  std::vector<TracedActivity> stop();

 private:
  bool running_ = false;
  const char* op_ = "";
};

}  // namespace alpha::cuda

#endif  // ALPHA_WITH_CUDA
