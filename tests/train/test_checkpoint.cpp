#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>

#include "alpha/train/checkpoint.h"
#include "alpha/train/safetensors.h"
#include "support/checks.h"
#include "train/train_test_util.h"

namespace alpha::train {
namespace {

namespace fs = std::filesystem;
using test::bit_equal;
using test::list_dir;
using test::random_bits;
using test::read_raw;
using test::TempDir;
using test::write_raw;

using Names = std::vector<std::string>;

// A small GPT-shaped checkpoint in mixed dtypes (random bits, so bit-exactness is really exercised),
// AdamW moments for every weight, and trainer state with values JSON must carry exactly.
CheckpointData sample(uint64_t tag) {
  CheckpointData d;
  d.weights = {{"wte.weight", random_bits({11, 8}, DType::f32)},
               {"wpe.weight", random_bits({5, 8}, DType::bf16)},
               {"blocks.0.attn.qkv.weight", random_bits({24, 8}, DType::f64)},
               {"blocks.0.attn.qkv.bias", random_bits({24}, DType::f16)},
               {"ln_f.weight", random_bits({8}, DType::f32)},
               {"scale", random_bits({}, DType::f32)}};
  for (const char* slot : {"m/", "v/"})
    for (const auto& [name, t] : d.weights) d.optimizer.emplace_back(slot + name, random_bits(t.shape(), DType::f32));
  d.optimizer.emplace_back("step/wte.weight", random_bits({}, DType::i64));
  d.state = {{"rng", {{"seed", std::numeric_limits<uint64_t>::max()}, {"offset", tag}}},
             {"data", {{"shard", 3}, {"position", 123456789012345LL}}},
             {"model_config", {{"n_layer", 1}, {"n_embd", 8}, {"bias", true}}},
             {"lr", 0.1}};
  return d;
}

void expect_same(const CheckpointData& got, const CheckpointData& want, int64_t step) {
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (size_t i = 0; i < want.weights.size(); ++i) {
    EXPECT_EQ(got.weights[i].first, want.weights[i].first);
    EXPECT_TRUE(bit_equal(got.weights[i].second, want.weights[i].second)) << want.weights[i].first;
  }
  ASSERT_EQ(got.optimizer.size(), want.optimizer.size());
  for (size_t i = 0; i < want.optimizer.size(); ++i) {
    EXPECT_EQ(got.optimizer[i].first, want.optimizer[i].first);
    EXPECT_TRUE(bit_equal(got.optimizer[i].second, want.optimizer[i].second)) << want.optimizer[i].first;
  }
  nlohmann::json state = want.state;
  state["step"] = step;
  state["format_version"] = kCheckpointFormatVersion;
  EXPECT_EQ(got.state, state);
}

std::vector<int64_t> steps(const fs::path& run) {
  std::vector<int64_t> found;
  for (const auto& [step, path] : list_checkpoints(run)) {
    EXPECT_EQ(path, checkpoint_dir(run, step));
    found.push_back(step);
  }
  return found;
}

TEST(Checkpoint, SavesTheDocumentedLayoutAndLoadsBitExactly) {
  TempDir run;
  CheckpointData data = sample(1);
  fs::path dir = save_checkpoint(run.path(), 100, data, 3);
  EXPECT_EQ(dir, run.path() / "checkpoints" / "step_00000100");
  EXPECT_EQ(list_dir(run / "checkpoints"), (Names{"latest", "step_00000100"}));  // no temporaries left
  EXPECT_EQ(list_dir(dir), (Names{"model.safetensors", "optimizer.safetensors", "state.json"}));
  EXPECT_EQ(read_raw(run / "checkpoints" / "latest"), "step_00000100\n");
  EXPECT_EQ(latest_checkpoint(run.path()), dir);

  SafetensorsContents model = read_safetensors(dir / "model.safetensors");
  EXPECT_EQ(model.metadata, (SafetensorsMetadata{{"format", "alpha"},
                                                 {"format_version", "1"},
                                                 {"content", "model"},
                                                 {"step", "100"},
                                                 {"model_config", data.state["model_config"].dump()}}));
  EXPECT_EQ(read_safetensors(dir / "optimizer.safetensors").metadata.at("content"), "optimizer");
  nlohmann::json state = nlohmann::json::parse(read_raw(dir / "state.json"));
  EXPECT_EQ(state["step"], 100);
  EXPECT_EQ(state["rng"]["seed"].get<uint64_t>(), std::numeric_limits<uint64_t>::max());

  expect_same(load_checkpoint(run.path()), data, 100);  // through `latest`
  expect_same(load_checkpoint(dir), data, 100);         // the step directory itself
}

TEST(Checkpoint, LatestFollowsTheNewestAndKeepLastPrunesTheOldest) {
  TempDir run;
  EXPECT_EQ(latest_checkpoint(run.path()), std::nullopt);
  EXPECT_TRUE(list_checkpoints(run.path()).empty());
  std::vector<CheckpointData> saved;
  for (int64_t step : {100, 200, 300, 400}) {
    saved.push_back(sample(uint64_t(step)));
    save_checkpoint(run.path(), step, saved.back(), 2);
    EXPECT_EQ(latest_checkpoint(run.path()), checkpoint_dir(run.path(), step));
  }
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{300, 400}));
  EXPECT_EQ(list_dir(run / "checkpoints"), (Names{"latest", "step_00000300", "step_00000400"}));
  expect_same(load_checkpoint(run.path()), saved[3], 400);
  expect_same(load_checkpoint(checkpoint_dir(run.path(), 300)), saved[2], 300);

