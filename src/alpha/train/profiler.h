// `alpha train --profile`: where the time of one training step goes, per op and, on a GPU, per kernel.
//
// The profiler watches the step's launches (core/launch.h): the ops' kernels, and the tensor layer's copies,
// casts and zeroings (listed as Tensor::copy_from and Tensor::zero_). On the CPU it times each launch on the
// host, exclusive of launches nested in it. On a CUDA device the host only queues work, so the times come
// from the GPU: a CUPTI trace (runtime/kernel_trace.h) of every kernel, copy and memset, each tagged with the
// launch that queued it (cuBLASLt's kernels with the op that called cuBLASLt); work queued outside any launch
// (NCCL's collectives) is listed as "(outside launches)". The device is synchronised
// before and after the step, so the profiled step is slower than the others: its metrics line says
// "profiled": true.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "alpha/core/device.h"
#include "alpha/core/launch.h"
#include "alpha/train/telemetry.h"

namespace alpha::train {

// The host's phase times of the profiled step (seconds), as metrics.jsonl has them.
struct StepPhases {
  int64_t step = 0;
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
};

class StepProfiler : public LaunchObserver {
 public:
  // Synchronises `device`, starts its trace (CUDA) and observes this thread's launches until finish().
  // Raises BackendError when the device's trace cannot start (CUPTI missing: the message says where it looked).
  explicit StepProfiler(Device device);
  ~StepProfiler() override;
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void launch_begin(std::string_view name, Device device, LaunchLayer layer) override;
  void launch_end() override;

  // Ends the profile (waiting for the device) and returns the report: the step, its wall time from the
  // profiler's start to the device's last work, the phases, the op launches (as metrics.jsonl counts them),
  // and per launch name (layer, calls, kernels, time, and the host's time inside its launches: on a GPU the
  // cost of queuing, which bounds the step when it exceeds the GPU's) and per kernel (calls, time, mean), each
  // list by time, largest first. Shares are of the summed time ("busy_s"); "host_s" sums the host's. On a GPU
  // also its occupancy (gpu_occupancy: "span_s", "active_s", and NCCL's "collectives_s" and
  // "collectives_exposed_s") and the timeline: every activity's start and end in µs from the first start,
  // its name and the op that queued it, in order of start.
  nlohmann::json finish(const StepPhases& phases);

 private:
  struct OpTotals {
    std::string device;
    const char* layer = "op";  // "op", "tensor", or "none" for work no launch queued
    int64_t calls = 0;
    int64_t kernels = 0;
    double seconds = 0;       // the op's time: the host's on the CPU, the GPU's on a CUDA device
    double host_seconds = 0;  // the host's time inside its launches, exclusive of nested ones
  };
  struct Open {  // a launch in progress
    size_t op;
    bool on_cpu;       // its time is the host's; else the GPU's, from the trace
    Stopwatch clock;
    double nested_s = 0;  // of launches begun inside it
  };

  size_t op_index(std::string_view name, Device device, const char* layer);

  Device device_;
  Stopwatch wall_;
  LaunchObserver* previous_;
  std::vector<std::string> op_names_;
  std::unordered_map<std::string, size_t> op_ids_;  // name and device -> index into ops_
  std::string key_;                                   // op_index's buffer
  std::vector<OpTotals> ops_;
  std::vector<Open> open_;  // innermost last
  struct Trace;
  std::unique_ptr<Trace> trace_;  // CUDA devices: the kernel trace
  bool finished_ = false;
};

// How a GPU's time over a step was spent, from its traced activities' [start, end) intervals (ns): span, from the
// first start to the last end; active, the union of the intervals (time with anything running: the summed
// kernel times count concurrent work twice); and for the activities marked `selected` (NCCL's collectives),
// their union and its exposed part, when nothing else ran beside them.
struct GpuOccupancy {
  double span_s = 0, active_s = 0, selected_s = 0, selected_exposed_s = 0;
};
struct TimedInterval {
  uint64_t start_ns, end_ns;
  bool selected;
};
GpuOccupancy gpu_occupancy(const std::vector<TimedInterval>& intervals);

// The report as a table for a terminal: the step's totals, then the `rows` largest kernels (CUDA) or ops (CPU).
std::string profile_table(const nlohmann::json& report, size_t rows = 20);

}  // namespace alpha::train
