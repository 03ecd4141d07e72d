#include "alpha/ops/matmul.h"

#include <atomic>
#include <optional>
#include <type_traits>

#include "alpha/kernels/matmul.h"
#include "alpha/ops/check.h"
#include "alpha/ops/elementwise.h"

namespace alpha::ops {

namespace {

std::atomic<bool> tf32_allowed{false};

// A tensor seen as a batch of row-major matrices with unit stride along a row, as GEMM takes it:
// dims [0, row_first) index the batch, dims [row_first, dim-1) the rows, the last dim the columns.
struct MatrixBatch {
  Tensor t;              // the tensor itself when its strides fit, else a contiguous copy
  int64_t batch, rows, cols;
  int64_t ld;            // stride between rows
  int64_t batch_stride;  // stride between matrices
};

// The stride that steps dims [first, last) of t as one flattened index; nullopt if they do not collapse
// to one stride, `unconstrained` when no dim there has more than one element.
std::optional<int64_t> collapsed_stride(const Tensor& t, int64_t first, int64_t last, int64_t unconstrained) {
  std::optional<int64_t> stride;
  int64_t count = 1;
  for (int64_t d = last - 1; d >= first; --d) {
    if (t.size(d) == 1) continue;
    if (!stride) stride = t.stride(d);
    else if (t.stride(d) != *stride * count) return std::nullopt;
    count *= t.size(d);
  }
  return stride.value_or(unconstrained);
}

int64_t numel_of_dims(const Tensor& t, int64_t first, int64_t last) {
  return shape_numel(std::span(t.shape()).subspan(size_t(first), size_t(last - first)));
}

MatrixBatch as_matrices(const Tensor& t, int64_t row_first) {
  int64_t last = t.dim() - 1;
  MatrixBatch m{t, numel_of_dims(t, 0, row_first), numel_of_dims(t, row_first, last), t.size(-1), 0, 0};
  auto ld = collapsed_stride(t, row_first, last, m.cols);
  auto batch_stride = collapsed_stride(t, 0, row_first, 0);
  bool rows_fit = m.cols <= 1 || t.stride(-1) == 1;
  if (rows_fit && ld && batch_stride && (m.rows <= 1 || *ld >= m.cols)) {
    m.ld = *ld;
    m.batch_stride = *batch_stride;
  } else {
    m.t = t.contiguous();
    m.ld = m.cols;
    m.batch_stride = m.rows * m.cols;
  }
  return m;
}

Shape leading_shape(const Tensor& t, int64_t drop) {
  return Shape(t.shape().begin(), t.shape().end() - drop);
}

Shape with_last(Shape leading, std::initializer_list<int64_t> last) {
  leading.insert(leading.end(), last);
  return leading;
}

// A GEMM of plain (non-batched) matrices into a contiguous output c (m, n) of element type Out, with no
// epilogue yet: callers set the epilogue fields. TF32 is asked for on f32 when the process allows it (the CPU
// ignores the flag).
template <class T, class Out = T>
kernels::GemmArgs<T, Out> gemm_2d(const MatrixBatch& a, const MatrixBatch& b, const Tensor& c, int64_t m,
                                  int64_t n, int64_t k, bool trans_a, bool trans_b) {
  kernels::GemmArgs<T, Out> args{a.t.data<T>(), b.t.data<T>(), c.data<Out>(), 1, m, n, k, trans_a, trans_b,
                                 a.ld, b.ld, n, 0, 0, 0, acc_t<T>(1), acc_t<T>(0)};
  args.allow_tf32 = std::is_same_v<T, float> && allow_tf32();
  return args;
}

// Validates dy [..., out] against x [..., in].
void check_output_grad(std::string_view op, const Tensor& dy, const Tensor& x, int64_t out_features) {
  check_same_device(op, "dy", dy, x);
  check_same_dtype(op, "dy", dy, x);
  check_shape(op, "dy", dy, with_last(leading_shape(x, 1), {out_features}));
}

// dW = dyᵀ·x + beta·dW into `dweight` (contiguous [out, in], element type Out) and, with `bias_grad`, db = Σ
// over rows of dy into it from the same GEMM (its bias-gradient epilogue, which overwrites: no beta).
template <class T, class Out, class Where>
void weight_grad_gemm(const Where& where, const MatrixBatch& dym, const Tensor& x, const Tensor& dweight,
                      acc_t<T> beta, Out* bias_grad) {
  MatrixBatch xm = as_matrices(x, 0);  // outlives the call: it may hold a contiguous copy of x
  auto args = gemm_2d<T, Out>(dym, xm, dweight, dweight.size(0), dweight.size(1), dym.rows, true, false);
  args.beta = beta;
  if (bias_grad) {
    args.bias_grad_of = kernels::GemmBiasGrad::a_columns;
    args.bias_grad = bias_grad;
  }
  ALPHA_KERNEL(gemm)(where, args);
}

// dW = dyᵀ·x into `grads.dweight` and, when asked, db = Σ over rows of dy into `grads.dbias`: from dW's GEMM
// when both are wanted (its bias-gradient epilogue), else a column sum.
template <class T, class Where>
void weight_and_bias_grads(const Where& where, const MatrixBatch& dym, const Tensor& x, bool need_dweight,
                           bool need_dbias, int64_t out_features, int64_t in_features, Tensor& dweight, Tensor& dbias) {
  if (need_dbias) dbias = Tensor::empty({out_features}, x.dtype(), x.device());
  if (need_dweight) {
    dweight = Tensor::empty({out_features, in_features}, x.dtype(), x.device());
    weight_grad_gemm<T>(where, dym, x, dweight, acc_t<T>(0), need_dbias ? dbias.data<T>() : nullptr);
  } else if (need_dbias) {
    ALPHA_KERNEL(column_sum)(where, kernels::ColumnSumArgs<T>{dym.t.data<T>(), dbias.data<T>(), dym.rows,
                                                              out_features, dym.ld});
  }
}

// out = epilogue(x·Wᵀ + b) as one GEMM (the bias in its epilogue), or residual + x·Wᵀ + b with a residual
// (GEMM's addend: beta = 1) and no epilogue; with a gelu epilogue and keep_pre, pre receives x·Wᵀ + b.
LinearGelu linear_forward(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                          kernels::GemmEpilogue epilogue, bool keep_pre, const Tensor& residual = Tensor()) {
  check_linear_operands(op, x, weight, bias);
  int64_t out_features = weight.size(0), in_features = weight.size(1);
  MatrixBatch xm = as_matrices(x, 0), wm = as_matrices(weight, 0);
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  Shape shape = with_last(leading_shape(x, 1), {out_features});
  Tensor rc;  // the residual, contiguous: the addend's rows are the output's
  if (residual.defined()) {
    check_same_device(op, "residual", residual, x);
    check_same_dtype(op, "residual", residual, x);
    check_shape(op, "residual", residual, shape);
    rc = residual.contiguous();
  }
  LinearGelu result{keep_pre ? Tensor::empty(shape, x.dtype(), x.device()) : Tensor(),
                    Tensor::empty(shape, x.dtype(), x.device())};
  dispatch_float(op, x, [&]<class T>(const auto& where) {
    auto args = gemm_2d<T>(xm, wm, result.out, xm.rows, out_features, in_features, false, true);
    if (bc.defined()) args.bias = bc.data<T>();
    if (rc.defined()) {
      args.addend = rc.data<T>();
      args.beta = acc_t<T>(1);
    }
    args.epilogue = epilogue;
    if (keep_pre) {
      args.aux = result.pre.data<T>();
      args.ld_aux = out_features;
    }
    ALPHA_KERNEL(gemm)(where, args);
  });
  return result;
}

}  // namespace

void check_linear_operands(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_backend_float(op, "x", x);
  check_min_dim(op, "x", x, 1);
  check_same_device(op, "weight", weight, x);
  check_same_dtype(op, "weight", weight, x);
  check_dim(op, "weight", weight, 2);
  check_size(op, "weight", weight, 1, x.size(-1));
  if (!bias.defined()) return;
  check_same_device(op, "bias", bias, x);
  check_same_dtype(op, "bias", bias, x);
  check_shape(op, "bias", bias, {weight.size(0)});
}

void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  constexpr std::string_view op = "matmul";
  check_backend_float(op, "a", a);
  check_same_device(op, "b", b, a);
  check_same_dtype(op, "b", b, a);
  check_min_dim(op, "a", a, 2);
  check_dim(op, "b", b, a.dim());
  Shape batch = leading_shape(a, 2);
  if (leading_shape(b, 2) != batch)
    raise<ShapeError>(op, "b", "batch dimensions " + shape_str(batch) + " (a's)", shape_str(b.shape()));
  int64_t m = a.size(trans_a ? -1 : -2), k = a.size(trans_a ? -2 : -1);
  int64_t n = b.size(trans_b ? -2 : -1);
  check_size(op, "b", b, trans_b ? -1 : -2, k);