  save_checkpoint(run.path(), 500, sample(5), 0);  // 0 keeps everything
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{300, 400, 500}));
  save_checkpoint(run.path(), 600, sample(6), 1);
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{600}));
}

// A run resumed from an earlier checkpoint saves steps below ones already on disk: `latest` follows the
// resumed run, pruning counts only steps up to the one saved, and the later ones are left alone.
TEST(Checkpoint, ResumedRunPrunesOnlyItsOwnPast) {
  TempDir run;
  for (int64_t step : {100, 200, 300}) save_checkpoint(run.path(), step, sample(uint64_t(step)), 0);
  CheckpointData resumed = sample(150);
  save_checkpoint(run.path(), 150, resumed, 1);
  EXPECT_EQ(latest_checkpoint(run.path()), checkpoint_dir(run.path(), 150));
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{150, 200, 300}));
  expect_same(load_checkpoint(run.path()), resumed, 150);
}

TEST(Checkpoint, SavingAnExistingStepReplacesIt) {
  TempDir run;
  save_checkpoint(run.path(), 100, sample(1), 2);
  CheckpointData second = sample(2);
  second.weights.pop_back();  // a different set of tensors, to be sure nothing of the first survives
  second.optimizer = {{"m/wte.weight", random_bits({11, 8}, DType::f32)}};
  save_checkpoint(run.path(), 100, second, 2);
  expect_same(load_checkpoint(run.path()), second, 100);
  EXPECT_EQ(list_dir(run / "checkpoints"), (Names{"latest", "step_00000100"}));
}

