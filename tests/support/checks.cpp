#include "support/checks.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <sstream>

#include "alpha/autograd/functions.h"

namespace alpha::test {

uint64_t fresh_seed() {
  static std::atomic<uint64_t> counter{0x5eed0000};
  return counter.fetch_add(7919);
}

Tensor random(Shape shape, DType dtype, double lo, double hi) {
  return Tensor::uniform(std::move(shape), lo, hi, fresh_seed(), dtype);
}

Tensor poisoned(Shape shape, DType dtype) {
  return Tensor::full(std::move(shape), std::numeric_limits<double>::quiet_NaN(), dtype);
}

::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, std::string_view check) {
  return all_close(got, want, tolerance(check, got.dtype()));
}

::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " != " << shape_str(want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double max_abs = 0, max_rel = 0;
  int64_t worst = -1, failures = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isnan(g[i])) ok = std::isnan(w[i]) && std::isnan(g[i]);
    else if (std::isinf(w[i]) || std::isinf(g[i])) ok = g[i] == w[i];
    else {
      double err = std::fabs(g[i] - w[i]);
      max_abs = std::max(max_abs, err);
      if (w[i] != 0) max_rel = std::max(max_rel, err / std::fabs(w[i]));
      double excess = err - (tol.abs + tol.rel * std::fabs(w[i]));
      ok = excess <= 0;
      if (!ok && excess > worst_excess) worst_excess = excess, worst = int64_t(i);
    }
    if (!ok) {
      ++failures;
      if (worst < 0) worst = int64_t(i);
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << g.size() << " elements out of tolerance (abs "
                                       << tol.abs << ", rel " << tol.rel << "); worst at flat index " << worst
                                       << ": got " << g[size_t(worst)] << ", want " << w[size_t(worst)]
                                       << "; max_abs " << max_abs << ", max_rel " << max_rel;
}

::testing::AssertionResult gradcheck(const std::function<autograd::Variable(const std::vector<autograd::Variable>&)>& f,
                                     const std::vector<Tensor>& inputs, double h) {
  using autograd::Variable;
  Tolerance tol = tolerance("gradcheck", DType::f64);
  std::vector<Variable> vars;
  for (const auto& t : inputs) {
    if (t.dtype() != DType::f64) return ::testing::AssertionFailure() << "gradcheck needs f64 inputs";
    vars.emplace_back(t.clone(), true);
  }
  Variable out = f(vars);
  Tensor weights = Tensor::uniform(out.shape(), -1.0, 1.0, fresh_seed(), DType::f64);
  autograd::backward(out, weights);

  auto loss_at = [&](const std::vector<Tensor>& values) {
    autograd::NoGradGuard no_grad;
    std::vector<Variable> vs;
    for (const auto& t : values) vs.emplace_back(t);
    Tensor o = f(vs).value().contiguous();
    std::vector<double> ov = o.to_vector<double>(), wv = weights.to_vector<double>();
    double s = 0;
    for (size_t i = 0; i < ov.size(); ++i) s += ov[i] * wv[i];
    return s;
  };

  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor analytic = vars[k].grad();
    if (!analytic.defined()) analytic = Tensor::zeros(inputs[k].shape(), DType::f64);
    std::vector<double> a = analytic.contiguous().to_vector<double>();
    std::vector<Tensor> values;
    for (const auto& t : inputs) values.push_back(t.clone());
    double* p = values[k].data<double>();
    for (int64_t i = 0; i < values[k].numel(); ++i) {
      double saved = p[i];
      p[i] = saved + h;
      double up = loss_at(values);
      p[i] = saved - h;
      double down = loss_at(values);
      p[i] = saved;
      double numeric = (up - down) / (2 * h);
      if (std::fabs(a[size_t(i)] - numeric) > tol.abs + tol.rel * std::fabs(numeric))
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": analytic " << a[size_t(i)]
                                             << ", finite difference " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

std::string tensor_bytes(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

::testing::AssertionResult bit_equal(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.describe() << " != " << want.describe();
  std::string g = tensor_bytes(got), w = tensor_bytes(want);
  auto [gi, wi] = std::mismatch(g.begin(), g.end(), w.begin());
  if (gi != g.end())
    return ::testing::AssertionFailure() << got.describe() << " differs at byte " << (gi - g.begin()) << " (element "
                                         << (gi - g.begin()) / int64_t(dtype_size(got.dtype())) << ")";
  return ::testing::AssertionSuccess();
}

}  // namespace alpha::test
