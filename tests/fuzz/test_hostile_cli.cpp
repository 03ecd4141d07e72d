// The `alpha` command on hostile run directories: whatever is in them, it ends with one line "alpha: ..."
// on stderr and a nonzero exit code, never a crash (SIGABRT from an uncaught exception, SIGSEGV).

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "alpha/train/checkpoint.h"
#include "core/file_test_util.h"

namespace alpha {
namespace {

namespace fs = std::filesystem;

// The exit code of `alpha args`, expecting one line on stderr that starts with "alpha: ".
int run_expecting_one_line_error(const std::string& args, const test::TempDir& dir) {
  std::string out, err;
  int code = test::run_alpha(args, dir, out, err);
  EXPECT_TRUE(err.starts_with("alpha: ")) << "alpha " << args << ": exit " << code << ", stderr: " << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
  return code;
}

// Regression: `alpha sample` on a checkpoint whose state.json lacks model_config died of an uncaught
// nlohmann::json::out_of_range (exit 134, SIGABRT). The CLI now reports any exception in one line; a
// typed error (exit 1) is expected where the reader checks the field, exit 3 marks an untyped one.
TEST(HostileCli, SampleOnACheckpointWithoutOrWithABadModelConfig) {
  test::TempDir dir;
  train::save_checkpoint(dir / "run", 1, train::CheckpointData{{}, {}, nlohmann::json::object()}, 0);
  int code = run_expecting_one_line_error("sample --checkpoint " + dir.file("run") + " --tokens 1", dir);
  EXPECT_TRUE(code == 1 || code == 3) << code;

  nlohmann::json state = nlohmann::json::object();
  state["model_config"] = {{"n_layer", -1}};
  train::save_checkpoint(dir / "run", 2, train::CheckpointData{{}, {}, state}, 0);
  EXPECT_EQ(run_expecting_one_line_error("sample --checkpoint " + dir.file("run") + " --tokens 1", dir), 1);
}

TEST(HostileCli, ResumeFromAHostileStateJson) {
  test::TempDir dir;
  train::save_checkpoint(dir / "run", 1, train::CheckpointData{{}, {}, nlohmann::json::object()}, 0);
  const fs::path state = dir / "run" / "checkpoints" / "step_00000001" / "state.json";
  for (const std::string& text : {std::string("{\"format_version\": 1, \"step\": 1}"), std::string("not json"),
                                  std::string("{\"format_version\": 1, \"step\": 1e400}"),
                                  "{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}"}) {
    SCOPED_TRACE(text.substr(0, 60));
    test::write_raw(state, text);
    int code = run_expecting_one_line_error("train --resume --out " + dir.file("run"), dir);
    EXPECT_TRUE(code == 1 || code == 3) << code;
  }
}

}  // namespace
}  // namespace alpha
