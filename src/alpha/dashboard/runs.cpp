#include "alpha/dashboard/runs.h"

#include <algorithm>
#include <fstream>

#include "alpha/dashboard/metrics_log.h"

namespace alpha::dashboard {
namespace {

namespace fs = std::filesystem;

bool is_run_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && (fs::exists(dir / "metrics.jsonl", ec) || fs::exists(dir / "config.json", ec));
}

// train.steps of RUN_DIR/config.json, when the file is there and readable.
std::optional<int64_t> configured_steps(const fs::path& run_dir) {
  std::ifstream in(run_dir / "config.json");
  if (!in) return std::nullopt;
  nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return std::nullopt;
  const nlohmann::json* steps = &config;
  for (const char* key : {"train", "steps"}) {
    if (!steps->is_object() || !steps->contains(key)) return std::nullopt;
    steps = &(*steps)[key];
  }
  if (!steps->is_number_integer()) return std::nullopt;
  return steps->get<int64_t>();
}

double seconds_since(fs::file_time_type time) {
  return std::chrono::duration<double>(fs::file_time_type::clock::now() - time).count();
}

}  // namespace

std::string_view status_name(RunStatus status) {
  switch (status) {
    case RunStatus::live: return "live";
    case RunStatus::finished: return "finished";
    case RunStatus::stopped: return "stopped";
    case RunStatus::gone: return "gone";
  }
  return "gone";
}

nlohmann::json RunSummary::to_json() const {
  return {{"name", name},
          {"status", status_name(status)},
          {"last_step", last_step ? nlohmann::json(*last_step) : nlohmann::json(nullptr)},
          {"total_steps", total_steps ? nlohmann::json(*total_steps) : nlohmann::json(nullptr)},
          {"seconds_since_update", seconds_since_update}};
}

RunSummary RunSummary::gone(std::string name) {
  RunSummary run;
  run.name = std::move(name);
  run.status = RunStatus::gone;
  return run;
}

bool is_valid_run_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find_first_of(std::string_view("/\\\0", 3)) == name.npos;
}

std::optional<fs::path> resolve_run_dir(const fs::path& runs_dir, std::string_view name) {
  if (!is_valid_run_name(name)) return std::nullopt;
  std::error_code ec;
  fs::path root = fs::weakly_canonical(runs_dir, ec);
  if (ec) return std::nullopt;
  if (!root.has_filename()) root = root.parent_path();  // "runs/" that does not exist keeps its slash
  fs::path dir = fs::weakly_canonical(root / name, ec);
  if (ec) return std::nullopt;
  // Inside means: RUNS_DIR's components, then exactly one more (a link to elsewhere resolves elsewhere).
  auto [root_end, dir_at] = std::mismatch(root.begin(), root.end(), dir.begin(), dir.end());
  if (root_end != root.end() || dir_at == dir.end() || std::next(dir_at) != dir.end()) return std::nullopt;
  return dir;
}

RunCatalog::RunCatalog(fs::path runs_dir, std::chrono::seconds live_window)
    : runs_dir_(std::move(runs_dir)), live_window_(live_window) {}

std::optional<RunSummary> RunCatalog::summarize(const std::string& name) const {
  std::optional<fs::path> dir = resolve_run_dir(runs_dir_, name);
  if (!dir || !is_run_dir(*dir)) return std::nullopt;
  RunSummary run;
  run.name = name;
  fs::path metrics = *dir / "metrics.jsonl";
  run.last_step = last_step(metrics);
  run.total_steps = configured_steps(*dir);
  std::error_code ec;
  fs::file_time_type updated = fs::last_write_time(metrics, ec);
  if (ec) updated = fs::last_write_time(*dir, ec);
  run.seconds_since_update = ec ? 0 : seconds_since(updated);
  if (run.last_step && run.total_steps && *run.last_step >= *run.total_steps)
    run.status = RunStatus::finished;
  else if (run.seconds_since_update <= double(live_window_.count()))
    run.status = RunStatus::live;
  else
    run.status = RunStatus::stopped;
  return run;
}

std::vector<RunSummary> RunCatalog::list() {
  std::vector<RunSummary> present;
  std::set<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(runs_dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (std::optional<RunSummary> run = summarize(name)) {
      present.push_back(std::move(*run));
      names.insert(name);
    }
  }
  std::sort(present.begin(), present.end(), [](const RunSummary& a, const RunSummary& b) {
    return a.seconds_since_update != b.seconds_since_update ? a.seconds_since_update < b.seconds_since_update
                                                            : a.name < b.name;
  });
  std::lock_guard lock(mutex_);
  for (const std::string& name : seen_)
    if (!names.contains(name)) present.push_back(RunSummary::gone(name));
  seen_.insert(names.begin(), names.end());
  return present;
}

std::optional<RunSummary> RunCatalog::find(std::string_view name) {
  std::string key(name);
  std::optional<RunSummary> run = summarize(key);
  std::lock_guard lock(mutex_);
  if (run) {
    seen_.insert(key);
    return run;
  }
  if (seen_.contains(key)) return RunSummary::gone(key);
  return std::nullopt;
}

}  // namespace alpha::dashboard
