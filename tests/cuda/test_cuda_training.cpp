// Training on the GPU: the golden regression run (tiny config, 100 steps, f32) learns, stays finite and
// resumes bit for bit on cuda:0 as on the CPU; its loss at step 100 agrees with the CPU run's within 0.05
// (the bound: the two backends sum in different orders, so the runs drift apart slowly); after
// the first steps the caching allocator serves every request from its pool; bf16 mixed precision (bf16
// compute, f32 master weights and optimiser state) learns as well, and f16 with dynamic loss scaling; so
// does the model with NSA attention, whose f32 run follows the CPU's; steps replayed from a CUDA graph give the
// bits of the steps made without it. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "alpha/autograd/variable.h"
#include "alpha/train/checkpoint.h"
#include "support/checks.h"
#include "support/gpu.h"
#include "train/golden_run_util.h"

namespace alpha::train {
namespace {

class CudaTraining : public test::GpuTest<> {};

TrainerOptions on_gpu(TrainerOptions o, const char* precision = "f32") {
  o.train.device = "cuda:0";
  o.train.precision = precision;
  return o;
}

TEST_F(CudaTraining, GoldenRunLearnsResumesBitForBitAndMatchesTheCpu) {
  test::TempDir dir;
  TrainerOptions gpu = on_gpu(tiny_options(dir.path(), 100));
  expect_resume_is_bit_exact(gpu, dir);
  std::vector<nlohmann::json> m = metrics_of(dir / "straight");
  ASSERT_EQ(m.size(), 100u);
  for (const auto& r : m) {
    ASSERT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
    ASSERT_TRUE(std::isfinite(r["grad_norm"].get<double>())) << r.dump();
  }
  const double first = m.front()["loss"], last = m.back()["loss"];
  EXPECT_NEAR(first, std::log(512.0), 0.3);
  EXPECT_LT(last, first - 2.0);
  // Steady state: from step 3 on (the first steps fill the pool), no request reaches cudaMalloc.
  for (size_t i = 2; i < m.size(); ++i)
    EXPECT_EQ(m[i]["fresh_allocations"].get<int64_t>(), 0) << "step " << i + 1;
  EXPECT_GT(m.back()["peak_bytes"].get<int64_t>(), 0);

  TrainerOptions cpu = tiny_options(dir / "cpu", 100);
  cpu.data = {(dir / "straight" / "data").string()};  // the same tokens
  Trainer(cpu).run();
  std::vector<nlohmann::json> c = metrics_of(dir / "cpu");
  ASSERT_EQ(c.size(), 100u);
  EXPECT_NEAR(c.front()["loss"].get<double>(), first, 1e-4) << "step 1: same weights, same batch";
  EXPECT_NEAR(c.back()["loss"].get<double>(), last, 0.05) << "step 100, CPU against GPU";
}

// cuda_graphs: every step after a run's first replays the captured step; the losses, gradient norms, weights
// and optimiser state are the bits of the run without the graph, in f32 and bf16, with two micro-steps a step,
// through evaluations between replays and a profiled step (made without the graph) among them. The replays'
// metrics name the graph's nodes.
struct GraphCase {
  const char* precision;
  int64_t grad_accum;
  const char* recompute;
  bool stochastic_rounding = false;
};

void expect_graph_steps_give_the_bits_of_the_steps_without_it(const GraphCase& c) {
  SCOPED_TRACE(std::string(c.precision) + ", grad_accum " + std::to_string(c.grad_accum) + ", recompute " +
               c.recompute + (c.stochastic_rounding ? ", stochastic rounding" : ""));
  test::TempDir dir;
  TrainerOptions eager = on_gpu(tiny_options(dir / "eager", 12), c.precision);
  eager.train.eval_every = 5;
  eager.train.save_every = 0;
  eager.train.grad_accum = c.grad_accum;
  eager.train.recompute = c.recompute;
  eager.train.stochastic_rounding = c.stochastic_rounding;
  Trainer(eager).run();
  TrainerOptions graphed = eager;
  graphed.run_dir = dir / "graphed";
  graphed.data = {(dir / "eager" / "data").string()};
  graphed.train.cuda_graphs = true;
  graphed.profile = true;
  graphed.profile_step = 7;
  Trainer(graphed).run();
  std::vector<nlohmann::json> a = metrics_of(dir / "eager"), b = metrics_of(dir / "graphed");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_EQ(b[i]["loss"].get<double>(), a[i]["loss"].get<double>());
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i]["grad_norm"].get<double>());
    EXPECT_EQ(b[i]["val_loss"], a[i]["val_loss"]);
    EXPECT_EQ(b[i].contains("graph_nodes"), i != 0 && i != 6) << b[i].dump();
    if (b[i].contains("graph_nodes")) {
      EXPECT_GT(b[i]["graph_nodes"].get<int64_t>(), 50) << b[i].dump();
    }
  }
  EXPECT_LT(b.back()["loss"].get<double>(), b.front()["loss"].get<double>() - 0.5);
  expect_same_checkpoint(dir / "eager", dir / "graphed");
}

