#include "alpha/train/profiler.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "alpha/core/error.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#include "alpha/runtime/kernel_trace.h"
#endif

namespace alpha::train {

namespace {

constexpr const char* kOp = "train --profile";
constexpr const char* kOutside = "(outside launches)";

// Entries of `totals` (name -> json with "time_s") as a list by time, largest first, each with its share.
nlohmann::json by_time(std::map<std::string, nlohmann::json> totals, double busy_s) {
  std::vector<nlohmann::json> rows;
  for (auto& [name, row] : totals) rows.push_back(std::move(row));
  std::stable_sort(rows.begin(), rows.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["time_s"].get<double>() > b["time_s"].get<double>();
  });
  for (auto& row : rows) row["share"] = busy_s > 0 ? row["time_s"].get<double>() / busy_s : 0.0;
  return rows;
}

}  // namespace

GpuOccupancy gpu_occupancy(const std::vector<TimedInterval>& intervals) {
  GpuOccupancy o;
  if (intervals.empty()) return o;
  // A sweep over the starts and ends: (time, +1 or -1, selected); at equal times ends come first.
  struct Event {
    uint64_t at;
    int delta;
    bool selected;
  };
  std::vector<Event> events;
  for (const TimedInterval& t : intervals) {
    events.push_back({t.start_ns, +1, t.selected});
    events.push_back({t.end_ns, -1, t.selected});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.at != b.at ? a.at < b.at : a.delta < b.delta; });
  int selected = 0, others = 0;
  uint64_t previous = events.front().at;
  for (const Event& e : events) {
    const double gap_s = double(e.at - previous) * 1e-9;
    if (selected + others > 0) o.active_s += gap_s;
    if (selected > 0) o.selected_s += gap_s;
    if (selected > 0 && others == 0) o.selected_exposed_s += gap_s;
    (e.selected ? selected : others) += e.delta;
    previous = e.at;
  }
  o.span_s = double(events.back().at - events.front().at) * 1e-9;
  return o;
}

#if ALPHA_WITH_CUDA
struct StepProfiler::Trace {
  cuda::KernelTrace trace;
};
#else
struct StepProfiler::Trace {};
#endif

StepProfiler::StepProfiler(Device device) : device_(device) {
#if ALPHA_WITH_CUDA
  if (device.is_cuda()) {
    cuda::synchronize(device.index);  // the previous step's work stays out of this one
    trace_ = std::make_unique<Trace>();
    trace_->trace.start(kOp);
  }
#endif
  wall_.restart();
  previous_ = set_launch_observer(this);
}

StepProfiler::~StepProfiler() { set_launch_observer(previous_); }

size_t StepProfiler::op_index(std::string_view name, Device device, const char* layer) {
  // Called on every launch of the profiled step: the key is built in a kept buffer, with no device string.
  key_.assign(name);
  key_ += device.is_cuda() ? '@' : '#';
  key_ += std::to_string(device.index);
  auto [it, added] = op_ids_.try_emplace(key_, ops_.size());
  if (added) {
    op_names_.emplace_back(name);
    ops_.push_back({device.str(), layer});
  }
  return it->second;
}

void StepProfiler::launch_begin(std::string_view name, Device device, LaunchLayer layer) {
  size_t index = op_index(name, device, layer == LaunchLayer::op ? "op" : "tensor");
  ++ops_[index].calls;
  const bool on_cpu = !device.is_cuda();
#if ALPHA_WITH_CUDA
  if (!on_cpu && trace_) trace_->trace.push_tag(index + 1);  // tags are non-zero
#endif
  open_.push_back({index, on_cpu, Stopwatch(), 0.0});
}

void StepProfiler::launch_end() {
  Open done = open_.back();
  open_.pop_back();
#if ALPHA_WITH_CUDA
  if (!done.on_cpu && trace_) trace_->trace.pop_tag();
#endif
  const double inclusive = done.clock.seconds();
  ops_[done.op].host_seconds += inclusive - done.nested_s;
  if (!open_.empty()) open_.back().nested_s += inclusive;
  if (!done.on_cpu) return;
  ops_[done.op].seconds += inclusive - done.nested_s;
  ++ops_[done.op].kernels;
}

