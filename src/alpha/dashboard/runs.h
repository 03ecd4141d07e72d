// The runs under a runs directory (each subdirectory holding metrics.jsonl or config.json, as
// `alpha train --out RUNS_DIR/NAME` makes them), their status, and the one way from a run's name (which
// comes from a URL) to its directory: validated so that no name reaches outside the runs directory.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace alpha::dashboard {

enum class RunStatus {
  live,      // metrics.jsonl written to within the live window, steps still to go
  finished,  // the last step logged is the run's configured step count
  stopped,   // steps to go, but nothing written for longer than the live window (killed or paused)
  gone,      // listed before, and its directory has vanished since
};
std::string_view status_name(RunStatus status);

struct RunSummary {
  std::string name;
  RunStatus status = RunStatus::gone;
  std::optional<int64_t> last_step;    // of metrics.jsonl; none before the first step
  std::optional<int64_t> total_steps;  // config.json's train.steps
  double seconds_since_update = 0;     // since metrics.jsonl (or the directory) last changed
  nlohmann::json to_json() const;
  static RunSummary gone(std::string name);
};

// A run name is one path component: not empty, not "." or "..", no '/', '\\' or NUL.
bool is_valid_run_name(std::string_view name);

// RUNS_DIR/NAME when `name` is valid and the path, symbolic links resolved, stays inside RUNS_DIR;
// nullopt otherwise. Whether the directory exists is not checked.
std::optional<std::filesystem::path> resolve_run_dir(const std::filesystem::path& runs_dir, std::string_view name);

// The runs of one runs directory. Remembers every run it has listed, so that a run whose directory is
// deleted while someone watches it is reported as gone rather than silently dropped. Thread-safe.
class RunCatalog {
 public:
  explicit RunCatalog(std::filesystem::path runs_dir,
                      std::chrono::seconds live_window = std::chrono::seconds(30));
  const std::filesystem::path& runs_dir() const { return runs_dir_; }
  // Present runs, most recently updated first, then the gone ones.
  std::vector<RunSummary> list();
  // One run's summary; gone when it was listed before and has vanished, nullopt when never known.
  std::optional<RunSummary> find(std::string_view name);

 private:
  std::optional<RunSummary> summarize(const std::string& name) const;

  std::filesystem::path runs_dir_;
  std::chrono::seconds live_window_;
  std::mutex mutex_;
  std::set<std::string> seen_;
};

}  // namespace alpha::dashboard
