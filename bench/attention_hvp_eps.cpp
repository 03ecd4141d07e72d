// The error of the central-difference attention HVP (ops::attention_hvp) against eps, relative to the exact
// HVP (ops::attention_hvp_exact), in f64 and f32: the table of docs/ATTENTION_DERIVATIVES.md. One shape
// (B 1, H 2, T 64, D 32, causal, by default), inputs, cotangent and direction uniform in [-1, 1) from a fixed
// seed; the f32 column rounds them to f32 and compares with the exact HVP at those rounded values. The error
// is max|H·v_fd − H·v| / max|H·v| over hq, hk and hv together. Prints a Markdown table. CPU only; asserts
// nothing (the tests hold the op to its tolerance).
//
// Usage: alpha_attention_hvp_eps [--seq 64] [--heads 2] [--head-dim 32] [--softcap 0] [--no-causal] [--seed 1]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "alpha/ops/attention_hvp.h"

namespace {

using alpha::DType;
using alpha::Tensor;

std::vector<double> flat(const alpha::ops::AttentionHvp& h) {
  std::vector<double> all;
  for (const Tensor& t : {h.hq, h.hk, h.hv})
    for (double value : t.to_vector<double>()) all.push_back(value);
  return all;
}

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double error = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    error = std::max(error, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return error / scale;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Central-difference attention HVP error against eps, f64 and f32"};
  int64_t seq = 64, heads = 2, head_dim = 32;
  double softcap = 0;
  bool no_causal = false;
  uint64_t seed = 1;
  app.add_option("--seq", seq);
  app.add_option("--heads", heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--softcap", softcap);
  app.add_flag("--no-causal", no_causal);
  app.add_option("--seed", seed);
  CLI11_PARSE(app, argc, argv);

  alpha::ops::AttentionConfig config;
  config.causal = !no_causal;
  config.softcap = softcap;
  const alpha::Shape shape = {1, seq, heads, head_dim};
  // q, k, v, grad_out, vq, vk, vv from consecutive seeds, rounded to f32 so both columns see the same point.
  std::vector<Tensor> f32;
  for (uint64_t i = 0; i < 7; ++i) f32.push_back(Tensor::uniform(shape, -1.0, 1.0, seed + i, DType::f32));
  std::vector<Tensor> f64;
  for (const Tensor& t : f32) f64.push_back(t.to(DType::f64));
  auto hvp = [&](const std::vector<Tensor>& x, double eps) {
    return flat(alpha::ops::attention_hvp(x[0], x[1], x[2], x[3], x[4], x[5], x[6], config, eps));
  };
  const std::vector<double> exact =
      flat(alpha::ops::attention_hvp_exact(f64[0], f64[1], f64[2], f64[3], f64[4], f64[5], f64[6], config));

  std::printf("| eps | f64 | f32 |\n|---|---|---|\n");
  for (double eps : {1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7})
    std::printf("| %.0e | %.1e | %.1e |\n", eps, relative_error(hvp(f64, eps), exact),
                relative_error(hvp(f32, eps), exact));
  return 0;
}
