// Per-step telemetry for the trainer: wall-clock phase timers, counters read from the layers below
// (kernel launches from ops/, allocations and peak memory from the device allocator), a metrics.jsonl
// writer (one JSON object per line, flushed every line so a crash loses at most the line being written)
// and a progress bar drawn only when stderr is a terminal.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "alpha/core/device.h"

namespace alpha::train {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void restart() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Counters of one device, sampled at the start of a step and read as differences at its end.
struct CounterSnapshot {
  uint64_t kernel_launches = 0;
  uint64_t allocations = 0;
  uint64_t pool_misses = 0;
  static CounterSnapshot take(Device device);
};

struct StepCounters {
  uint64_t ops = 0;              // kernel launches in the step
  uint64_t allocations = 0;      // tensor allocations in the step
  uint64_t fresh_allocations = 0;  // of which the pool could not serve (system allocator calls)
  // Peak bytes in use on the device during the step; at least the bytes in use at its end with the free blocks
  // that capture pools hold (a CUDA graph's replay works in them, unseen by the allocator).
  uint64_t peak_bytes = 0;
  static StepCounters since(const CounterSnapshot& start, Device device);
};

class MetricsWriter {
 public:
  // Opens RUN_DIR/metrics.jsonl; appends when resuming, truncates otherwise.
  MetricsWriter(const std::filesystem::path& run_dir, bool append);
  // Writes one record as a line, stamped with "wall_time" (Unix seconds).
  void write(nlohmann::json record);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

class ProgressBar {
 public:
  ProgressBar(int64_t first_step, int64_t last_step);
  bool enabled() const { return enabled_; }
  void update(int64_t step, double loss, double tokens_per_second);
  void finish();

 private:
  int64_t first_, last_;
  bool enabled_;
  Stopwatch clock_;
};

}  // namespace alpha::train
