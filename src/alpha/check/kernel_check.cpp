// The harness's context (inputs, poisoned outputs, comparisons), the registry of checks and the report
// format.
#include "alpha/check/kernel_check.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "alpha/check/families.h"
#include "alpha/core/error.h"
#include "alpha/core/philox.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha::check {

namespace {

// |got − want| of one element: an infinite or NaN reference must be matched exactly (0 if it is, inf if
// not), and NaN or inf against a finite reference is infinitely off (a poisoned element left unwritten).
double element_error(double got, double want) {
  if (!std::isfinite(want)) return got == want || (std::isnan(got) && std::isnan(want)) ? 0.0 : INFINITY;
  return std::isfinite(got) ? std::fabs(got - want) : INFINITY;
}

// A tensor's values as a contiguous f64 tensor on the CPU.
Tensor host_f64(const Tensor& t) { return t.to(Device::cpu()).to(DType::f64).contiguous(); }

}  // namespace

Context::Context(Device gpu, uint64_t seed, std::function<void(const Comparison&)> report, Scale scale, Shard shard)
    : gpu_(gpu), cases_(scale, shard), seed_(seed), report_(std::move(report)) {
#if ALPHA_WITH_CUDA
  stream_ = cuda::default_stream(gpu.index);
  cuda::set_device(gpu.index);
#endif
}

Scale parse_scale(std::string_view text, std::string_view where) {
  if (text == "full") return Scale::full;
  if (text == "small") return Scale::small;
  raise<ValueError>("check kernels", where, "\"full\" or \"small\"", quoted(text));
}

Shard parse_shard(std::string_view text, std::string_view where) {
  auto whole_number = [](std::string_view digits, int64_t& value) {
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return !digits.empty() && error == std::errc() && end == digits.data() + digits.size();
  };
  Shard shard;
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos || !whole_number(text.substr(0, slash), shard.index) ||
      !whole_number(text.substr(slash + 1), shard.count) || !shard.valid())
    raise<ValueError>("check kernels", where, "\"i/n\" with 0 <= i < n", quoted(text));
  return shard;
}

CaseFilter::CaseFilter(Scale scale, Shard shard) : scale_(scale), shard_(shard) {
  if (!shard.valid())
    raise<ValueError>("check kernels", "shard", "0 <= index < count",
                      std::to_string(shard.index) + "/" + std::to_string(shard.count));
}

bool CaseFilter::includes(int64_t size) {
  return fits_scale(size) && cases_kept_++ % shard_.count == shard_.index;
}

std::vector<int64_t> Context::element_counts() const {
  std::vector<int64_t> counts;
  for (const auto* list : {&kSizes, &kOddSizes})
    for (int64_t n : *list)
      if (cases_.fits_scale(n)) counts.push_back(n);
  return counts;
}

uint64_t Context::next_seed() {
  const uint64_t draw = draws_++;
  return (uint64_t(philox_bits(seed_, 2 * draw)) << 32) | philox_bits(seed_, 2 * draw + 1);
}

Tensor Context::random(Shape shape, DType dtype, double lo, double hi) {
  return Tensor::uniform(std::move(shape), lo, hi, next_seed(), DType::f64).to(dtype).to(DType::f64);
}

Tensor Context::random_ids(Shape shape, int64_t vocab) {
  Tensor ids = Tensor::empty(shape, DType::i32);
  uint64_t seed = next_seed();
  int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    p[i] = int32_t(std::min<double>(double(vocab - 1), std::floor(philox_uniform53(seed, uint64_t(i)) * double(vocab))));
  return ids;
}

Tensor Context::to_gpu(const Tensor& host, DType dtype) { return host.to(dtype).to(gpu_); }

Tensor Context::to_gpu_at(const Tensor& host, DType dtype, int64_t offset) {
  const int64_t n = host.numel();
  Tensor view = poisoned({n + offset}, dtype).slice(0, offset, offset + n);
  view.copy_from(host.to(dtype).reshape({n}));
  return view.view(host.shape());
}

Tensor Context::poisoned(Shape shape, DType dtype) {
  Tensor host = Tensor::empty(std::move(shape), dtype);
  std::memset(host.raw_data(), 0xff, host.nbytes());
  return host.to(gpu_);
}

bool Context::compare(std::string kernel, const Tensor& got, const Tensor& want, std::string_view row) {
  return compare(std::move(kernel), got, want, tolerance(row, got.dtype()));
}

