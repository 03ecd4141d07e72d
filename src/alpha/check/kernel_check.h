// The kernel correctness harness behind `alpha check kernels` and the CTest label `cuda`: every CUDA
// kernel runs on fresh random inputs, into outputs poisoned with NaN, and each output is compared with the
// CPU kernel's result in f64 on the same values (the inputs are rounded to the kernel's dtype first, so
// both sides see identical numbers). A comparison reports max_abs, mean_abs and max_rel and passes when
// every element is within the tolerance table's row (alpha/check/tolerances.h) for its dtype. bf16/f16
// attention outputs are judged instead against naive attention computed in the same precision
// (compare_with_naive, naive_attention_bound in tolerances.h): ours may be off the f64 reference by at most
// twice as much as it, plus a floor.
//
// A check is one function per kernel family (checks_<family>.cpp) that loops over the sizes and dtypes it
// covers and calls Context::compare for every output; the registry (kernel_check.cpp) lists them.
// Checks exist only in builds with the CUDA backend; running them needs a GPU.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alpha/check/tolerances.h"
#include "alpha/core/stream.h"
#include "alpha/tensor/tensor.h"

namespace alpha::check {

// Element counts every kernel is checked at, and odd counts beside them (tails, partial blocks).
inline const std::vector<int64_t> kSizes = {1, 64, 4096, 65536, 1048576};
inline const std::vector<int64_t> kOddSizes = {7, 4099, 1000003};

// Calls fn.template operator()<T>() for T = float, bf16 and f16, in that order.
template <class Fn>
void for_each_cuda_dtype(Fn&& fn) {
  fn.template operator()<float>();
  fn.template operator()<bf16>();
  fn.template operator()<f16>();
}

// Where the operands of an element-wise kernel start, in elements past 16-byte-aligned blocks: all aligned
// (the vector body alone, with a tail); all one element past (a scalar head, the body, a tail); at
// different offsets (the scalar path throughout).
struct OperandLayout {
  const char* name;
  int64_t first, second, out;  // offsets of the first and second inputs and of the output
};
inline constexpr OperandLayout kOperandLayouts[] = {{"aligned", 0, 0, 0}, {"shifted", 1, 1, 1}, {"mixed", 1, 0, 3}};

// One output of one kernel at one shape and dtype, compared with its reference.
struct Comparison {
  std::string kernel;  // "layernorm_backward.dx"
  DType dtype;         // the dtype the CUDA kernel ran in
  std::string shape;   // "[4096, 768]"
  double max_abs = 0;  // max |got − want|
  double mean_abs = 0;
  // max |got − want| / max(|want|, abs/rel): relative error, with values below the magnitude where the
  // absolute bound takes over counted at that magnitude. Passing implies max_rel <= 2·rel.
  double max_rel = 0;
  Tolerance tol{};     // {0, 0} for bit-for-bit comparisons
  bool passed = false;
  std::string detail;  // the worst element (index, got, want), or why the comparison failed
  // Set by compare_with_naive, whose max_rel is max_abs / max|want| (normwise: the bound is normwise too).
  struct Naive {
    double max_abs;  // max |naive − want|: the naive low-precision computation's error
    double bound;    // what max_abs may reach: naive_attention_bound (tolerances.h)
  };
  std::optional<Naive> naive;
};

// The judgement of Context::compare_with_naive, which needs no GPU: `got` (bf16 or f16, any device) and
// `naive` (the naive low-precision computation on the same inputs, any device and dtype) against `want`
// (f64 on the CPU), with the bound of naive_attention_bound for got's dtype and the f32 row `row`. Fills
// c's measurements, naive, passed and detail. NaN or inf where `want` is finite fails ours; in the naive
// result it fails the comparison too, as a yardstick that is not finite judges nothing.
void judge_against_naive(Comparison& c, const Tensor& got, const Tensor& want, const Tensor& naive,
                         std::string_view row);

// How much of each check runs. small keeps every kernel, dtype, option and tile path but leaves out the
// cases larger than kSmallScaleLimit (their size measured as each check says: elements, output entries,
// query × key pairs): for tools that slow every access down a hundredfold, such as compute-sanitizer.
enum class Scale { full, small };
inline constexpr int64_t kSmallScaleLimit = 65536;
// "full" or "small" (as ALPHA_CHECK_SCALE spells them); anything else raises ValueError naming `where`.
Scale parse_scale(std::string_view text, std::string_view where);

// One of `count` shards of the cases, so that a slow tool can spread a check over processes: the cases the
// scale keeps are numbered in the order the checks meet them, and case j runs in shard j mod count. (The
// element-wise checks' sizes, element_counts(), are not split: every shard runs them.)
struct Shard {
  int64_t index = 0, count = 1;
  bool valid() const { return 0 <= index && index < count; }
};
// "i/n" with 0 <= i < n (as ALPHA_CHECK_SHARD spells it); anything else raises ValueError naming `where`.
Shard parse_shard(std::string_view text, std::string_view where);

// Which cases run at a scale and in a shard (see Scale and Shard).
class CaseFilter {
 public:
  CaseFilter(Scale scale, Shard shard);
  // Whether a case of this size is within the scale (whatever the shard).
  bool fits_scale(int64_t size) const { return scale_ == Scale::full || size <= kSmallScaleLimit; }
  // Whether the next case, of this size, runs here; each case the scale keeps takes the next number.
  bool includes(int64_t size);
  // The cases the scale kept so far, in every shard.
  int64_t cases_kept() const { return cases_kept_; }

