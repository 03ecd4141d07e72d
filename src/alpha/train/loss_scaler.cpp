#include "alpha/train/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "alpha/core/error.h"

namespace alpha::train {

namespace {

constexpr double kMaxScale = 16777216.0;  // 2^24

}  // namespace

bool valid_loss_scale(double scale) {
  int exponent = 0;
  return std::isfinite(scale) && scale >= 1.0 && scale <= kMaxScale && std::frexp(scale, &exponent) == 0.5;
}

void LossScalerOptions::validate() const {
  if (!valid_loss_scale(initial_scale))
    raise<ConfigError>("LossScaler", "initial_scale", "a power of two in [1, 2^24]", std::to_string(initial_scale));
  if (growth_interval < 1)
    raise<ConfigError>("LossScaler", "growth_interval", "a step count >= 1", std::to_string(growth_interval));
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.initial_scale) {
  options_.validate();
}

bool LossScaler::update(bool gradients_finite) {
  if (!gradients_finite) {
    scale_ = std::max(1.0, scale_ / 2);
    finite_in_a_row_ = 0;
    return true;
  }
  if (++finite_in_a_row_ >= options_.growth_interval) {
    scale_ = std::min(kMaxScale, scale_ * 2);
    finite_in_a_row_ = 0;
  }
  return false;
}

nlohmann::json LossScaler::state() const { return {{"scale", scale_}, {"finite_in_a_row", finite_in_a_row_}}; }

void LossScaler::load_state(const nlohmann::json& state) {
  constexpr const char* op = "LossScaler::load_state";
  if (!state.is_object() || !state.contains("scale") || !state["scale"].is_number())
    raise<ValueError>(op, "scale", "a number", state.is_object() && state.contains("scale") ? state["scale"].dump() : "none");
  if (!state.contains("finite_in_a_row") || !state["finite_in_a_row"].is_number_integer())
    raise<ValueError>(op, "finite_in_a_row", "an integer",
                      state.contains("finite_in_a_row") ? state["finite_in_a_row"].dump() : "none");
  const double scale = state["scale"].get<double>();
  const int64_t finite = state["finite_in_a_row"].get<int64_t>();
  if (!valid_loss_scale(scale))
    raise<ValueError>(op, "scale", "a power of two in [1, 2^24]", std::to_string(scale));
  if (finite < 0 || finite >= options_.growth_interval)
    raise<ValueError>(op, "finite_in_a_row", "an integer in [0, growth_interval)", std::to_string(finite));
  scale_ = scale;
  finite_in_a_row_ = finite;
}

}  // namespace alpha::train
