// Harness checks of the CUDA matrix-product kernels (kernels/cuda/matmul.cu) against the CPU kernels in
// f64 on the same values:
//  - gemm in all four transpose forms at output sizes 1, 64, 4096, 65536 and one 1024×1024×1024 product,
//    odd shapes (127×33×65, 7×13×5), alpha/beta accumulation, k = 0, and strided batches with padded rows
//    and batch strides; f32, f32 with TF32 (its own row), bf16, f16;
//  - the epilogues (bias, GELU with and without the kept pre-activation, DGELU, the bias gradients of c and
//    of a) and an addend read in place of c (with and without bias and GELU), each on the fused cuBLASLt path and on
//    the unfused one (forced), including an aux leading dimension that is not a multiple of 8 and padded outputs whose
//    padding must stay as it was;
//  - bf16/f16 operands into an f32 output (GemmArgs<T, float>, how dW is summed over chunks of rows): the
//    plain products above, accumulation included, and the bias gradient of a (f32) on both paths; labelled
//    with the operands' dtype, judged by the f32 rows;
//  - broadcast_rows (bit for bit) and column_sum, with padded rows, up to a million rows (bf16/f16 also into
//    f32);
//  - repeats: a GEMM with its bias gradient and column_sum give the same bits when run again.
// Outputs start poisoned (NaN); compared buffers include their padding, which the reference leaves as NaN,
// so a write outside the matrix fails too.
#if ALPHA_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "alpha/check/families.h"
#include "alpha/kernels/matmul.h"

namespace alpha::check {

namespace {

using kernels::GemmBiasGrad;
using kernels::GemmEpilogue;

// One GEMM to check. a, b and c have `pad` extra elements after each row; with a batch, a's and b's
// matrices are also `pad` elements further apart than their rows need (c's are packed, so that c reads as
// (batch, m, ldc)).
struct GemmCase {
  std::string name;
  int64_t batch, m, k, n;
  bool trans_a = false, trans_b = false;
  int64_t pad = 0;
  double alpha = 1.0, beta = 0.0;
  bool bias = false, aux = false;
  GemmEpilogue epilogue = GemmEpilogue::none;
  GemmBiasGrad bias_grad = GemmBiasGrad::none;
  bool addend = false;  // c's initial values given as the addend (c itself starts poisoned)
};

const char* transposes(bool trans_a, bool trans_b) {
  static const char* names[] = {"NN", "NT", "TN", "TT"};
  return names[2 * int(trans_a) + int(trans_b)];
}

// Turns the fused epilogues off for its lifetime (the unfused path), or leaves them on.
class FusedEpilogues {
 public:
  explicit FusedEpilogues(bool on) : saved_(kernels::cuda::gemm_fused_epilogues()) {
    kernels::cuda::set_gemm_fused_epilogues(on);
  }
  ~FusedEpilogues() { kernels::cuda::set_gemm_fused_epilogues(saved_); }
  FusedEpilogues(const FusedEpilogues&) = delete;
  FusedEpilogues& operator=(const FusedEpilogues&) = delete;