// The newest checkpoint damaged in each of its files: loading it names the file and the byte offset,
// and the previous checkpoint still loads.
TEST(Checkpoint, CorruptNewestRaisesAndTheOlderOneStillLoads) {
  TempDir run;
  CheckpointData older = sample(1);
  save_checkpoint(run.path(), 100, older, 5);
  const fs::path newest = save_checkpoint(run.path(), 200, sample(2), 5);

  struct Damage {
    const char* file;
    std::function<std::string(const std::string&)> corrupt;
    std::string offset;  // "at byte offset N" for the damaged file
    const char* phrase;
  };
  const size_t model_size = fs::file_size(newest / "model.safetensors");
  const std::vector<Damage> damages = {
      {"model.safetensors", [](const std::string& f) { return f.substr(0, f.size() - 5); },
       "at byte offset " + std::to_string(model_size - 5), "truncated"},
      {"model.safetensors", [](const std::string& f) { return f.substr(0, 6); }, "at byte offset 0", "fewer than the 8-byte"},
      {"optimizer.safetensors",
       [](const std::string& f) {
         std::string g = f;
         g[g.find("F32")] = 'X';  // an unknown dtype "X32"
         return g;
       },
       "at byte offset 8", "unknown dtype \"X32\""},
      {"state.json", [](const std::string& f) { return f.substr(0, 10); }, "at byte offset 10", "invalid JSON"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(std::string(d.file) + ": " + d.phrase);
    const std::string original = read_raw(newest / d.file);
    write_raw(newest / d.file, d.corrupt(original));
    const std::string file = (newest / d.file).string();
    EXPECT_ALPHA_ERROR(load_checkpoint(run.path()), IOError, file.c_str(), d.offset.c_str(), d.phrase);
    EXPECT_ALPHA_ERROR(load_checkpoint(newest), IOError, file.c_str(), d.offset.c_str(), d.phrase);
    expect_same(load_checkpoint(checkpoint_dir(run.path(), 100)), older, 100);
    write_raw(newest / d.file, original);
  }
}

// Files from different steps mixed in one directory are caught by the step in each file's metadata.
TEST(Checkpoint, FilesFromAnotherStepAreRejected) {
  TempDir run;
  const fs::path first = save_checkpoint(run.path(), 100, sample(1), 0);
  const fs::path second = save_checkpoint(run.path(), 200, sample(2), 0);
  fs::copy_file(first / "optimizer.safetensors", second / "optimizer.safetensors", fs::copy_options::overwrite_existing);
  const std::string file = (second / "optimizer.safetensors").string();
  EXPECT_ALPHA_ERROR(load_checkpoint(second), IOError, file.c_str(), "metadata step '100' does not match step 200");
}

// A save that fails part-way (a file-size limit makes the weights' write fail) leaves `latest` on the
// previous checkpoint, which loads, and no temporary directory behind.
TEST(Checkpoint, FailedSaveLeavesThePreviousCheckpointCurrent) {
  TempDir run;
  CheckpointData first = sample(1);
  save_checkpoint(run.path(), 100, first, 1);
  CheckpointData big = sample(2);
  big.weights.emplace_back("big", random_bits({1 << 16}, DType::f32));
  big.optimizer.clear();
  bool threw = false;
  try {
    test::FileSizeLimit limit(64 * 1024);
    save_checkpoint(run.path(), 200, big, 1);
  } catch (const IOError& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(threw);
  EXPECT_EQ(list_dir(run / "checkpoints"), (Names{"latest", "step_00000100"}));
  expect_same(load_checkpoint(run.path()), first, 100);
}

// Leftovers of a save or a pruning that crashed are not checkpoints, and the next save clears them.
TEST(Checkpoint, LeftoversOfACrashAreIgnoredAndCleared) {
  TempDir run;
  save_checkpoint(run.path(), 100, sample(1), 1);
  fs::create_directories(run / "checkpoints" / ".tmp.step_00000200");
  write_raw(run / "checkpoints" / ".tmp.step_00000200" / "model.safetensors", "partial");
  fs::create_directories(run / "checkpoints" / ".deleting.step_00000050");
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{100}));
  EXPECT_EQ(latest_checkpoint(run.path()), checkpoint_dir(run.path(), 100));
  CheckpointData next = sample(2);
  save_checkpoint(run.path(), 200, next, 1);
  EXPECT_EQ(list_dir(run / "checkpoints"), (Names{"latest", "step_00000200"}));
  expect_same(load_checkpoint(run.path()), next, 200);
}

TEST(Checkpoint, BadArgumentsRaiseBeforeAnythingIsWritten) {
  TempDir run;
  CheckpointData d = sample(1);
  EXPECT_ALPHA_ERROR(save_checkpoint(run.path(), -1, d, 1), ValueError, "[save_checkpoint]", "'step'", "-1");
  EXPECT_ALPHA_ERROR(save_checkpoint(run.path(), 1, d, -2), ValueError, "'keep_last'", "-2");
  CheckpointData bad_state = d;
  bad_state.state = nlohmann::json::array({1, 2});
  EXPECT_ALPHA_ERROR(save_checkpoint(run.path(), 1, bad_state, 1), ValueError, "'data.state'", "a JSON object", "array");
  bad_state.state = {{"step", 7}};
  EXPECT_ALPHA_ERROR(save_checkpoint(run.path(), 1, bad_state, 1), ValueError, "equal to the step 1", "got 7");
  for (const char* name : {"wte.weight", "/wte.weight", "m/missing.weight"}) {
    CheckpointData bad_optimizer = d;
    bad_optimizer.optimizer.emplace_back(name, random_bits({1}, DType::f32));
    EXPECT_ALPHA_ERROR(save_checkpoint(run.path(), 1, bad_optimizer, 1), ValueError, "'data.optimizer'",
                       "'<slot>/<weight name>'", name);
  }
  CheckpointData duplicate = d;
  duplicate.weights.push_back(d.weights[0]);
  EXPECT_ALPHA_ERROR(save_checkpoint(run.path(), 1, duplicate, 1), ValueError, "unique names");
  EXPECT_EQ(latest_checkpoint(run.path()), std::nullopt);
  EXPECT_TRUE(list_checkpoints(run.path()).empty());
  // A null state is an empty object.
  CheckpointData no_state = d;
  no_state.state = nullptr;
  save_checkpoint(run.path(), 3, no_state, 1);
  EXPECT_EQ(load_checkpoint(run.path()).state, (nlohmann::json{{"step", 3}, {"format_version", 1}}));
}

