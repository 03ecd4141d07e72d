// `alpha train --profile` (train/profiler.h): the profiled step's report accounts for every kernel launch the
// metrics count for that step, names the ops, keeps nested launches' time out of their parent's, and a step
// the run does not make is refused. The GPU's trace (CUPTI) is tested in tests/cuda/test_cuda_profiler.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "alpha/core/error.h"
#include "alpha/train/profiler.h"
#include "core/file_test_util.h"
#include "train/golden_run_util.h"

namespace alpha::train {
namespace {

nlohmann::json read_json(const std::filesystem::path& path) { return nlohmann::json::parse(test::read_raw(path)); }

// Intervals in ns: a kernel [0, 100), a collective [50, 300) beside kernels [60, 80) and [200, 250), a gap,
// then a kernel [400, 500). Active: [0, 300) and [400, 500) = 400 ns; the collective's 250 ns had nothing
// beside it in [100, 200) and [250, 300) = 150 ns.
TEST(Profiler, GpuOccupancyCountsConcurrentWorkOnceAndTheCollectivesExposedPart) {
  GpuOccupancy o =
      gpu_occupancy({{0, 100, false}, {50, 300, true}, {60, 80, false}, {200, 250, false}, {400, 500, false}});
  EXPECT_NEAR(o.span_s, 500e-9, 1e-15);
  EXPECT_NEAR(o.active_s, 400e-9, 1e-15);
  EXPECT_NEAR(o.selected_s, 250e-9, 1e-15);
  EXPECT_NEAR(o.selected_exposed_s, 150e-9, 1e-15);
  // Touching intervals leave no gap; two collectives at once count once.
  o = gpu_occupancy({{0, 10, true}, {10, 20, false}, {5, 10, true}});
  EXPECT_NEAR(o.active_s, 20e-9, 1e-15);
  EXPECT_NEAR(o.selected_s, 10e-9, 1e-15);
  EXPECT_NEAR(o.selected_exposed_s, 10e-9, 1e-15);
  EXPECT_EQ(gpu_occupancy({}).span_s, 0.0);
}

TEST(Profiler, CpuStepReportsEveryLaunchOfTheStepByOp) {
  test::TempDir dir;
  TrainerOptions options = tiny_options(dir.path(), 4);
  options.profile = true;  // the run's third step
  Trainer(options).run();
  std::vector<nlohmann::json> m = metrics_of(dir.path());
  ASSERT_EQ(m.size(), 4u);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i].contains("profiled"), i == 2) << "step " << i + 1;

  nlohmann::json report = read_json(dir / "profile.json");
  EXPECT_EQ(report["step"], 3);
  EXPECT_EQ(report["device"], "cpu");
  EXPECT_FALSE(report.contains("kernels"));  // the CPU has no trace below the ops
  int64_t calls = 0;
  double summed = 0, previous = 1e300;
  std::set<std::string> names;
  for (const auto& op : report["ops"]) {
    EXPECT_EQ(op["layer"], op["op"].get<std::string>().starts_with("Tensor::") ? "tensor" : "op") << op.dump();
    if (op["layer"] == "op") calls += op["calls"].get<int64_t>();
    EXPECT_EQ(op["kernels"], op["calls"]) << op.dump();
    EXPECT_EQ(op["host_s"], op["time_s"]) << "on the CPU the op's time is the host's: " << op.dump();
    const double t = op["time_s"];
    EXPECT_GE(t, 0.0) << op.dump();
    EXPECT_LE(t, previous) << "ops listed by time, largest first";
    previous = t;
    summed += t;
    names.insert(op["op"].get<std::string>());
  }
  EXPECT_EQ(calls, m[2]["ops"].get<int64_t>()) << "every op launch the metrics count, once";
  EXPECT_EQ(report["launches"], calls);
  EXPECT_TRUE(names.count("linear") && names.count("linear_cross_entropy") && names.count("Tensor::copy_from"))
      << report["ops"].dump();
  EXPECT_DOUBLE_EQ(report["busy_s"].get<double>(), summed);
  EXPECT_DOUBLE_EQ(report["host_s"].get<double>(), summed);
  EXPECT_GT(summed, 0.0);
  EXPECT_LE(summed, report["wall_s"].get<double>()) << "exclusive times: no launch counted twice";
}

TEST(Profiler, NestedLaunchesKeepTheirTimeOutOfTheOuterOne) {
  using namespace std::chrono_literals;
  StepProfiler profiler(Device::cpu());
  {
    LaunchScope outer("outer", Device::cpu());
    std::this_thread::sleep_for(20ms);
    LaunchScope inner("inner", Device::cpu(), LaunchLayer::tensor);
    std::this_thread::sleep_for(20ms);
  }
  nlohmann::json report = profiler.finish({7, 0, 0, 0});
  ASSERT_EQ(report["ops"].size(), 2u);
  EXPECT_EQ(report["launches"], 1) << "only op launches count";
  double outer = 0, inner = 0;
  for (const auto& op : report["ops"]) (op["op"] == "outer" ? outer : inner) = op["time_s"];
  EXPECT_GE(outer, 0.019);
  EXPECT_GE(inner, 0.019);
  EXPECT_LE(outer + inner, report["wall_s"].get<double>()) << "the inner launch's time counted in the outer's too";
  EXPECT_THROW(profiler.finish({7, 0, 0, 0}), ValueError);
}

TEST(Profiler, ObserverIsRemovedAfterTheProfile) {
  {
    StepProfiler profiler(Device::cpu());
    LaunchScope seen("seen", Device::cpu());
  }
  StepProfiler outer(Device::cpu());
  {
    StepProfiler inner(Device::cpu());
  }  // restores `outer` as the observer
  { LaunchScope seen("after", Device::cpu()); }
  nlohmann::json report = outer.finish({1, 0, 0, 0});
  ASSERT_EQ(report["ops"].size(), 1u);
  EXPECT_EQ(report["ops"][0]["op"], "after");
}

TEST(Profiler, StepTheRunDoesNotMakeRaisesNamingTheFlag) {
  test::TempDir dir;
  TrainerOptions options = tiny_options(dir.path(), 2);
  options.profile = true;
  options.profile_step = 3;
  try {
    Trainer(options).run();
    FAIL() << "profile_step 3 of a 2-step run was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("--profile-step"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1 to 2"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "profile.json"));
}

TEST(Profiler, ShortRunProfilesItsLastStepAndTheTableNamesTheOps) {
  test::TempDir dir;
  TrainerOptions options = tiny_options(dir.path(), 2);
  options.profile = true;
  Trainer(options).run();
  nlohmann::json report = read_json(dir / "profile.json");
  EXPECT_EQ(report["step"], 2);
  std::string table = profile_table(report, 3);
  EXPECT_NE(table.find("profile of step 2 on cpu"), std::string::npos) << table;
  EXPECT_NE(table.find(report["ops"][0]["op"].get<std::string>()), std::string::npos) << table;
  EXPECT_NE(table.find("more in profile.json"), std::string::npos) << table;
}

}  // namespace
}  // namespace alpha::train