bool Context::compare(std::string kernel, const Tensor& got, const Tensor& want, Tolerance tol) {
  Comparison c = labelled(std::move(kernel), got);
  c.tol = tol;
  if (got.shape() != want.shape()) {
    c.detail = "shape " + shape_str(got.shape()) + " against the reference's " + shape_str(want.shape());
    report(std::move(c));
    return false;
  }
  Tensor g = host_f64(got), w = host_f64(want);
  const double* gp = g.data<double>();
  const double* wp = w.data<double>();
  // Below this magnitude the absolute bound dominates, so relative errors are measured against it.
  const double floor = tol.rel > 0 ? tol.abs / tol.rel : 0.0;
  double sum_abs = 0.0, worst_excess = -1.0;
  int64_t worst = -1, bad = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double bound = tol.abs + tol.rel * std::fabs(wp[i]);
    const double e = element_error(gp[i], wp[i]);
    const bool ok = std::isfinite(wp[i]) ? e <= bound : e == 0;  // a NaN reference's bound is NaN
    sum_abs += e;
    c.max_abs = std::max(c.max_abs, e);
    const double denom = std::max(std::fabs(wp[i]), floor);
    c.max_rel = std::max(c.max_rel, denom > 0 ? e / denom : (e > 0 ? INFINITY : 0.0));
    const double excess = ok ? e - bound : INFINITY;
    if (!ok) ++bad;
    if (worst < 0 || excess > worst_excess) worst_excess = excess, worst = i;
  }
  c.mean_abs = g.numel() > 0 ? sum_abs / double(g.numel()) : 0.0;
  c.passed = bad == 0;
  if (worst >= 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s element %lld: got %.9g, want %.9g", c.passed ? "closest to the bound:" : "worst",
                  static_cast<long long>(worst), gp[worst], wp[worst]);
    c.detail = buf;
    if (!c.passed) c.detail += " (" + std::to_string(bad) + " elements out of tolerance)";
  }
  const bool passed = c.passed;
  report(std::move(c));
  return passed;
}

void judge_against_naive(Comparison& c, const Tensor& got, const Tensor& want, const Tensor& naive,
                         std::string_view row) {
  for (const Tensor* t : {&got, &naive})
    if (t->shape() != want.shape()) {
      c.passed = false;
      c.naive = Comparison::Naive{NAN, NAN};  // no bound to show
      c.detail = std::string(t == &got ? "shape " : "the naive computation's shape ") + shape_str(t->shape()) +
                 " against the reference's " + shape_str(want.shape());
      return;
    }
  Tensor g = host_f64(got), w = host_f64(want), n = host_f64(naive);
  const double* gp = g.data<double>();
  const double* wp = w.data<double>();
  const double* np = n.data<double>();
  double sum_abs = 0.0, naive_max_abs = 0.0, want_max_abs = 0.0;
  int64_t worst = -1, naive_worst = -1;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double e = element_error(gp[i], wp[i]), naive_e = element_error(np[i], wp[i]);
    sum_abs += e;
    if (worst < 0 || e > c.max_abs) c.max_abs = e, worst = i;
    if (naive_worst < 0 || naive_e > naive_max_abs) naive_max_abs = naive_e, naive_worst = i;
    if (std::isfinite(wp[i])) want_max_abs = std::max(want_max_abs, std::fabs(wp[i]));
  }
  c.mean_abs = g.numel() > 0 ? sum_abs / double(g.numel()) : 0.0;
  c.max_rel = want_max_abs > 0 ? c.max_abs / want_max_abs : (c.max_abs > 0 ? INFINITY : 0.0);
  const double bound = naive_attention_bound(row, got.dtype(), naive_max_abs, want_max_abs);
  c.naive = Comparison::Naive{naive_max_abs, bound};
  char buf[320];
  if (!std::isfinite(naive_max_abs)) {
    c.passed = false;
    std::snprintf(buf, sizeof buf, "the naive computation is not finite at element %lld (%.9g, want %.9g)",
                  static_cast<long long>(naive_worst), np[naive_worst], wp[naive_worst]);
    c.detail = buf;
    return;
  }
  c.passed = c.max_abs <= bound;
  const double ratio = naive_max_abs > 0 ? c.max_abs / naive_max_abs : (c.max_abs > 0 ? INFINITY : 0.0);
  std::snprintf(buf, sizeof buf, "naive max_abs %.3e, ours/naive %.2f, bound %gxnaive + floor %.1e", naive_max_abs,
                ratio, kNaiveErrorFactor, bound - kNaiveErrorFactor * naive_max_abs);
  c.detail = buf;
  if (worst >= 0) {
    std::snprintf(buf, sizeof buf, "; worst element %lld: got %.9g, want %.9g, naive %.9g",
                  static_cast<long long>(worst), gp[worst], wp[worst], np[worst]);
    c.detail += buf;
  }
}

bool Context::compare_with_naive(std::string kernel, const Tensor& got, const Tensor& want, const Tensor& naive,
                                 std::string_view row) {
  Comparison c = labelled(std::move(kernel), got);
  judge_against_naive(c, got, want, naive, row);
  const bool passed = c.passed;
  report(std::move(c));
  return passed;
}