TEST(Checkpoint, MissingOrMalformedPointersRaise) {
  TempDir run;
  EXPECT_ALPHA_ERROR(load_checkpoint(run / "nowhere"), IOError, "[load_checkpoint]", "nowhere'",
                     "neither a checkpoint directory nor a run directory");
  fs::create_directories(run / "checkpoints");
  EXPECT_ALPHA_ERROR(load_checkpoint(run.path()), IOError, "has no checkpoint yet");
  write_raw(run / "checkpoints" / "latest", "step_12\n");
  EXPECT_ALPHA_ERROR(latest_checkpoint(run.path()), IOError, "[latest_checkpoint]", "latest' at byte offset 0",
                     "expected one line 'step_<8 digits>', got 'step_12'");
  write_raw(run / "checkpoints" / "latest", "step_00000700\n");
  EXPECT_ALPHA_ERROR(load_checkpoint(run.path()), IOError, "names 'step_00000700', which is not a directory");
  fs::create_directories(run / "checkpoints" / "step_00000700");
  EXPECT_ALPHA_ERROR(load_checkpoint(run.path()), IOError, "step_00000700/state.json'", "No such file");
  write_raw(run / "checkpoints" / "step_00000700" / "state.json", R"({"step": 700})");
  EXPECT_ALPHA_ERROR(load_checkpoint(run.path()), IOError, "state.json' at byte offset 0",
                     "\"format_version\" is absent, this build reads version 1");
}

// The state reader on hostile text (fuzz/corpus/checkpoint_state): every case is an IOError naming the origin.
TEST(Checkpoint, StateReaderRejectsHostileText) {
  const std::pair<std::string, const char*> cases[] = {
      {"", "invalid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {R"({"format_version": 2, "step": 1})", "\"format_version\" is 2"},
      {R"({"format_version": 1, "step": -1})", "\"step\" is absent or not an integer in [0, 2^63)"},
      {R"({"format_version": 1, "step": 1.5})", "not an integer in [0, 2^63)"},
      // Regression (fuzz/corpus/checkpoint_state/crash_number_past_double): nlohmann's out_of_range escaped.
      {R"({"format_version": 11e400, "step": 0})", "invalid JSON: [json.exception.out_of_range.406] number overflow"},
      // Regression: a step past int64 was accepted and read back as a negative step.
      {R"({"format_version": 1, "step": 9223372036854775808})", "not an integer in [0, 2^63)"},
      {R"({"format_version": 1, "step": 18446744073709551615})", "not an integer in [0, 2^63)"},
      // Regression: deep nesting parsed, and recursed (copy, dump) once per level afterwards.
      {R"({"format_version": 1, "step": 1, "x": )" + std::string(100000, '[') + std::string(100000, ']') + "}",
       "nested deeper than 64 levels"},
  };
  for (const auto& [text, phrase] : cases) {
    SCOPED_TRACE(text.substr(0, 80));
    EXPECT_ALPHA_ERROR(parse_checkpoint_state(text, "somewhere/state.json"), IOError,
                       "[load_checkpoint] file 'somewhere/state.json'", phrase);
  }
  nlohmann::json ok = parse_checkpoint_state(R"({"format_version": 1, "step": 9223372036854775807, "x": [[1]]})", "s");
  EXPECT_EQ(ok["step"].get<int64_t>(), INT64_MAX);
}

}  // namespace
}  // namespace alpha::train