  Tensor out = Tensor::empty(with_last(batch, {m, n}), a.dtype(), a.device());
  MatrixBatch am = as_matrices(a, a.dim() - 2), bm = as_matrices(b, b.dim() - 2);
  dispatch_float(op, a, [&]<class T>(const auto& where) {
    kernels::GemmArgs<T> args{am.t.data<T>(), bm.t.data<T>(), out.data<T>(), am.batch, m, n, k, trans_a, trans_b,
                              am.ld, bm.ld, n, am.batch_stride, bm.batch_stride, m * n, acc_t<T>(1), acc_t<T>(0)};
    args.allow_tf32 = std::is_same_v<T, float> && allow_tf32();
    ALPHA_KERNEL(gemm)(where, args);
  });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual) {
  return linear_forward("linear", x, weight, bias, kernels::GemmEpilogue::none, false, residual).out;
}

LinearGrads linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, bool need_dx,
                            bool need_dweight, bool need_dbias) {
  constexpr std::string_view op = "linear_backward";
  check_linear_operands(op, x, weight, Tensor());
  check_output_grad(op, dy, x, weight.size(0));
  int64_t out_features = weight.size(0), in_features = weight.size(1);
  MatrixBatch dym = as_matrices(dy, 0);
  LinearGrads grads;
  dispatch_float(op, x, [&]<class T>(const auto& where) {
    if (need_dx) {  // dx = dy · W
      grads.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      ALPHA_KERNEL(gemm)(where, gemm_2d<T>(dym, as_matrices(weight, 0), grads.dx, dym.rows, in_features,
                                           out_features, false, false));
    }
    weight_and_bias_grads<T>(where, dym, x, need_dweight, need_dbias, out_features, in_features, grads.dweight,
                             grads.dbias);
  });
  return grads;
}

