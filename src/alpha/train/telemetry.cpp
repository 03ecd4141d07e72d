#include "alpha/train/telemetry.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "alpha/core/error.h"
#include "alpha/core/launch.h"
#include "alpha/tensor/allocator.h"

namespace alpha::train {

CounterSnapshot CounterSnapshot::take(Device device) {
  AllocatorStats s = allocator_for(device).stats();
  allocator_for(device).reset_peak();
  return {alpha::kernel_launches(), s.allocations, s.pool_misses};
}

StepCounters StepCounters::since(const CounterSnapshot& start, Device device) {
  AllocatorStats s = allocator_for(device).stats();
  return {alpha::kernel_launches() - start.kernel_launches, s.allocations - start.allocations,
          s.pool_misses - start.pool_misses, std::max(s.peak_bytes_in_use, s.bytes_in_use + s.capture_pool_bytes)};
}

MetricsWriter::MetricsWriter(const std::filesystem::path& run_dir, bool append)
    : path_(run_dir / "metrics.jsonl"), out_(path_, append ? std::ios::app : std::ios::trunc) {
  if (!out_) raise_io("metrics", path_.string(), -1, "cannot open for writing");
}

void MetricsWriter::write(nlohmann::json record) {
  // Seconds since the Unix epoch when the line is written: a wall clock comparable across resumes and runs.
  record["wall_time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) raise_io("metrics", path_.string(), -1, "write failed");
}

ProgressBar::ProgressBar(int64_t first_step, int64_t last_step)
    : first_(first_step), last_(last_step), enabled_(isatty(STDERR_FILENO) == 1) {}

void ProgressBar::update(int64_t step, double loss, double tokens_per_second) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  double done = last_ > first_ ? double(step - first_) / double(last_ - first_) : 1.0;
  int filled = int(done * kWidth);
  double elapsed = clock_.seconds();
  double remaining = done > 0 ? elapsed * (1 - done) / done : 0;
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r[%s] step %lld/%lld  loss %.4f  %.0f tok/s  %02d:%02d left ", bar.c_str(),
               static_cast<long long>(step), static_cast<long long>(last_), loss, tokens_per_second,
               int(remaining) / 60, int(remaining) % 60);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_) std::fputc('\n', stderr);
}

}  // namespace alpha::train