TEST_F(CudaTraining, CudaGraphStepsGiveTheBitsOfTheStepsWithoutIt) {
  expect_graph_steps_give_the_bits_of_the_steps_without_it({"f32", 1, "none"});
  expect_graph_steps_give_the_bits_of_the_steps_without_it({"bf16", 1, "none"});
  expect_graph_steps_give_the_bits_of_the_steps_without_it({"bf16", 2, "none"});
  // The compute copies' rounding bits drawn with each step's number, read by the captured AdamW.
  expect_graph_steps_give_the_bits_of_the_steps_without_it({"bf16", 1, "none", true});
  test::TempDir dir;
  TrainerOptions dropout = on_gpu(tiny_options(dir.path(), 2), "bf16");
  dropout.train.cuda_graphs = true;
  dropout.model.dropout = 0.1;
  EXPECT_ALPHA_ERROR(Trainer{dropout}, ConfigError, "'cuda_graphs'", "dropout");
}

// The recomputation levels re-run parts of the forward inside the backward: captured, too.
TEST_F(CudaTraining, CudaGraphStepsRecomputeAsTheStepsWithoutIt) {
  expect_graph_steps_give_the_bits_of_the_steps_without_it({"bf16", 1, "ln_gelu"});
  expect_graph_steps_give_the_bits_of_the_steps_without_it({"bf16", 1, "block"});
}