void linear_param_grads_into(const Tensor& dy, const Tensor& x, const Tensor& dweight, const Tensor& dbias,
                             bool accumulate) {
  constexpr std::string_view op = "linear_param_grads_into";
  check_backend_float(op, "x", x);
  check_min_dim(op, "x", x, 1);
  if (!dweight.defined() && !dbias.defined())
    raise<ValueError>(op, "dweight", "a defined dweight or dbias (or both)", "neither");
  const DType sum_dtype = accumulation_dtype(x.dtype());
  auto check_sum = [&](std::string_view arg, const Tensor& t, int64_t dims) {
    check_dim(op, arg, t, dims);
    check_same_device(op, arg, t, x);
    check_dtype(op, arg, t, {sum_dtype});
    check_contiguous(op, arg, t);
  };
  if (dweight.defined()) {
    check_sum("dweight", dweight, 2);
    check_size(op, "dweight", dweight, 1, x.size(-1));
  }
  const int64_t out_features = dweight.defined() ? dweight.size(0) : dbias.size(0);
  if (dbias.defined()) {
    check_sum("dbias", dbias, 1);
    check_size(op, "dbias", dbias, 0, out_features);
  }
  check_output_grad(op, dy, x, out_features);
  MatrixBatch dym = as_matrices(dy, 0);
  // The GEMM's bias-gradient epilogue (and column_sum) overwrite their vector: when accumulating, this call's
  // db goes apart (`out` sums, written in the sum's dtype) and is then added.
  const bool db_apart = dbias.defined() && accumulate;
  const Tensor db = db_apart ? Tensor::empty({out_features}, sum_dtype, x.device()) : dbias;
  dispatch_float(op, x, [&]<class T>(const auto& where) {
    using A = acc_t<T>;
    A* db_out = db.defined() ? db.data<A>() : nullptr;
    if (dweight.defined())
      weight_grad_gemm<T, A>(where, dym, x, dweight, A(accumulate ? 1 : 0), db_out);
    else
      ALPHA_KERNEL(column_sum)(where, kernels::ColumnSumArgs<T, A>{dym.t.data<T>(), db_out, dym.rows, out_features,
                                                                   dym.ld});
  });
  if (db_apart) {
    Tensor total = dbias;
    add_(total, db);
  }
}

LinearGelu linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, bool keep_pre) {
  return linear_forward("linear_gelu", x, weight, bias, kernels::GemmEpilogue::gelu, keep_pre);
}

GeluLinearGrads gelu_linear_backward(const Tensor& dy, const Tensor& pre, const Tensor& h, const Tensor& weight,
                                     bool need_dpre, bool need_dpre_bias, bool need_dweight, bool need_dbias) {
  constexpr std::string_view op = "gelu_linear_backward";
  check_linear_operands(op, h, weight, Tensor());
  check_output_grad(op, dy, h, weight.size(0));
  check_same_device(op, "pre", pre, h);
  check_same_dtype(op, "pre", pre, h);
  check_shape(op, "pre", pre, h.shape());
  int64_t out_features = weight.size(0), in_features = weight.size(1);
  MatrixBatch dym = as_matrices(dy, 0);
  GeluLinearGrads grads;
  dispatch_float(op, h, [&]<class T>(const auto& where) {
    if (need_dpre || need_dpre_bias) {  // dpre = (dy · W) ⊙ gelu'(pre), and Σ over its rows
      MatrixBatch prem = as_matrices(pre, 0), wm = as_matrices(weight, 0);
      grads.dpre = Tensor::empty(h.shape(), h.dtype(), h.device());
      auto args = gemm_2d<T>(dym, wm, grads.dpre, dym.rows, in_features, out_features, false, false);
      args.epilogue = kernels::GemmEpilogue::dgelu;
      args.aux = prem.t.data<T>();
      args.ld_aux = prem.ld;
      if (need_dpre_bias) {
        grads.dpre_bias = Tensor::empty({in_features}, h.dtype(), h.device());
        args.bias_grad_of = kernels::GemmBiasGrad::c_columns;
        args.bias_grad = grads.dpre_bias.data<T>();
      }
      ALPHA_KERNEL(gemm)(where, args);
    }
    weight_and_bias_grads<T>(where, dym, h, need_dweight, need_dbias, out_features, in_features, grads.dweight,
                             grads.dbias);
  });
  if (!need_dpre) grads.dpre = Tensor();
  return grads;
}

}  // namespace alpha::ops