 private:
  Scale scale_;
  Shard shard_;
  int64_t cases_kept_ = 0;
};

// What a check works with: the GPU, its stream, fresh seeds, and the comparisons it reports.
class Context {
 public:
  Context(Device gpu, uint64_t seed, std::function<void(const Comparison&)> report, Scale scale = Scale::full,
          Shard shard = {});

  Device gpu() const { return gpu_; }
  Stream stream() const { return stream_; }
  // Whether the next case, of this size, runs at this scale and in this shard (CaseFilter::includes).
  bool includes(int64_t size) { return cases_.includes(size); }
  int64_t cases_in_scale() const { return cases_.cases_kept(); }
  // kSizes and kOddSizes, the element counts of the element-wise checks, less those this scale leaves out.
  std::vector<int64_t> element_counts() const;
  // A new seed for each random input, derived from the harness seed (a run is reproducible from it).
  uint64_t next_seed();

  // Fresh uniform values in [lo, hi), rounded to `dtype`, held in f64 on the CPU: the reference's input.
  Tensor random(Shape shape, DType dtype, double lo = -1.0, double hi = 1.0);
  // Fresh int32 ids, uniform in [0, vocab), on the CPU.
  Tensor random_ids(Shape shape, int64_t vocab);
  // `host`'s values on the GPU in `dtype` (converted on the CPU, then copied).
  Tensor to_gpu(const Tensor& host, DType dtype);
  // `host`'s values as `dtype` on the GPU, starting `offset` elements into a fresh poisoned block.
  Tensor to_gpu_at(const Tensor& host, DType dtype, int64_t offset);
  // A GPU tensor whose every byte is 0xff: NaN in f32, bf16 and f16, −1 in integer types. An element a
  // kernel fails to write stays NaN and fails its comparison.
  Tensor poisoned(Shape shape, DType dtype);

  // Compares `got` (any device and dtype) with `want` (f64 on the CPU) element by element with the row
  // (row, got's dtype) of the tolerance table; NaN or inf where `want` is finite fails. Reports and returns
  // whether it passed.
  bool compare(std::string kernel, const Tensor& got, const Tensor& want, std::string_view row);
  // Same, with an explicit tolerance (for bounds that scale with the input, such as a sum's).
  bool compare(std::string kernel, const Tensor& got, const Tensor& want, Tolerance tol);
  // For bf16/f16 attention: passes iff max|got − want| <= 2·max|naive − want| + floor, where `naive` is the
  // naive low-precision attention on the same inputs (judge_against_naive; the factor and the floor, which
  // takes the abs of the f32 row `row`, are in tolerances.h).
  bool compare_with_naive(std::string kernel, const Tensor& got, const Tensor& want, const Tensor& naive,
                          std::string_view row);
  // Passes only if `got` and `want` (same dtype, any devices) hold the same bytes: dropout masks, and a
  // deterministic kernel run twice.
  bool compare_bits(std::string kernel, const Tensor& got, const Tensor& want);

  // Comparisons are labelled with their output's dtype and shape. For a kernel whose output says neither
  // (a sum's f32 scalar of a bf16 input), a label in scope names the kernel's dtype and input shape instead.
  class [[nodiscard]] Label {
   public:
    Label(Context& ctx, DType dtype, const Shape& shape);
    ~Label();
    Label(const Label&) = delete;
    Label& operator=(const Label&) = delete;

   private:
    Context& ctx_;
    std::optional<std::pair<DType, std::string>> previous_;
  };

 private:
  void report(Comparison c);
  Comparison labelled(std::string kernel, const Tensor& got) const;

  Device gpu_;
  Stream stream_;
  CaseFilter cases_;
  uint64_t seed_;
  uint64_t draws_ = 0;
  std::function<void(const Comparison&)> report_;
  std::optional<std::pair<DType, std::string>> label_;
};

struct KernelCheck {
  std::string name;  // the kernel family, e.g. "layernorm"; --filter selects names containing a string
  void (*run)(Context&);
};

// Every check, in a fixed order; empty in a build without the CUDA backend.
const std::vector<KernelCheck>& all_checks();

struct HarnessResult {
  std::vector<Comparison> comparisons;
  int64_t failures = 0;
  int64_t checks_run = 0;
  // The cases the checks hold at the scale, counted over every shard: a shard whose index is at or past it
  // holds none (more shards than cases), so it makes no comparison.
  int64_t cases_in_scale = 0;
};

// Runs the checks whose name contains `filter` (all for an empty one) on `gpu`, handing each comparison to
// `on_comparison` as it is made. Raises DeviceError without the CUDA backend or without that GPU, and
// ValueError when the filter selects no check (naming the checks there are).
HarnessResult run_checks(std::string_view filter, Device gpu, uint64_t seed,
                         const std::function<void(const Comparison&)>& on_comparison = {}, Scale scale = Scale::full,
                         Shard shard = {});

// One line per comparison: kernel, dtype, shape, max_abs, mean_abs, max_rel, tolerance, PASS/FAIL, and
// the detail of a failure. A comparison with the naive computation shows its bound as the tolerance
// ("2.6e-03 (2xnaive)") and always its detail (the naive error, the ratio ours/naive).
std::string format_comparison(const Comparison& c);
std::string format_header();

}  // namespace alpha::check