bool Context::compare_bits(std::string kernel, const Tensor& got, const Tensor& want) {
  Comparison c = labelled(std::move(kernel), got);
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    c.detail = "got " + got.describe() + ", want " + want.describe();
    report(std::move(c));
    return false;
  }
  Tensor g = got.to(Device::cpu()).contiguous(), w = want.to(Device::cpu()).contiguous();
  const auto* gp = static_cast<const unsigned char*>(g.raw_data());
  const auto* wp = static_cast<const unsigned char*>(w.raw_data());
  const size_t elem = dtype_size(g.dtype());
  int64_t differing = 0, first = -1;
  for (int64_t i = 0; i < g.numel(); ++i)
    if (std::memcmp(gp + size_t(i) * elem, wp + size_t(i) * elem, elem) != 0) {
      if (first < 0) first = i;
      ++differing;
    }
  Tensor g64 = g.to(DType::f64), w64 = w.to(DType::f64);
  const double* ga = g64.data<double>();
  const double* wa = w64.data<double>();
  double sum_abs = 0.0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    double e = std::fabs(ga[i] - wa[i]);
    if (std::isnan(e)) e = (std::memcmp(gp + size_t(i) * elem, wp + size_t(i) * elem, elem) == 0) ? 0.0 : INFINITY;
    sum_abs += e;
    c.max_abs = std::max(c.max_abs, e);
    c.max_rel = std::max(c.max_rel, wa[i] != 0 ? e / std::fabs(wa[i]) : (e > 0 ? INFINITY : 0.0));
  }
  c.mean_abs = g.numel() > 0 ? sum_abs / double(g.numel()) : 0.0;
  c.passed = differing == 0;
  c.detail = c.passed ? "bit-for-bit"
                      : std::to_string(differing) + " elements differ in their bits, the first at index " +
                            std::to_string(first);
  const bool passed = c.passed;
  report(std::move(c));
  return passed;
}

Context::Label::Label(Context& ctx, DType dtype, const Shape& shape) : ctx_(ctx), previous_(ctx.label_) {
  ctx_.label_ = std::make_pair(dtype, shape_str(shape));
}

Context::Label::~Label() { ctx_.label_ = previous_; }

Comparison Context::labelled(std::string kernel, const Tensor& got) const {
  Comparison c;
  c.kernel = std::move(kernel);
  c.dtype = label_ ? label_->first : got.dtype();
  c.shape = label_ ? label_->second : shape_str(got.shape());
  return c;
}

void Context::report(Comparison c) {
  if (report_) report_(c);
}

const std::vector<KernelCheck>& all_checks() {
  static const std::vector<KernelCheck> checks = {
#if ALPHA_WITH_CUDA
      {"elementwise", &check_elementwise},
      {"copy", &check_copy},
      {"layernorm", &check_layernorm},
      {"activation", &check_activation},
      {"cross_entropy", &check_cross_entropy},
      {"embedding", &check_embedding},
      {"matmul", &check_matmul},
      {"dropout", &check_dropout},
      {"optim", &check_optim},
      {"attention", &check_attention},
      {"flash_attention", &check_flash_attention},
      {"attention_jvp", &check_attention_jvp},
#endif
  };
  return checks;
}

HarnessResult run_checks(std::string_view filter, Device gpu, uint64_t seed,
                         const std::function<void(const Comparison&)>& on_comparison, Scale scale, Shard shard) {
#if ALPHA_WITH_CUDA
  cuda::require_device("check kernels", gpu);
#else
  raise<DeviceError>("check kernels", "device", "a build with the CUDA backend (this one has none)", gpu.str());
#endif
  std::vector<const KernelCheck*> selected;
  std::string names;
  for (const KernelCheck& check : all_checks()) {
    names += (names.empty() ? "" : ", ") + check.name;
    if (check.name.find(filter) != std::string::npos) selected.push_back(&check);
  }
  if (selected.empty()) raise<ValueError>("check kernels", "filter", "part of a check's name (" + names + ")", quoted(filter));
  HarnessResult result;
  Context ctx(gpu, seed, [&](const Comparison& c) {
    result.comparisons.push_back(c);
    if (!c.passed) ++result.failures;
    if (on_comparison) on_comparison(c);
  }, scale, shard);
  for (const KernelCheck* check : selected) {
    check->run(ctx);
    ++result.checks_run;
  }
  result.cases_in_scale = ctx.cases_in_scale();
  return result;
}

std::string format_header() {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%-34s %-5s %-20s %10s %10s %10s  %-17s %s", "kernel", "dtype", "shape", "max_abs",
                "mean_abs", "max_rel", "tolerance abs/rel", "result");
  return buf;
}

std::string format_comparison(const Comparison& c) {
  char buf[400];
  std::string tol = [&] {
    char t[40];
    if (c.naive) std::snprintf(t, sizeof t, "%.1e (%gxnaive)", c.naive->bound, kNaiveErrorFactor);
    else if (c.tol.abs == 0 && c.tol.rel == 0) return std::string("bitwise");
    else std::snprintf(t, sizeof t, "%.1e/%.1e", c.tol.abs, c.tol.rel);
    return std::string(t);
  }();
  std::snprintf(buf, sizeof buf, "%-34s %-5s %-20s %10.3e %10.3e %10.3e  %-17s %s", c.kernel.c_str(),
                std::string(dtype_name(c.dtype)).c_str(), c.shape.c_str(), c.max_abs, c.mean_abs, c.max_rel, tol.c_str(),
                c.passed ? "PASS" : "FAIL");
  std::string line = buf;
  if ((!c.passed || c.naive) && !c.detail.empty()) line += "  (" + c.detail + ")";
  return line;
}

}  // namespace alpha::check