// hold_compute_copies false: the bf16 weights converted at each use give the bits of the held copies AdamW
// writes, and the run holds less memory.
TEST_F(CudaTraining, ComputeCopiesConvertedAtEachUseGiveTheBitsOfHeldOnes) {
  test::TempDir dir;
  TrainerOptions held = on_gpu(tiny_options(dir / "held", 12), "bf16");
  held.train.save_every = 0;
  Trainer(held).run();
  TrainerOptions per_use = held;
  per_use.run_dir = dir / "per_use";
  per_use.data = {(dir / "held" / "data").string()};
  per_use.train.hold_compute_copies = false;
  Trainer trainer(per_use);
  trainer.run();
  for (const auto& p : trainer.model().named_parameters()) EXPECT_FALSE(p.variable.compute_copy().defined()) << p.name;
  std::vector<nlohmann::json> a = metrics_of(dir / "held"), b = metrics_of(dir / "per_use");
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["loss"].get<double>(), a[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
  EXPECT_LT(b.back()["peak_bytes"].get<int64_t>(), a.back()["peak_bytes"].get<int64_t>());
  expect_same_checkpoint(dir / "held", dir / "per_use");
}

TEST_F(CudaTraining, Bf16MixedPrecisionLearnsWithF32MasterWeights) {
  test::TempDir dir;
  TrainerOptions f32 = on_gpu(tiny_options(dir / "f32", 100));
  Trainer(f32).run();
  TrainerOptions bf16 = on_gpu(tiny_options(dir / "bf16", 100), "bf16");
  bf16.data = {(dir / "f32" / "data").string()};
  Trainer trainer(bf16);
  trainer.run();
  for (const auto& p : trainer.model().named_parameters()) {
    EXPECT_EQ(p.variable.dtype(), DType::f32) << p.name << ": master weights stay f32";
    EXPECT_EQ(p.variable.value().device(), Device::cuda(0)) << p.name;
  }
  EXPECT_EQ(trainer.model().compute_dtype(), DType::bf16);
  std::vector<nlohmann::json> a = metrics_of(dir / "f32"), b = metrics_of(dir / "bf16");
  ASSERT_EQ(b.size(), 100u);
  for (const auto& r : b) ASSERT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
  EXPECT_LT(b.back()["loss"].get<double>(), b.front()["loss"].get<double>() - 2.0);
  // bf16 rounds every activation to 8 significant bits: the runs differ, but not by much after 100 steps.
  EXPECT_NEAR(b.back()["loss"].get<double>(), a.back()["loss"].get<double>(), 0.15);
  // Checkpoints hold the f32 master weights.
  CheckpointData ckpt = load_checkpoint(dir / "bf16");
  EXPECT_EQ(ckpt.weights.front().second.dtype(), DType::f32);
}

// bf16 with stochastic rounding of the compute copy: the run learns like the bf16 run and resumes bit for
// bit (the restored copies are the rounding of the saved master weights at the saved step); f16 runs too.
TEST_F(CudaTraining, StochasticRoundingLearnsAndResumesBitForBit) {
  test::TempDir dir;
  TrainerOptions sr = on_gpu(tiny_options(dir.path(), 60), "bf16");
  sr.train.stochastic_rounding = true;
  expect_resume_is_bit_exact(sr, dir);
  TrainerOptions nearest = on_gpu(tiny_options(dir / "nearest", 60), "bf16");
  nearest.data = {(dir / "straight" / "data").string()};
  Trainer(nearest).run();
  std::vector<nlohmann::json> s = metrics_of(dir / "straight"), n = metrics_of(dir / "nearest");
  ASSERT_EQ(s.size(), 60u);
  for (const auto& r : s) ASSERT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
  EXPECT_LT(s.back()["loss"].get<double>(), s.front()["loss"].get<double>() - 1.5);
  EXPECT_NEAR(s.back()["loss"].get<double>(), n.back()["loss"].get<double>(), 0.15);
  EXPECT_NE(s.back()["loss"].get<double>(), n.back()["loss"].get<double>()) << "the rounding must change the run";
  TrainerOptions f16 = on_gpu(tiny_options(dir / "f16", 20), "f16");
  f16.train.stochastic_rounding = true;
  f16.data = nearest.data;
  Trainer(f16).run();
  for (const auto& r : metrics_of(dir / "f16")) ASSERT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
}

// A parameter's held compute copy (autograd::cast's bf16 weights) must sit on the parameter's device.
TEST_F(CudaTraining, AHeldComputeCopyMustSitOnItsParametersDevice) {
  autograd::Variable w(Tensor::zeros({4, 3}, DType::f32, Device::cuda(0)), true, "w");
  EXPECT_ALPHA_ERROR(w.keep_compute_copy(Tensor::zeros({4, 3}, DType::bf16, Device::cpu())), DeviceError,
                     "[Variable::keep_compute_copy]", "copy");
  w.keep_compute_copy(Tensor::zeros({4, 3}, DType::bf16, Device::cuda(0)));
  EXPECT_TRUE(w.compute_copy().defined());
}

// f16 compute with dynamic loss scaling (f32 master weights): the run learns, stays close to the f32 run on
// the same data, logs its scale, and overflows (if any) are skipped steps the scaler answers, not failures.
TEST_F(CudaTraining, F16MixedPrecisionWithDynamicLossScalingLearns) {
  test::TempDir dir;
  Trainer(on_gpu(tiny_options(dir / "f32", 100))).run();
  TrainerOptions f16 = on_gpu(tiny_options(dir / "f16", 100), "f16");
  f16.data = {(dir / "f32" / "data").string()};
  Trainer trainer(f16);
  trainer.run();
  EXPECT_EQ(trainer.model().compute_dtype(), DType::f16);
  std::vector<nlohmann::json> a = metrics_of(dir / "f32"), b = metrics_of(dir / "f16");
  ASSERT_EQ(b.size(), 100u);
  int64_t skipped = 0;
  for (const auto& r : b) {
    ASSERT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
    ASSERT_TRUE(r.contains("loss_scale")) << r.dump();
    skipped += r["skipped"].get<bool>();
  }
  EXPECT_LT(skipped, 10) << "overflows halve the scale: a few skipped steps at most";
  EXPECT_LT(b.back()["loss"].get<double>(), b.front()["loss"].get<double>() - 2.0);
  EXPECT_NEAR(b.back()["loss"].get<double>(), a.back()["loss"].get<double>(), 0.15);
  std::printf("f16: %lld skipped steps, final scale %g, final loss %.4f (f32 %.4f)\n", static_cast<long long>(skipped),
              b.back()["loss_scale"].get<double>(), b.back()["loss"].get<double>(), a.back()["loss"].get<double>());
}

// The tiny config with NSA attention (blocks small enough that at T 64 every branch and the top-n choice act)
// learns on the GPU in f32, follows the CPU run of the same data, and learns in bf16.
TEST_F(CudaTraining, NsaModelLearnsAndFollowsTheCpu) {
  test::TempDir dir;
  auto nsa_options = [&](const char* name) {
    TrainerOptions o = tiny_options(dir / name, 100);
    o.model.attention = "nsa";
    o.model.nsa_block = 8;
    o.model.nsa_stride = 4;
    o.model.nsa_select_block = 8;
    o.model.nsa_select_count = 4;
    o.model.nsa_window = 16;
    return o;
  };
  Trainer(on_gpu(nsa_options("f32"))).run();
  TrainerOptions cpu = nsa_options("cpu"), bf16 = on_gpu(nsa_options("bf16"), "bf16");
  cpu.data = bf16.data = {(dir / "f32" / "data").string()};  // the same tokens
  Trainer(cpu).run();
  Trainer(bf16).run();
  std::vector<nlohmann::json> g = metrics_of(dir / "f32"), c = metrics_of(dir / "cpu"), b = metrics_of(dir / "bf16");
  ASSERT_EQ(g.size(), 100u);
  ASSERT_EQ(b.size(), 100u);
  for (const auto& r : g) ASSERT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
  for (const auto& r : b) ASSERT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
  const double first = g.front()["loss"], last = g.back()["loss"];
  EXPECT_NEAR(first, std::log(512.0), 0.3);
  EXPECT_LT(last, first - 1.5);
  EXPECT_NEAR(c.front()["loss"].get<double>(), first, 1e-4) << "step 1: same weights, same batch";
  EXPECT_NEAR(c.back()["loss"].get<double>(), last, 0.05) << "step 100, CPU against GPU";
  EXPECT_LT(b.back()["loss"].get<double>(), b.front()["loss"].get<double>() - 1.5);
  EXPECT_NEAR(b.back()["loss"].get<double>(), last, 0.15);
}

}  // namespace
}  // namespace alpha::train