 private:
  bool saved_;
};

// max_j Σ_i |x[i, j]| over the valid (rows, cols) part of a row-major buffer with rows ld apart.
double max_column_abs_sum(const Tensor& x64, int64_t rows, int64_t cols, int64_t ld) {
  const double* p = x64.data<double>();
  double worst = 0.0;
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0.0;
    for (int64_t i = 0; i < rows; ++i) s += std::fabs(p[i * ld + j]);
    worst = std::max(worst, s);
  }
  return worst;
}

double max_abs(const Tensor& x64) {
  double worst = 0.0;
  const double* p = x64.data<double>();
  for (int64_t i = 0; i < x64.numel(); ++i)
    if (std::isfinite(p[i])) worst = std::max(worst, std::fabs(p[i]));
  return worst;
}

// T: the operands' type; Out: the output's (and bias, aux and bias gradient's).
template <class T, class Out = T>
void check_gemm(Context& ctx, const GemmCase& g, bool tf32, const std::string& path) {
  const DType dtype = dtype_of<T>, out_dtype = dtype_of<Out>;
  constexpr bool kWider = !std::is_same_v<T, Out>;
  const int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  const int64_t lda = std::max<int64_t>(a_cols + g.pad, 1), ldb = std::max<int64_t>(b_cols + g.pad, 1);
  const int64_t ldc = g.n + g.pad, ld_aux = g.n + g.pad;
  const int64_t batch_pad = g.batch > 1 ? g.pad : 0;
  const int64_t sa = a_rows * lda + batch_pad, sb = b_rows * ldb + batch_pad, sc = g.m * ldc;
  const std::string name = "gemm." + g.name + "." + transposes(g.trans_a, g.trans_b) + (tf32 ? ".tf32" : "") +
                           (kWider ? ".f32_out" : "") + path;
  const std::string_view row = tf32 ? "cuda.matmul.tf32" : "cuda.matmul";

  const bool aux_out = g.epilogue == GemmEpilogue::gelu && g.aux;
  const bool aux_in = g.epilogue == GemmEpilogue::dgelu;
  Tensor a = ctx.random({g.batch * sa}, dtype), b = ctx.random({g.batch * sb}, dtype);
  Tensor bias = g.bias ? ctx.random({g.n}, out_dtype) : Tensor::zeros({g.n}, DType::f64);
  // dgelu's input, the pre-activation (padding included, never read)
  Tensor pre = aux_in ? ctx.random({g.m, ld_aux}, out_dtype, -3.0, 3.0) : Tensor();
  // c: initial values when beta reads them, else NaN (poison); the reference starts from the same.
  Tensor c_init = g.beta != 0.0 ? ctx.random({g.batch, g.m, ldc}, out_dtype)
                                : Tensor::full({g.batch, g.m, ldc}, NAN, DType::f64);
  const int64_t grad_size = g.bias_grad == GemmBiasGrad::a_columns ? g.m : g.n;

  // The reference: the CPU kernel in f64 on the same values.
  Tensor want_c = g.addend ? Tensor::full(c_init.shape(), NAN, DType::f64) : c_init.clone(),
         want_aux = aux_in ? pre.clone() : Tensor::full({g.m, ld_aux}, NAN, DType::f64);
  Tensor want_grad = Tensor::full({grad_size}, NAN, DType::f64);
  kernels::GemmArgs<double> ref{a.data<double>(), b.data<double>(), want_c.data<double>(), g.batch, g.m, g.n, g.k,
                                g.trans_a, g.trans_b, lda, ldb, ldc, sa, sb, sc, g.alpha, g.beta};
  ref.bias = g.bias ? bias.data<double>() : nullptr;
  ref.epilogue = g.epilogue;
  if (g.aux) ref.aux = want_aux.data<double>(), ref.ld_aux = ld_aux;
  ref.bias_grad_of = g.bias_grad;
  if (g.bias_grad != GemmBiasGrad::none) ref.bias_grad = want_grad.data<double>();
  if (g.addend) ref.addend = c_init.data<double>();
  kernels::cpu::gemm(ref);

  Tensor da = ctx.to_gpu(a, dtype), db = ctx.to_gpu(b, dtype), dbias = ctx.to_gpu(bias, out_dtype);
  Tensor daddend = g.addend ? ctx.to_gpu(c_init, out_dtype) : Tensor();
  auto run = [&](Tensor& c, Tensor& aux, Tensor& grad) {
    c = g.beta != 0.0 && !g.addend ? ctx.to_gpu(c_init, out_dtype) : ctx.poisoned({g.batch, g.m, ldc}, out_dtype);
    aux = aux_in ? ctx.to_gpu(pre, out_dtype) : ctx.poisoned({g.m, ld_aux}, out_dtype);
    grad = ctx.poisoned({grad_size}, out_dtype);
    kernels::GemmArgs<T, Out> args{da.data<T>(), db.data<T>(), c.data<Out>(), g.batch, g.m, g.n, g.k, g.trans_a,
                                   g.trans_b, lda, ldb, ldc, sa, sb, sc, acc_t<T>(g.alpha), acc_t<T>(g.beta)};
    args.allow_tf32 = tf32;
    args.bias = g.bias ? dbias.data<Out>() : nullptr;
    args.epilogue = g.epilogue;
    if (g.aux) args.aux = aux.data<Out>(), args.ld_aux = ld_aux;
    args.bias_grad_of = g.bias_grad;
    if (g.bias_grad != GemmBiasGrad::none) args.bias_grad = grad.data<Out>();
    if (g.addend) args.addend = daddend.data<Out>();
    kernels::cuda::gemm(args, ctx.stream());
  };
  Tensor c, aux, grad;
  run(c, aux, grad);

  // A wider output is labelled with the operands' dtype (its own, f32, picks the rows: f32 accumulation).
  std::optional<Context::Label> label;
  if constexpr (kWider) label.emplace(ctx, dtype, Shape{g.batch, g.m, ldc});
  // abs: per unit of |alpha|·K (accumulation), plus rel per unit of the largest intermediate (see the row).
  Tolerance tol = tolerance(row, out_dtype);
  double scale = max_abs(want_c) + (g.bias ? 1.0 : 0.0) + (aux_out ? max_abs(want_aux) : 0.0);
  tol.abs = tol.abs * std::max(1.0, std::fabs(g.alpha) * double(g.k)) + tol.rel * scale;
  ctx.compare(name, c, want_c, tol);
  if (aux_out) ctx.compare(name + ".pre", aux, want_aux, tol);

  if (g.bias_grad != GemmBiasGrad::none) {
    // c's bias gradient against the f64 column sums of the c the GPU stored; a's against those of a.
    Tolerance bt = tolerance("cuda.matmul.bias_grad", out_dtype);
    Tensor want = want_grad;
    if (g.bias_grad == GemmBiasGrad::c_columns) {
      Tensor got_c = c.to(Device::cpu()).to(DType::f64).contiguous();
      want = Tensor::zeros({grad_size}, DType::f64);
      kernels::cpu::column_sum(kernels::ColumnSumArgs<double>{got_c.data<double>(), want.data<double>(), g.m, g.n, ldc});
      bt.abs *= max_column_abs_sum(got_c, g.m, g.n, ldc);
    } else {
      bt.abs *= max_column_abs_sum(a, g.k, g.m, lda);
    }
    ctx.compare(name + ".bias_grad", grad, want, bt);
  }
}

// The same GEMM run twice gives the same bits: c, and the bias gradient cuBLASLt reduces itself.
template <class T>
void check_gemm_repeats(Context& ctx, const GemmCase& g) {
  const DType dtype = dtype_of<T>;
  const int64_t ld_aux = g.n;
  Tensor a = ctx.to_gpu(ctx.random({g.k, g.m}, dtype), dtype), b = ctx.to_gpu(ctx.random({g.k, g.n}, dtype), dtype);
  Tensor pre = ctx.to_gpu(ctx.random({g.m, ld_aux}, dtype, -3.0, 3.0), dtype);
  auto run = [&](GemmEpilogue epilogue, GemmBiasGrad bias_grad, bool trans_a) {
    Tensor c = ctx.poisoned({g.m, g.n}, dtype), grad = ctx.poisoned({bias_grad == GemmBiasGrad::a_columns ? g.m : g.n}, dtype);
    kernels::GemmArgs<T> args{a.data<T>(), b.data<T>(), c.data<T>(), 1, g.m, g.n, g.k, trans_a, false,
                              trans_a ? g.m : g.k, g.n, g.n, 0, 0, 0, acc_t<T>(1), acc_t<T>(0)};
    args.epilogue = epilogue;
    if (epilogue == GemmEpilogue::dgelu) args.aux = pre.data<T>(), args.ld_aux = ld_aux;
    args.bias_grad_of = bias_grad;
    args.bias_grad = grad.data<T>();
    kernels::cuda::gemm(args, ctx.stream());
    return std::pair{c, grad};
  };
  // trans_a reads a (k, m) as (m, k)ᵀ; without it the same buffer is read as (m, k) (the values differ).
  auto [c1, g1] = run(GemmEpilogue::none, GemmBiasGrad::a_columns, true);
  auto [c2, g2] = run(GemmEpilogue::none, GemmBiasGrad::a_columns, true);
  ctx.compare_bits("gemm.repeats", c2, c1);
  ctx.compare_bits("gemm.bias_grad_of_a.repeats", g2, g1);
  auto [d1, h1] = run(GemmEpilogue::dgelu, GemmBiasGrad::c_columns, false);
  auto [d2, h2] = run(GemmEpilogue::dgelu, GemmBiasGrad::c_columns, false);
  ctx.compare_bits("gemm.dgelu.repeats", d2, d1);
  ctx.compare_bits("gemm.dgelu_bias_grad.repeats", h2, h1);
}

template <class T>
void check_broadcast_rows(Context& ctx, int64_t rows, int64_t cols) {
  const DType dtype = dtype_of<T>;
  Tensor row = ctx.random({cols}, dtype);
  Tensor drow = ctx.to_gpu(row, dtype), out = ctx.poisoned({rows, cols}, dtype);
  kernels::cuda::broadcast_rows(kernels::BroadcastRowsArgs<T>{drow.data<T>(), out.data<T>(), rows, cols}, ctx.stream());
  Tensor want = Tensor::empty({rows, cols}, DType::f64);
  kernels::cpu::broadcast_rows(kernels::BroadcastRowsArgs<double>{row.data<double>(), want.data<double>(), rows, cols});
  ctx.compare_bits("broadcast_rows", out, want.to(dtype));
}

// T: the input's type; Out: the sums' (a wider output is labelled with T, judged by Out's row).
template <class T, class Out = T>
void check_column_sum(Context& ctx, int64_t rows, int64_t cols, int64_t pad) {
  const DType dtype = dtype_of<T>, out_dtype = dtype_of<Out>;
  constexpr bool kWider = !std::is_same_v<T, Out>;
  const int64_t ld = cols + pad;
  Tensor x = ctx.random({rows, ld}, dtype);
  Tensor dx = ctx.to_gpu(x, dtype);
  auto run = [&] {
    Tensor out = ctx.poisoned({cols}, out_dtype);
    kernels::cuda::column_sum(kernels::ColumnSumArgs<T, Out>{dx.data<T>(), out.data<Out>(), rows, cols, ld},
                              ctx.stream());
    return out;
  };
  Tensor first = run(), second = run();
  Tensor want = Tensor::empty({cols}, DType::f64);
  kernels::cpu::column_sum(kernels::ColumnSumArgs<double>{x.data<double>(), want.data<double>(), rows, cols, ld});
  std::optional<Context::Label> label;
  if constexpr (kWider) label.emplace(ctx, dtype, Shape{rows, ld});
  Tolerance tol = tolerance("cuda.column_sum", out_dtype);
  tol.abs *= std::max(1.0, max_column_abs_sum(x, rows, cols, ld));
  const std::string name = std::string(pad ? "column_sum.padded" : "column_sum") + (kWider ? ".f32_out" : "");
  ctx.compare(name, first, want, tol);
  ctx.compare_bits(name + ".repeats", second, first);
}

// Plain products: output sizes check::kSizes' (m·n = 1, 64, 4096, 65536) and odd ones in every transpose form,
// accumulation, k = 0, strided batches with padding; 1024×1024×1024 once per dtype (as linear's forward, NT).
std::vector<GemmCase> product_cases() {
  std::vector<GemmCase> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      for (auto [m, k, n] : {std::tuple{1, 1, 1}, {8, 8, 8}, {64, 33, 64}, {256, 17, 256}, {127, 33, 65}, {7, 13, 5}})
        cases.push_back({"plain", 1, m, k, n, ta, tb});
      for (auto [m, k, n] : {std::tuple{64, 33, 64}, {127, 33, 65}}) {
        GemmCase c{"alpha_beta", 1, m, k, n, ta, tb};
        c.alpha = 0.5, c.beta = -1.25;
        cases.push_back(c);
      }
      cases.push_back({"batched_strided", 3, 37, 19, 23, ta, tb, 3});
      GemmCase acc{"batched_strided_alpha_beta", 3, 37, 19, 23, ta, tb, 3};
      acc.alpha = -0.75, acc.beta = 0.5;
      cases.push_back(acc);
    }
  GemmCase empty{"empty_inner", 1, 5, 0, 7};
  cases.push_back(empty);
  empty.name = "empty_inner_beta", empty.beta = 0.5;
  cases.push_back(empty);
  GemmCase batched_empty{"batched_empty_inner_beta", 2, 5, 0, 7};
  batched_empty.beta = -2.0;
  cases.push_back(batched_empty);
  cases.push_back({"large", 1, 1024, 1024, 1024, false, true});
  return cases;
}

