#include "alpha/train/checkpoint.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "alpha/core/error.h"
#include "alpha/core/fault.h"
#include "alpha/core/file_io.h"
#include "alpha/core/json.h"
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
constexpr std::string_view kLatestTemporaryPrefix = ".latest.tmp.";  // AtomicFileWriter's temporary for `latest`
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
  fault::before_io("mkdir", dir);
  fs::create_directories(dir, ec);
  if (ec) raise_fs(op, dir, "creating the directory", ec);
}

void remove_all(std::string_view op, const fs::path& path) {
  std::error_code ec;
  fault::before_io("remove", path);
  fs::remove_all(path, ec);
  if (ec) raise_fs(op, path, "removing", ec);
}

void rename(std::string_view op, const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fault::before_io("rename", from);
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
  fault::before_io("exchange", from);
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

bool is_leftover(std::string_view name) {
  return name.starts_with(kTemporaryPrefix) || name.starts_with(kDeletingPrefix) ||
         name.starts_with(kLatestTemporaryPrefix);
}

// What a failed save leaves the run with, for the error message; never throws.
std::string previous_checkpoint_note(const fs::path& run_dir, int64_t step) {
  std::string note = "; checkpoint step " + std::to_string(step) + " was not saved, ";
  try {
    std::optional<fs::path> latest = latest_checkpoint(run_dir);
    if (latest && latest->filename() == step_name(step))
      return "; 'latest' names the new " + step_name(step) + " but the save did not finish its last fsync";
    return note + (latest ? "'latest' still names " + latest->filename().string() : "the run has no checkpoint yet");
  } catch (const Error&) {
    return note + "and 'latest' is unreadable";
  }
}

nlohmann::json read_state(const fs::path& file) { return parse_checkpoint_state(read_file(file, kLoadOp), file.string()); }

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

nlohmann::json parse_checkpoint_state(std::string_view text, const std::string& origin) {
  nlohmann::json state;
  try {
    state = parse_json(text);
  } catch (const JsonParseError& e) {
    raise_io(kLoadOp, origin, e.offset(), std::string("invalid JSON: ") + e.what());
  }
  if (!state.is_object()) raise_io(kLoadOp, origin, 0, "expected a JSON object");
  if (!state.contains("format_version") || state["format_version"] != kCheckpointFormatVersion)
    raise_io(kLoadOp, origin, 0,
             "\"format_version\" is " + (state.contains("format_version") ? state["format_version"].dump() : "absent") +
                 ", this build reads version " + std::to_string(kCheckpointFormatVersion));
  // A step is an int64 everywhere else (the directory name, the metadata, the trainer).
  if (!state.contains("step") || !state["step"].is_number_unsigned() ||
      state["step"].get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    raise_io(kLoadOp, origin, 0, "\"step\" is absent or not an integer in [0, 2^63)");
  return state;
}

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const CheckpointData& data, int keep_last) {
  if (step < 0) raise<ValueError>(kSaveOp, "step", "a non-negative step", std::to_string(step));
  if (keep_last < 0)
    raise<ValueError>(kSaveOp, "keep_last", "a non-negative count (0 keeps all)", std::to_string(keep_last));
  check_optimizer_names(data);
  const nlohmann::json state = state_for_save(data, step);

  fault::CheckpointSaveScope fault_scope;  // test-only: ALPHA_FAULT_KILL_AT counts the steps below
  const fs::path dir = checkpoints_dir(run_dir);
  const fs::path final_dir = checkpoint_dir(run_dir, step);
  const fs::path temporary = dir / (std::string(kTemporaryPrefix) + final_dir.filename().string());
  // Until `latest` is replaced, a failure leaves the previous checkpoint current: the error says so.
  try {
    create_directories(kSaveOp, dir);
    fsync_directory(dir.parent_path(), kSaveOp);  // the run directory, which may have just gained checkpoints/
    remove_checkpoint_leftovers(run_dir);         // left by a save that crashed
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
  } catch (const IOError& e) {
    throw IOError(e.what() + previous_checkpoint_note(run_dir, step));
  }
  prune(run_dir, step, keep_last);
  fsync_directory(dir, kSaveOp);
  return final_dir;
}

std::vector<fs::path> remove_checkpoint_leftovers(const fs::path& run_dir) {
  std::vector<fs::path> leftovers;
  const fs::path dir = checkpoints_dir(run_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return leftovers;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec))
    if (is_leftover(entry.path().filename().string())) leftovers.push_back(entry.path());
  if (ec) raise_fs(kSaveOp, dir, "listing", ec);
  std::sort(leftovers.begin(), leftovers.end());
  for (const fs::path& path : leftovers) remove_all(kSaveOp, path);
  if (!leftovers.empty()) fsync_directory(dir, kSaveOp);
  return leftovers;
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
