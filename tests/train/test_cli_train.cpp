// `alpha train`, `alpha sample` and `alpha logits` through the real binary: training on a user's text
// file, and every bad input path (missing data, unknown config, bad flag values, resume without a
// checkpoint, a bad checkpoint) answered with one line naming what was wrong and exit code 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/file_test_util.h"

namespace alpha::train {
namespace {

namespace fs = std::filesystem;

// A short run: two steps, no sampling, so each command takes well under a second of training.
const std::string kQuick = " --config tiny --steps 2 --batch-size 2 --seq-len 16 --eval-every 0 --sample-tokens 0";

void expect_one_line_error(int code, const std::string& err, const std::string& fragment) {
  EXPECT_EQ(code, 1) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find(fragment), std::string::npos) << "stderr '" << err << "' lacks '" << fragment << "'";
}

TEST(CliTrain, TrainsOnATextFileAndSamplesFromTheCheckpoint) {
  test::TempDir dir;
  {
    std::ofstream text(dir / "story.txt");
    for (int i = 0; i < 400; ++i) text << "The quick brown fox " << i % 7 << " jumps over the lazy dog.\n";
  }
  std::string out, err;
  ASSERT_EQ(test::run_alpha("train --data " + dir.file("story.txt") + " --out " + dir.file("run") + kQuick +
                                " --vocab-size 300",
                            dir, out, err), 0) << err;
  EXPECT_TRUE(fs::exists(dir / "run" / "metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dir / "run" / "data" / "tokenizer.model"));
  ASSERT_EQ(test::run_alpha("sample --checkpoint " + dir.file("run") + " --prompt 'The quick' --tokens 5", dir, out,
                            err), 0) << err;
  EXPECT_TRUE(out.starts_with("The quick")) << out;
  // Resuming a finished run to a larger step count continues it.
  ASSERT_EQ(test::run_alpha("train --resume --out " + dir.file("run") + " --steps 3", dir, out, err), 0) << err;
  EXPECT_TRUE(fs::exists(dir / "run" / "checkpoints" / "step_00000003"));
}

TEST(CliTrain, SaveEveryMinusOneWritesNoCheckpoint) {
  test::TempDir dir;
  {
    std::ofstream text(dir / "story.txt");
    for (int i = 0; i < 400; ++i) text << "A benchmark's run writes metrics and nothing else " << i % 5 << ".\n";
  }
  std::string out, err;
  const std::string data = "train --data " + dir.file("story.txt") + kQuick + " --vocab-size 300";
  ASSERT_EQ(test::run_alpha(data + " --out " + dir.file("never") + " --save-every -1", dir, out, err), 0) << err;
  EXPECT_TRUE(fs::exists(dir / "never" / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "never" / "checkpoints")) << "save_every -1 wrote a checkpoint";
  // The default for a finished run: its last step checkpointed.
  ASSERT_EQ(test::run_alpha(data + " --out " + dir.file("end") + " --save-every 0", dir, out, err), 0) << err;
  EXPECT_TRUE(fs::exists(dir / "end" / "checkpoints" / "step_00000002"));
  expect_one_line_error(test::run_alpha(data + " --out " + dir.file("bad") + " --save-every -2", dir, out, err), err,
                        "save_every");
}

TEST(CliTrain, BadInputsGiveOneClearLine) {
  test::TempDir dir;
  std::string out, err;
  expect_one_line_error(test::run_alpha("train --data " + dir.file("missing.txt") + " --out " + dir.file("r1") + kQuick,
                                        dir, out, err), err, "missing.txt");
  expect_one_line_error(test::run_alpha("train --config no_such_config --out " + dir.file("r2"), dir, out, err), err,
                        "no_such_config");
  expect_one_line_error(test::run_alpha("train --lr fast --out " + dir.file("r3") + kQuick, dir, out, err), err,
                        "--lr");
  expect_one_line_error(test::run_alpha("train --n-head 5 --out " + dir.file("r4") + kQuick, dir, out, err), err,
                        "n_head");
  expect_one_line_error(test::run_alpha("train --tie-embeddings maybe --out " + dir.file("r5") + kQuick, dir, out, err),
                        err, "--tie-embeddings");
  expect_one_line_error(test::run_alpha("train --resume --out " + dir.file("empty"), dir, out, err), err, "--resume");
  expect_one_line_error(test::run_alpha("sample --checkpoint " + dir.file("nowhere"), dir, out, err), err, "nowhere");
  // Precision and TF32: known values only, and the GPU-only ones refused on the CPU.
  expect_one_line_error(test::run_alpha("train --precision fp8 --out " + dir.file("r6") + kQuick, dir, out, err), err,
                        "precision");
  expect_one_line_error(test::run_alpha("train --precision bf16 --out " + dir.file("r7") + kQuick, dir, out, err), err,
                        "bf16 and f16 compute need a CUDA device");
  expect_one_line_error(test::run_alpha("train --tf32 true --out " + dir.file("r8") + kQuick, dir, out, err), err,
                        "tf32");
  // Stochastic rounding rounds the bf16/f16 compute copy: at f32 there is none.
  expect_one_line_error(
      test::run_alpha("train --stochastic-rounding true --out " + dir.file("r10") + kQuick, dir, out, err), err,
      "'stochastic_rounding'");
  // Flash attention names a GPU kernel: on the CPU the model refuses it.
  expect_one_line_error(test::run_alpha("train --attention flash --out " + dir.file("r9") + kQuick, dir, out, err), err,
                        "flash attention runs on a CUDA device");
}

TEST(CliCheck, KernelHarnessNeedsAGpuAndAKnownCheck) {
  test::TempDir dir;
  std::string out, err;
  // The CPU is not a device the harness checks; neither is a GPU this machine or build lacks.
  expect_one_line_error(test::run_alpha("check kernels --device cpu", dir, out, err), err, "check kernels");
  EXPECT_NE(err.find("cpu"), std::string::npos) << err;
  EXPECT_TRUE(out.empty()) << "no table before the error: " << out;
  expect_one_line_error(test::run_alpha("check kernels --device gpu7", dir, out, err), err, "--device");
}

TEST(CliTrain, LogitsNeedsAnIdsTensor) {
  test::TempDir dir;
  std::string out, err;
  ASSERT_EQ(test::run_alpha("train --out " + dir.file("run") + kQuick, dir, out, err), 0) << err;
  // A safetensors file whose only tensor is not called 'ids': 8-byte header length, header, 4 bytes of data.
  std::string header = R"({"x":{"dtype":"I32","shape":[1,1],"data_offsets":[0,4]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  file += header + std::string(4, '\0');
  std::ofstream(dir / "wrong.safetensors", std::ios::binary) << file;
  expect_one_line_error(test::run_alpha("logits --checkpoint " + dir.file("run") + " --input " +
                                            dir.file("wrong.safetensors") + " --out " + dir.file("l.safetensors"),
                                        dir, out, err), err, "'ids'");
}

}  // namespace
}  // namespace alpha::train
