// The dynamic loss scaler's policy (halve and skip on overflow, never below 1; double after growth_interval
// finite steps, never above 2^24), its checkpoint state and its typed errors; in the trainer (f32 on the CPU:
// the path f16 takes on a GPU), a scaled run equal bit for bit to the unscaled one, resuming its scale; the
// config's checks. Overflow handling in a run: tests/train/test_fault_injection.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "alpha/train/loss_scaler.h"
#include "support/checks.h"
#include "train/golden_run_util.h"

namespace alpha::train {
namespace {

TEST(LossScaler, OverflowHalvesTheScaleAndSkipsDownToAFloorOfOne) {
  LossScaler scaler({.initial_scale = 8.0, .growth_interval = 3});
  EXPECT_EQ(scaler.scale(), 8.0);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 4.0);
  EXPECT_FALSE(scaler.at_floor());
  EXPECT_TRUE(scaler.update(false));
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_TRUE(scaler.at_floor());
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1.0) << "the floor";
}

TEST(LossScaler, FiniteStepsInARowDoubleTheScaleAndAnOverflowRestartsTheCount) {
  LossScaler scaler({.initial_scale = 4.0, .growth_interval = 3});
  EXPECT_FALSE(scaler.update(true));
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 4.0);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 8.0) << "after 3 finite steps";
  EXPECT_EQ(scaler.finite_in_a_row(), 0);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_FALSE(scaler.update(true));
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 4.0);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 4.0) << "the count restarted at the overflow";

  LossScaler top({.initial_scale = 16777216.0, .growth_interval = 1});
  EXPECT_FALSE(top.update(true));
  EXPECT_EQ(top.scale(), 16777216.0) << "capped at 2^24";
}

TEST(LossScaler, StateRoundTripsAndBadStatesRaiseNamingTheField) {
  LossScaler scaler({.initial_scale = 1024.0, .growth_interval = 5});
  scaler.update(false);
  scaler.update(true);
  scaler.update(true);
  LossScaler resumed({.initial_scale = 1024.0, .growth_interval = 5});
  resumed.load_state(scaler.state());
  EXPECT_EQ(resumed.scale(), 512.0);
  EXPECT_EQ(resumed.finite_in_a_row(), 2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed.update(true), scaler.update(true));
    EXPECT_EQ(resumed.scale(), scaler.scale());
  }

  EXPECT_ALPHA_ERROR(resumed.load_state({{"finite_in_a_row", 0}}), ValueError, "scale", "none");
  EXPECT_ALPHA_ERROR(resumed.load_state({{"scale", 3.0}, {"finite_in_a_row", 0}}), ValueError, "scale", "power of two");
  EXPECT_ALPHA_ERROR(resumed.load_state({{"scale", 0.5}, {"finite_in_a_row", 0}}), ValueError, "scale");
  EXPECT_ALPHA_ERROR(resumed.load_state({{"scale", 8.0}}), ValueError, "finite_in_a_row", "none");
  EXPECT_ALPHA_ERROR(resumed.load_state({{"scale", 8.0}, {"finite_in_a_row", 5}}), ValueError, "finite_in_a_row");
  EXPECT_EQ(resumed.scale(), scaler.scale()) << "a failed load changes nothing";
}

TEST(LossScaler, OptionsAreValidated) {
  EXPECT_ALPHA_ERROR(LossScaler({.initial_scale = 1000.0}), ConfigError, "initial_scale", "power of two");
  EXPECT_ALPHA_ERROR(LossScaler({.initial_scale = 0.25}), ConfigError, "initial_scale");
  EXPECT_ALPHA_ERROR(LossScaler({.initial_scale = 33554432.0}), ConfigError, "initial_scale", "2^24");
  EXPECT_ALPHA_ERROR(LossScaler({.growth_interval = 0}), ConfigError, "growth_interval", ">= 1");
}

// Without an overflow a power-of-two scale changes no bit: the same losses, norms, clip coefficients, weights
// and optimizer state as the unscaled run (clipping included: the gradients are multiplied by coefficient / S
// in one pass), while the scale doubles every 4 finite steps; a run resumed halfway continues the scale.
TEST(LossScalerTraining, ScaledRunEqualsTheUnscaledOneBitForBitAndResumesItsScale) {
  test::TempDir dir;
  TrainerOptions plain = tiny_options(dir / "plain", 12);
  Trainer(plain).run();
  TrainerOptions scaled = tiny_options(dir / "straight", 12);
  scaled.train.loss_scaling = "dynamic";
  scaled.train.loss_scale = 1024;
  scaled.train.loss_scale_growth_interval = 4;
  expect_resume_is_bit_exact(scaled, dir);  // runs "straight" and "split" (6 steps, resume, 6 steps): both
                                            // tokenise the built-in corpus as "plain" did, to the same tokens

  std::vector<nlohmann::json> a = metrics_of(dir / "plain"), b = metrics_of(dir / "straight"),
                              c = metrics_of(dir / "split");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  bool clipped = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["loss"].get<double>(), a[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i]["grad_norm"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(b[i]["clip_coef"].get<double>(), a[i]["clip_coef"].get<double>()) << "step " << i + 1;
    clipped |= a[i]["clip_coef"].get<double>() < 1.0;
    EXPECT_FALSE(a[i].contains("loss_scale")) << "no scaler, no field";
    EXPECT_EQ(b[i]["loss_scale"].get<double>(), 1024.0 * std::ldexp(1.0, int(i / 4))) << "step " << i + 1;
    EXPECT_EQ(c[i]["loss_scale"], b[i]["loss_scale"]) << "step " << i + 1 << " of the resumed run";
  }
  EXPECT_TRUE(clipped) << "some step must clip, or the unscale-and-clip pass is not exercised";
  expect_same_checkpoint(dir / "plain", dir / "straight");
}

TEST(LossScalerTraining, ConfigIsValidated) {
  auto with = [](auto change) {
    TrainConfig t;
    change(t);
    return t;
  };
  EXPECT_ALPHA_ERROR(with([](TrainConfig& t) { t.loss_scaling = "sometimes"; }).validate(), ConfigError,
                     "loss_scaling", "\"auto\", \"dynamic\" or \"off\"");
  EXPECT_ALPHA_ERROR(with([](TrainConfig& t) { t.loss_scale = 1000; }).validate(), ConfigError, "loss_scale",
                     "power of two");
  EXPECT_ALPHA_ERROR(with([](TrainConfig& t) { t.loss_scale_growth_interval = 0; }).validate(), ConfigError,
                     "loss_scale_growth_interval");
  EXPECT_ALPHA_ERROR(with([](TrainConfig& t) { t.precision = "f16"; }).validate(), ConfigError, "precision",
                     "f16 compute need a CUDA device");
  TrainConfig f16;
  f16.precision = "f16";
  EXPECT_TRUE(f16.scales_loss()) << "auto: dynamic for f16";
  f16.loss_scaling = "off";
  EXPECT_FALSE(f16.scales_loss());
  EXPECT_FALSE(TrainConfig{}.scales_loss()) << "auto: off for f32";
  EXPECT_EQ(TrainConfig::from_json(with([](TrainConfig& t) { t.loss_scale = 256; }).to_json()).loss_scale, 256.0);
}

}  // namespace
}  // namespace alpha::train