nlohmann::json StepProfiler::finish(const StepPhases& phases) {
  if (finished_) raise<ValueError>(kOp, "finish", "one call per profile", "a second call");
  finished_ = true;
  set_launch_observer(previous_);
  std::map<std::string, nlohmann::json> kernels;
  double traced_s = 0;
  int64_t traced = 0;
  nlohmann::json timeline = nlohmann::json::array();
  GpuOccupancy occupancy;
#if ALPHA_WITH_CUDA
  if (trace_) {
    std::vector<cuda::TracedActivity> activities = trace_->trace.stop();
    std::vector<TimedInterval> intervals;
    const uint64_t first_ns = activities.empty() ? 0 : activities.front().start_ns;
    size_t outside = 0;
    for (const cuda::TracedActivity& a : activities) {
      const double seconds = double(a.end_ns - a.start_ns) * 1e-9;
      size_t op = a.tag > 0 && a.tag <= ops_.size() ? size_t(a.tag - 1) : SIZE_MAX;
      if (op == SIZE_MAX) {
        if (outside == 0) outside = op_index(kOutside, device_, "none") + 1;
        op = outside - 1;
      }
      ops_[op].seconds += seconds;
      ++ops_[op].kernels;
      traced_s += seconds;
      ++traced;
      nlohmann::json& row = kernels[a.name + '\n' + op_names_[op]];
      if (row.is_null()) row = {{"name", a.name}, {"op", op_names_[op]}, {"calls", 0}, {"time_s", 0.0}};
      row["calls"] = row["calls"].get<int64_t>() + 1;
      row["time_s"] = row["time_s"].get<double>() + seconds;
      intervals.push_back({a.start_ns, a.end_ns, a.name.rfind("nccl", 0) == 0});
      timeline.push_back({{"start_us", double(a.start_ns - first_ns) * 1e-3},
                          {"end_us", double(a.end_ns - first_ns) * 1e-3},
                          {"name", a.name},
                          {"op", op_names_[op]}});
    }
    occupancy = gpu_occupancy(intervals);
  }
#endif
  const double wall_s = wall_.seconds();
  double busy_s = traced_s, host_s = 0;
  int64_t launches = 0;
  std::map<std::string, nlohmann::json> op_rows;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const OpTotals& t = ops_[i];
    if (t.device == "cpu") busy_s += t.seconds;
    host_s += t.host_seconds;
    if (std::string_view(t.layer) == "op") launches += t.calls;
    op_rows[op_names_[i] + '@' + t.device] = {{"op", op_names_[i]},
                                              {"layer", t.layer},
                                              {"device", t.device},
                                              {"calls", t.calls},
                                              {"kernels", t.kernels},
                                              {"time_s", t.seconds},
                                              {"host_s", t.host_seconds}};
  }
  for (auto& [key, row] : kernels)
    row["mean_us"] = row["time_s"].get<double>() * 1e6 / double(row["calls"].get<int64_t>());
  nlohmann::json report = {{"step", phases.step},
                           {"device", device_.str()},
                           {"timing", trace_ ? "GPU time of each kernel, copy and memset (CUPTI)"
                                             : "host time of each op's kernel, exclusive of nested launches"},
                           {"wall_s", wall_s},
                           {"forward_s", phases.forward_s},
                           {"backward_s", phases.backward_s},
                           {"optimizer_s", phases.optimizer_s},
                           {"launches", launches},
                           {"busy_s", busy_s},
                           {"host_s", host_s},
                           {"ops", by_time(std::move(op_rows), busy_s)}};
  if (trace_) {
    report["traced"] = traced;
    report["span_s"] = occupancy.span_s;
    report["active_s"] = occupancy.active_s;
    report["collectives_s"] = occupancy.selected_s;
    report["collectives_exposed_s"] = occupancy.selected_exposed_s;
    report["kernels"] = by_time(std::move(kernels), busy_s);
    report["timeline"] = std::move(timeline);
  }
  return report;
}

std::string profile_table(const nlohmann::json& report, size_t rows) {
  const bool gpu = report.contains("kernels");
  const nlohmann::json& list = gpu ? report["kernels"] : report["ops"];
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "profile of step %lld on %s: wall %.3f ms, busy %.3f ms (%.0f%%), host in launches %.3f ms, "
                "%lld op launches%s\n",
                static_cast<long long>(report["step"].get<int64_t>()), report["device"].get<std::string>().c_str(),
                report["wall_s"].get<double>() * 1e3, report["busy_s"].get<double>() * 1e3,
                100.0 * report["busy_s"].get<double>() / std::max(report["wall_s"].get<double>(), 1e-12),
                report["host_s"].get<double>() * 1e3,
                static_cast<long long>(report["launches"].get<int64_t>()),
                gpu ? (", " + std::to_string(report["traced"].get<int64_t>()) + " GPU activities").c_str() : "");
  out += line;
  if (gpu) {
    const double span = report["span_s"].get<double>(), active = report["active_s"].get<double>();
    std::snprintf(line, sizeof line,
                  "GPU span %.3f ms: active %.3f ms, idle %.3f ms; NCCL collectives %.3f ms, %.3f ms of it with "
                  "nothing beside\n",
                  span * 1e3, active * 1e3, (span - active) * 1e3, report["collectives_s"].get<double>() * 1e3,
                  report["collectives_exposed_s"].get<double>() * 1e3);
    out += line;
  }
  out += gpu ? "      ms  share   calls   mean us  kernel [op]\n" : "      ms  share   calls  op\n";
  for (size_t i = 0; i < std::min(rows, list.size()); ++i) {
    const nlohmann::json& r = list[i];
    std::string name = gpu ? r["name"].get<std::string>() : r["op"].get<std::string>();
    if (name.size() > 90) name = name.substr(0, 87) + "...";
    std::snprintf(line, sizeof line, "%8.3f %5.1f%% %7lld", r["time_s"].get<double>() * 1e3,
                  100.0 * r["share"].get<double>(), static_cast<long long>(r["calls"].get<int64_t>()));
    out += line;
    if (gpu) {
      std::snprintf(line, sizeof line, " %9.1f", r["mean_us"].get<double>());
      out.append(line).append("  ").append(name).append(" [").append(r["op"].get<std::string>()).append("]\n");
    } else {
      out.append("  ").append(name).append("\n");
    }
  }
  if (list.size() > rows) out.append("(").append(std::to_string(list.size() - rows)).append(" more in profile.json)\n");
  return out;
}

}  // namespace alpha::train
