// The tolerant metrics reader: good lines, a half-written last line, garbage, an empty file, a missing
// file; skipped lines are counted with a warning naming the line, never thrown.
#include <gtest/gtest.h>

#include "alpha/dashboard/metrics_log.h"
#include "core/file_test_util.h"
#include "dashboard/run_fixture.h"

namespace alpha::dashboard {
namespace {

TEST(MetricsLog, ReadsEveryGoodLineInOrder) {
  test::TempDir dir;
  test::write_raw(dir / "metrics.jsonl", test::metrics_line(1) + test::metrics_line(2) + test::metrics_line(3));
  MetricsLog log = read_metrics(dir / "metrics.jsonl");
  ASSERT_EQ(log.records.size(), 3u);
  EXPECT_EQ(log.records[2]["step"], 3);
  EXPECT_DOUBLE_EQ(log.records[0]["loss"].get<double>(), 4.9);
  EXPECT_EQ(log.skipped_lines, 0);
  EXPECT_TRUE(log.warnings.empty());
  EXPECT_EQ(last_step(dir / "metrics.jsonl"), 3);
}

TEST(MetricsLog, SkipsAHalfWrittenLastLineWithAWarning) {
  test::TempDir dir;
  std::string third = test::metrics_line(3);
  test::write_raw(dir / "metrics.jsonl", test::metrics_line(1) + test::metrics_line(2) + third.substr(0, third.size() / 2));
  MetricsLog log = read_metrics(dir / "metrics.jsonl");
  EXPECT_EQ(log.records.size(), 2u);
  EXPECT_EQ(log.skipped_lines, 1);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_NE(log.warnings[0].find("line 3"), std::string::npos) << log.warnings[0];
  EXPECT_NE(log.warnings[0].find("incomplete"), std::string::npos) << log.warnings[0];
  EXPECT_EQ(last_step(dir / "metrics.jsonl"), 2);
}

TEST(MetricsLog, SkipsGarbageAndRecordsWithoutAStep) {
  test::TempDir dir;
  test::write_raw(dir / "metrics.jsonl", test::metrics_line(1) + "not json at all\n" + "[1, 2, 3]\n" +
                                             "{\"step\": \"two\"}\n" + std::string("\x01\xff\xfe{", 4) + "\n\n" +
                                             test::metrics_line(2));
  MetricsLog log = read_metrics(dir / "metrics.jsonl");
  ASSERT_EQ(log.records.size(), 2u);
  EXPECT_EQ(log.records[1]["step"], 2);
  EXPECT_EQ(log.skipped_lines, 4);  // the empty line is not a record, nor an error
  ASSERT_EQ(log.warnings.size(), 4u);
  EXPECT_NE(log.warnings[0].find("line 2: not JSON"), std::string::npos) << log.warnings[0];
  EXPECT_NE(log.warnings[2].find("line 4: not a record"), std::string::npos) << log.warnings[2];
}

TEST(MetricsLog, KeepsOnlyStepsAfterTheOneAsked) {
  test::TempDir dir;
  test::write_fixture_run(dir.path(), 10, 10);
  MetricsLog log = read_metrics(dir / "metrics.jsonl", 7);
  ASSERT_EQ(log.records.size(), 3u);
  EXPECT_EQ(log.records[0]["step"], 8);
}

TEST(MetricsLog, EmptyAndMissingFilesAreEmptyLogs) {
  test::TempDir dir;
  test::write_raw(dir / "metrics.jsonl", "");
  for (const char* name : {"metrics.jsonl", "missing.jsonl"}) {
    MetricsLog log = read_metrics(dir / name);
    EXPECT_TRUE(log.records.empty()) << name;
    EXPECT_EQ(log.skipped_lines, 0) << name;
    EXPECT_EQ(last_step(dir / name), std::nullopt) << name;
  }
}

// Regressions from fuzz/corpus/metrics_log: a step past int64 was kept (and read as a negative step); a
// deeply nested record parsed and then recursed once per level when the server sent it. (A number past the
// double range, which nlohmann refuses, is skipped as not JSON.)
TEST(MetricsLog, SkipsStepsPastInt64DeepNestingAndHugeNumbers) {
  std::string text = "{\"step\": 9223372036854775808}\n{\"step\": 18446744073709551615}\n{\"step\": 1, \"x\": " +
                     std::string(100000, '[') + std::string(100000, ']') + "}\n{\"step\": 9223372036854775807}\n" +
                     "{\"step\": 2, \"loss\": 1e400}\n";
  MetricsLog log = parse_metrics(text, 0, "metrics.jsonl");
  ASSERT_EQ(log.records.size(), 1u);
  EXPECT_EQ(log.records[0]["step"].get<int64_t>(), INT64_MAX);
  EXPECT_EQ(log.skipped_lines, 4);  // the last: a number past the double range is not JSON to nlohmann
  ASSERT_EQ(log.warnings.size(), 4u);
  EXPECT_NE(log.warnings[0].find("metrics.jsonl line 1: not a record with an integer step"), std::string::npos)
      << log.warnings[0];
  EXPECT_NE(log.warnings[2].find("line 3: not JSON"), std::string::npos) << log.warnings[2];
  EXPECT_EQ(last_step_in(text), INT64_MAX);
  EXPECT_EQ(last_step_in("{\"step\": 9223372036854775808}\n"), std::nullopt);
}

TEST(MetricsLog, LastStepOfSomethingThatIsNotAFile) {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "metrics.jsonl");
  EXPECT_EQ(last_step(dir / "metrics.jsonl"), std::nullopt);
  EXPECT_TRUE(read_metrics(dir / "metrics.jsonl").records.empty());
}

TEST(MetricsLog, LastStepReadsTheTailOfALongLog) {
  test::TempDir dir;
  std::string lines;
  for (int step = 1; step <= 2000; ++step) lines += test::metrics_line(step);  // several times the tail read
  test::write_raw(dir / "metrics.jsonl", lines);
  EXPECT_EQ(last_step(dir / "metrics.jsonl"), 2000);
}

}  // namespace
}  // namespace alpha::dashboard