// Every epilogue at shapes whose aux ld is a multiple of 8 (fused), is not (unfused even when fused is on),
// is padded (ld 32 for 24 columns), and at 1×1×1 and k = 0, in every transpose form its bias gradient allows.
std::vector<GemmCase> epilogue_cases() {
  struct Kind {
    const char* name;
    GemmEpilogue epilogue;
    bool bias, aux;
    double alpha, beta;
    GemmBiasGrad bias_grad;
    bool addend = false;
  };
  const Kind kinds[] = {
      {"bias", GemmEpilogue::none, true, false, 1.0, 0.0, GemmBiasGrad::none},
      {"bias_alpha_beta", GemmEpilogue::none, true, false, 0.5, -1.25, GemmBiasGrad::none},
      {"gelu", GemmEpilogue::gelu, false, false, 1.0, 0.0, GemmBiasGrad::none},
      {"gelu_bias", GemmEpilogue::gelu, true, false, 1.0, 0.0, GemmBiasGrad::none},
      {"gelu_pre", GemmEpilogue::gelu, false, true, 1.0, 0.0, GemmBiasGrad::none},
      {"gelu_bias_pre", GemmEpilogue::gelu, true, true, 1.0, 0.0, GemmBiasGrad::none},
      {"gelu_bias_pre_alpha_beta", GemmEpilogue::gelu, true, true, 0.5, 0.75, GemmBiasGrad::none},
      {"dgelu", GemmEpilogue::dgelu, false, true, 1.0, 0.0, GemmBiasGrad::none},
      {"dgelu_bias_grad", GemmEpilogue::dgelu, false, true, 0.5, 0.0, GemmBiasGrad::c_columns},
      {"bias_grad_of_a", GemmEpilogue::none, false, false, 2.0, 0.0, GemmBiasGrad::a_columns},
      {"addend", GemmEpilogue::none, false, false, 0.5, -1.25, GemmBiasGrad::none, true},
      {"bias_addend", GemmEpilogue::none, true, false, 1.0, 1.0, GemmBiasGrad::none, true},
      {"gelu_bias_pre_addend", GemmEpilogue::gelu, true, true, 0.5, 0.75, GemmBiasGrad::none, true},
  };
  struct Shape3 {
    int64_t m, k, n, pad;
  };
  const Shape3 shapes[] = {{1, 1, 1, 0}, {64, 33, 64, 0}, {127, 33, 65, 0}, {40, 19, 24, 8}, {3, 0, 4, 0}};
  std::vector<GemmCase> cases;
  for (const Kind& kind : kinds)
    for (const Shape3& s : shapes)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          if (kind.bias_grad == GemmBiasGrad::a_columns && !ta) continue;
          GemmCase c{kind.name, 1,         s.m,      s.k,           s.n,           ta, tb, s.pad, kind.alpha,
                     kind.beta, kind.bias, kind.aux, kind.epilogue, kind.bias_grad};
          c.addend = kind.addend;
          cases.push_back(c);
        }
  return cases;
}

}  // namespace

