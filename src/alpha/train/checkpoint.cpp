#include "alpha/train/checkpoint.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "alpha/core/error.h"
#include "alpha/core/file_io.h"
#include "alpha/train/safetensors.h"

namespace alpha::train {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSaveOp = "save_checkpoint";
constexpr std::string_view kLoadOp = "load_checkpoint";
constexpr std::string_view kLatestOp = "latest_checkpoint";
constexpr std::string_view kStepPrefix = "step_";
constexpr std::string_view kTemporaryPrefix = ".tmp.";   // a checkpoint being written
constexpr std::string_view kDeletingPrefix = ".deleting.";  // a pruned checkpoint being removed
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr const char* kLatestFile = "latest";

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", (long long)step);
  return name;
}

// The step of a directory named "step_<at least 8 digits>"; nullopt for any other name.
std::optional<int64_t> parse_step_name(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.size() < 8 || digits.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

[[noreturn]] void raise_fs(std::string_view op, const fs::path& path, std::string_view what, const std::error_code& ec) {
  raise_io(op, path.string(), -1, std::string(what) + ": " + ec.message());
}

void create_directories(std::string_view op, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) raise_fs(op, dir, "creating the directory", ec);
}

void remove_all(std::string_view op, const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) raise_fs(op, path, "removing", ec);
}

void rename(std::string_view op, const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) raise_fs(op, from, "renaming to '" + to.string() + "'", ec);
}

// Moves the complete checkpoint in `from` to `to`; an existing `to` is swapped out in one atomic step (so
// `latest` never names a missing directory) and then removed.
void publish(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::exists(to, ec)) {
    rename(kSaveOp, from, to);
    return;
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0)
    raise_io(kSaveOp, to.string(), -1,
             "replacing the existing checkpoint (renameat2 RENAME_EXCHANGE): " + std::string(std::strerror(errno)));
  remove_all(kSaveOp, from);  // now holds the replaced checkpoint
}

// The optimizer tensors must belong to the model's weights: "<slot>/<weight name>".
void check_optimizer_names(const CheckpointData& data) {
  std::set<std::string_view> weights;
  for (const auto& [name, t] : data.weights) weights.insert(name);
  for (const auto& [name, t] : data.optimizer) {
    size_t slash = name.find('/');
    if (slash == 0 || slash == std::string::npos || !weights.contains(std::string_view(name).substr(slash + 1)))
      raise<ValueError>(kSaveOp, "data.optimizer", "names '<slot>/<weight name>' such as 'm/wte.weight'",
                        "'" + name + "'");
  }
}

nlohmann::json state_for_save(const CheckpointData& data, int64_t step) {
  nlohmann::json state = data.state.is_null() ? nlohmann::json::object() : data.state;
  if (!state.is_object()) raise<ValueError>(kSaveOp, "data.state", "a JSON object", state.type_name());
  if (state.contains("step") && state["step"] != step)
    raise<ValueError>(kSaveOp, "data.state", "\"step\" absent or equal to the step " + std::to_string(step),
                      state["step"].dump());
  state["format_version"] = kCheckpointFormatVersion;
  state["step"] = step;
  return state;
}

SafetensorsMetadata file_metadata(const nlohmann::json& state, int64_t step, std::string_view content) {
  SafetensorsMetadata metadata{{"format", "alpha"},
                               {"format_version", std::to_string(kCheckpointFormatVersion)},
                               {"content", std::string(content)},
                               {"step", std::to_string(step)}};
  if (content == "model" && state.contains("model_config")) metadata["model_config"] = state["model_config"].dump();
  return metadata;
}

// Keeps the newest keep_last checkpoints with steps <= saved_step; removes the others (and leftovers of
// interrupted removals). Each is renamed away first so that no half-deleted step directory is ever visible.
void prune(const fs::path& run_dir, int64_t saved_step, int keep_last) {
  const fs::path dir = checkpoints_dir(run_dir);
  std::vector<fs::path> doomed;
  if (keep_last > 0) {
    std::vector<std::pair<int64_t, fs::path>> older;
    for (auto& entry : list_checkpoints(run_dir))
      if (entry.first <= saved_step) older.push_back(std::move(entry));
    for (size_t i = 0; i + size_t(keep_last) < older.size(); ++i) {
      fs::path away = dir / (std::string(kDeletingPrefix) + older[i].second.filename().string());
      rename(kSaveOp, older[i].second, away);
    }
  }
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().starts_with(kDeletingPrefix)) doomed.push_back(entry.path());
  if (ec) raise_fs(kSaveOp, dir, "listing", ec);
  for (const fs::path& path : doomed) remove_all(kSaveOp, path);
}

