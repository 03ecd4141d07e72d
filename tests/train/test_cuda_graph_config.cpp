// cuda_graphs on the CPU side: the config refuses what a captured step cannot replay (a CPU device, loss scaling),
// naming the field and why, and the trainer dropout; a CudaGraph of a CPU device raises DeviceError. The captured steps
// themselves are tests/cuda/test_cuda_training.cpp's.
#include <gtest/gtest.h>

#include "alpha/tensor/cuda_graph.h"
#include "alpha/train/train_config.h"
#include "support/checks.h"
#include "train/golden_run_util.h"

namespace alpha::train {
namespace {

TEST(CudaGraphConfig, RefusesWhatACapturedStepCannotReplay) {
  TrainConfig t;
  t.cuda_graphs = true;
  EXPECT_ALPHA_ERROR(t.validate(), ConfigError, "'cuda_graphs'", "on the CPU");
  t.device = "cuda:0";
  t.validate();
  EXPECT_TRUE(TrainConfig::from_json(t.to_json()).cuda_graphs);
  EXPECT_FALSE(TrainConfig::from_json(nlohmann::json::object()).cuda_graphs) << "off by default";
  TrainConfig accumulating = t;
  accumulating.grad_accum = 3;
  accumulating.validate();  // the graph holds every micro-step
  TrainConfig scaled = t;
  scaled.precision = "f16";
  EXPECT_ALPHA_ERROR(scaled.validate(), ConfigError, "'cuda_graphs'", "loss scaling");
  scaled.precision = "bf16";
  scaled.loss_scaling = "dynamic";
  EXPECT_ALPHA_ERROR(scaled.validate(), ConfigError, "'cuda_graphs'", "loss scaling");
  TrainConfig rounding = t;
  rounding.precision = "bf16";
  rounding.stochastic_rounding = true;
  rounding.validate();  // the captured AdamW reads each step's number, which draws its rounding bits
}

// What the trainer refuses beyond TrainConfig, before it touches a device (so this runs without a GPU).
TEST(CudaGraphConfig, TheTrainerRefusesDropout) {
  test::TempDir dir;
  TrainerOptions o = tiny_options(dir.path(), 2);
  o.train.device = "cuda:0";
  o.train.cuda_graphs = true;
  o.model.dropout = 0.1;
  EXPECT_ALPHA_ERROR(Trainer{o}, ConfigError, "'cuda_graphs'", "dropout");
}

TEST(CudaGraphConfig, ACpuGraphRaises) {
  EXPECT_ALPHA_ERROR(CudaGraph(Device::cpu(), [] {}), DeviceError, "CudaGraph", "device", "a CUDA device");
}

}  // namespace
}  // namespace alpha::train
