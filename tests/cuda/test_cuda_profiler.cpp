// `alpha train --profile` on a GPU: the CUPTI trace of the profiled step holds the kernels of the step's ops and
// the tensor layer's copies, each tagged with the launch that queued it (cuBLASLt's GEMMs with the linear op
// that called cuBLASLt, which launches through the driver API), and no GPU work is left untagged. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "support/gpu.h"
#include "train/golden_run_util.h"

namespace alpha::train {
namespace {

class CudaProfiler : public test::GpuTest<> {};

TEST_F(CudaProfiler, TraceTagsEveryKernelWithTheOpThatQueuedIt) {
  test::TempDir dir;
  TrainerOptions options = tiny_options(dir.path(), 3);
  options.train.device = "cuda:0";
  options.train.precision = "bf16";
  options.profile = true;
  Trainer(options).run();
  std::vector<nlohmann::json> m = metrics_of(dir.path());
  ASSERT_EQ(m.size(), 3u);
  EXPECT_TRUE(m[2].contains("profiled"));

  nlohmann::json report = nlohmann::json::parse(test::read_raw(dir / "profile.json"));
  EXPECT_EQ(report["step"], 3);
  EXPECT_EQ(report["device"], "cuda:0");
  ASSERT_TRUE(report.contains("kernels")) << report.dump(1);
  // The step's host work (the losses and norm read back, on the CPU) is in the ops, timed by the host clock; the
  // trace, the timeline and the GPU's active time hold the device's work only.
  int64_t calls = 0, traced = 0;
  double host_op_s = 0;
  std::map<std::string, double> op_time;
  for (const auto& op : report["ops"]) {
    if (op["layer"] == "op") calls += op["calls"].get<int64_t>();
    if (op["device"] == "cpu")
      host_op_s += op["time_s"].get<double>();
    else
      traced += op["kernels"].get<int64_t>();
    op_time[op["op"].get<std::string>()] += op["time_s"].get<double>();
  }
  EXPECT_EQ(calls, m[2]["ops"].get<int64_t>()) << "every op launch the metrics count, once";
  EXPECT_EQ(traced, report["traced"].get<int64_t>()) << "each traced activity in one op";
  EXPECT_GT(op_time["HostCopy"], 0.0) << "the read of the losses and the norm: " << report["ops"].dump(1);
  EXPECT_GE(traced, calls / 2) << "most launches reach the GPU: " << report["ops"].dump(1);
  double kernel_sum = 0, busy = report["busy_s"];
  bool linear_kernel = false, flash_kernel = false;
  for (const auto& k : report["kernels"]) {
    const double t = k["time_s"];
    EXPECT_GT(t, 0.0) << k.dump();
    EXPECT_NEAR(k["mean_us"].get<double>(), t * 1e6 / k["calls"].get<double>(), 1e-6) << k.dump();
    kernel_sum += t;
    linear_kernel |= k["op"] == "linear";
    flash_kernel |= k["op"].get<std::string>().rfind("flash_attention", 0) == 0;
  }
  EXPECT_TRUE(linear_kernel) << "cuBLASLt's kernels carry the linear op's tag: " << report["kernels"].dump(1);
  EXPECT_TRUE(flash_kernel) << "the flash attention ops' kernels: " << report["kernels"].dump(1);
  EXPECT_NEAR(kernel_sum + host_op_s, busy, 1e-9 * double(traced) + 1e-12);
  EXPECT_LE(busy, report["wall_s"].get<double>());
  EXPECT_GT(report["host_s"].get<double>(), 0.0);
  EXPECT_LE(report["host_s"].get<double>(), report["wall_s"].get<double>()) << "host times counted once";
  EXPECT_EQ(op_time.count("(outside launches)"), 0u) << "GPU work no launch queued: " << report["ops"].dump(1);
  EXPECT_GT(op_time["Tensor::copy_from"], 0.0) << "the casts of the f32 weights to bf16: " << report["ops"].dump(1);
  // One stream, no collectives: the active time is the summed time (nothing ran concurrently) within the span.
  EXPECT_NEAR(report["active_s"].get<double>(), busy - host_op_s, 1e-6 * busy);
  EXPECT_LE(report["active_s"].get<double>(), report["span_s"].get<double>());
  EXPECT_EQ(report["collectives_s"].get<double>(), 0.0);
  ASSERT_EQ(report["timeline"].size(), size_t(traced));
  double previous_start = 0;
  for (const auto& a : report["timeline"]) {
    EXPECT_GE(a["start_us"].get<double>(), previous_start) << a.dump();
    EXPECT_GE(a["end_us"].get<double>(), a["start_us"].get<double>()) << a.dump();
    previous_start = a["start_us"];
  }
}

}  // namespace
}  // namespace alpha::train