nlohmann::json read_state(const fs::path& file) {
  std::string text = read_file(file, kLoadOp);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    raise_io(kLoadOp, file.string(), e.byte > 0 ? (long long)e.byte - 1 : 0, std::string("invalid JSON: ") + e.what());
  }
  if (!state.is_object()) raise_io(kLoadOp, file.string(), 0, "expected a JSON object");
  if (!state.contains("format_version") || state["format_version"] != kCheckpointFormatVersion)
    raise_io(kLoadOp, file.string(), 0,
             "\"format_version\" is " + (state.contains("format_version") ? state["format_version"].dump() : "absent") +
                 ", this build reads version " + std::to_string(kCheckpointFormatVersion));
  if (!state.contains("step") || !state["step"].is_number_unsigned())
    raise_io(kLoadOp, file.string(), 0, "\"step\" is absent or not a non-negative integer");
  return state;
}

// Reads one safetensors file of the checkpoint and checks that it belongs to the same step as state.json.
NamedTensors read_part(const fs::path& file, int64_t step) {
  SafetensorsContents contents = read_safetensors(file);
  auto it = contents.metadata.find("step");
  if (it == contents.metadata.end() || it->second != std::to_string(step))
    raise_io(kLoadOp, file.string(), -1,
             "metadata step " + (it == contents.metadata.end() ? std::string("absent") : "'" + it->second + "'") +
                 " does not match step " + std::to_string(step) + " of " + kStateFile);
  return std::move(contents.tensors);
}

}  // namespace

fs::path checkpoints_dir(const fs::path& run_dir) { return run_dir / "checkpoints"; }

fs::path checkpoint_dir(const fs::path& run_dir, int64_t step) { return checkpoints_dir(run_dir) / step_name(step); }

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const CheckpointData& data, int keep_last) {
  if (step < 0) raise<ValueError>(kSaveOp, "step", "a non-negative step", std::to_string(step));
  if (keep_last < 0)
    raise<ValueError>(kSaveOp, "keep_last", "a non-negative count (0 keeps all)", std::to_string(keep_last));
  check_optimizer_names(data);
  const nlohmann::json state = state_for_save(data, step);

  const fs::path dir = checkpoints_dir(run_dir);
  create_directories(kSaveOp, dir);
  fsync_directory(dir.parent_path(), kSaveOp);  // the run directory, which may have just gained checkpoints/
  const fs::path final_dir = checkpoint_dir(run_dir, step);
  const fs::path temporary = dir / (std::string(kTemporaryPrefix) + final_dir.filename().string());
  remove_all(kSaveOp, temporary);  // left by a save that crashed
  create_directories(kSaveOp, temporary);
  try {
    write_safetensors(temporary / kModelFile, data.weights, file_metadata(state, step, "model"));
    write_safetensors(temporary / kOptimizerFile, data.optimizer, file_metadata(state, step, "optimizer"));
    write_file_atomic(temporary / kStateFile, state.dump(2) + "\n", kSaveOp);
    publish(temporary, final_dir);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    throw;
  }
  fsync_directory(dir, kSaveOp);
  write_file_atomic(dir / kLatestFile, final_dir.filename().string() + "\n", kSaveOp);
  prune(run_dir, step, keep_last);
  fsync_directory(dir, kSaveOp);
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  const fs::path latest = checkpoints_dir(run_dir) / kLatestFile;
  std::error_code ec;
  if (!fs::exists(latest, ec)) {
    if (ec) raise_fs(kLatestOp, latest, "checking", ec);
    return std::nullopt;
  }
  std::string name = read_file(latest, kLatestOp);
  if (name.ends_with('\n')) name.pop_back();
  if (!parse_step_name(name))
    raise_io(kLatestOp, latest.string(), 0, "expected one line 'step_<8 digits>', got '" + name + "'");
  fs::path dir = checkpoints_dir(run_dir) / name;
  if (!fs::is_directory(dir, ec))
    raise_io(kLatestOp, latest.string(), -1, "names '" + name + "', which is not a directory in " +
                                                  checkpoints_dir(run_dir).string());
  return dir;
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  const fs::path dir = checkpoints_dir(run_dir);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec))
    if (auto step = parse_step_name(entry.path().filename().string()); step && entry.is_directory(ec))
      found.emplace_back(*step, entry.path());
  if (ec) raise_fs("list_checkpoints", dir, "listing", ec);
  std::sort(found.begin(), found.end());
  return found;
}

CheckpointData load_checkpoint(const fs::path& path) {
  std::error_code ec;
  fs::path dir = path;
  if (fs::is_directory(checkpoints_dir(path), ec)) {
    std::optional<fs::path> latest = latest_checkpoint(path);
    if (!latest) raise_io(kLoadOp, path.string(), -1, "the run directory has no checkpoint yet (no checkpoints/latest)");
    dir = *latest;
  }
  if (!fs::is_directory(dir, ec))
    raise_io(kLoadOp, path.string(), -1, "neither a checkpoint directory nor a run directory with checkpoints");
  CheckpointData data;
  data.state = read_state(dir / kStateFile);
  const int64_t step = data.state["step"].get<int64_t>();
  data.weights = read_part(dir / kModelFile, step);
  data.optimizer = read_part(dir / kOptimizerFile, step);
  return data;
}

}  // namespace alpha::train