void check_matmul(Context& ctx) {
  const std::vector<GemmCase> products = product_cases(), epilogues = epilogue_cases();
  for_each_cuda_dtype([&]<class T>() {
    constexpr bool kF32 = std::is_same_v<T, float>;
    for (const GemmCase& g : products) {
      if (!ctx.includes(g.m * g.n)) continue;
      check_gemm<T>(ctx, g, false, "");
      if constexpr (kF32) check_gemm<T>(ctx, g, true, "");
    }
    for (bool fused : {true, false}) {
      FusedEpilogues mode(fused);
      const std::string path = fused ? ".fused" : ".unfused";
      for (const GemmCase& g : epilogues) {
        if (!ctx.includes(g.m * g.n)) continue;
        check_gemm<T>(ctx, g, false, path);
        if constexpr (kF32) check_gemm<T>(ctx, g, true, path);  // TF32 takes cuBLASLt's f32 GELU
      }
    }
    if constexpr (!kF32) {  // into f32: the plain products, and a's bias gradient on both paths
      for (const GemmCase& g : products)
        if (ctx.includes(g.m * g.n)) check_gemm<T, float>(ctx, g, false, "");
      for (bool fused : {true, false}) {
        FusedEpilogues mode(fused);
        for (const GemmCase& g : epilogues)
          if (g.bias_grad == GemmBiasGrad::a_columns && ctx.includes(g.m * g.n))
            check_gemm<T, float>(ctx, g, false, fused ? ".fused" : ".unfused");
      }
    }
    if (const GemmCase repeats{"repeats", 1, 256, 512, 192}; ctx.includes(repeats.m * repeats.n))
      check_gemm_repeats<T>(ctx, repeats);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {1, 64}, {64, 64}, {1024, 64}, {1024, 1024}, {7, 13},
                              {1001, 3}})
      if (ctx.includes(rows * cols)) check_broadcast_rows<T>(ctx, rows, cols);
    for (auto [rows, cols, pad] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 0}, {64, 1, 0}, {64, 64, 0},
                                   {4096, 16, 0}, {65536, 16, 0}, {1048576, 1, 0}, {0, 5, 0}, {7, 13, 3},
                                   {3001, 33, 3}, {1000003, 3, 1}})
      if (ctx.includes(rows * (cols + pad))) {
        check_column_sum<T>(ctx, rows, cols, pad);
        if constexpr (!std::is_same_v<T, float>) check_column_sum<T, float>(ctx, rows, cols, pad);
      }
  });
}

}  // namespace alpha::check
#endif
