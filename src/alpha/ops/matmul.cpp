#include "alpha/ops/matmul.h"

#include <optional>

#include "alpha/kernels/matmul.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

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

// One GEMM of plain (non-batched) matrices into a contiguous output.
template <class T>
void gemm_2d(const MatrixBatch& a, const MatrixBatch& b, Tensor& c, int64_t m, int64_t n, int64_t k, bool trans_a,
             bool trans_b, double beta) {
  kernels::cpu::gemm(kernels::GemmArgs<T>{a.t.data<T>(), b.t.data<T>(), c.data<T>(), 1, m, n, k, trans_a, trans_b,
                                          a.ld, b.ld, n, 0, 0, 0, acc_t<T>(1), acc_t<T>(beta)});
}

// Validates x [..., in] and weight [out, in] for linear and linear_backward.
void check_linear_operands(std::string_view op, const Tensor& x, const Tensor& weight) {
  check_cpu_float(op, "x", x);
  check_min_dim(op, "x", x, 1);
  check_same_device(op, "weight", weight, x);
  check_same_dtype(op, "weight", weight, x);
  check_dim(op, "weight", weight, 2);
  check_size(op, "weight", weight, 1, x.size(-1));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  constexpr std::string_view op = "matmul";
  check_cpu_float(op, "a", a);
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
  dispatch_cpu_float(op, a, [&]<class T>() {
    kernels::cpu::gemm(kernels::GemmArgs<T>{am.t.data<T>(), bm.t.data<T>(), out.data<T>(), am.batch, m, n, k,
                                            trans_a, trans_b, am.ld, bm.ld, n, am.batch_stride, bm.batch_stride,
                                            m * n, acc_t<T>(1), acc_t<T>(0)});
  });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  constexpr std::string_view op = "linear";
  check_linear_operands(op, x, weight);
  int64_t out_features = weight.size(0), in_features = weight.size(1);
  if (bias.defined()) {
    check_same_device(op, "bias", bias, x);
    check_same_dtype(op, "bias", bias, x);
    check_shape(op, "bias", bias, {out_features});
  }
  MatrixBatch xm = as_matrices(x, 0), wm = as_matrices(weight, 0);
  Tensor y = Tensor::empty(with_last(leading_shape(x, 1), {out_features}), x.dtype(), x.device());
  dispatch_cpu_float(op, x, [&]<class T>() {
    // y starts as bias rows and the GEMM accumulates x·Wᵀ onto them (beta = 1): no separate bias pass.
    if (bias.defined()) {
      Tensor bc = bias.contiguous();
      kernels::cpu::broadcast_rows(kernels::BroadcastRowsArgs<T>{bc.data<T>(), y.data<T>(), xm.rows, out_features});
    }
    gemm_2d<T>(xm, wm, y, xm.rows, out_features, in_features, false, true, bias.defined() ? 1.0 : 0.0);
  });
  return y;
}

LinearGrads linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, bool need_dx,
                            bool need_dweight, bool need_dbias) {
  constexpr std::string_view op = "linear_backward";
  check_linear_operands(op, x, weight);
  int64_t out_features = weight.size(0), in_features = weight.size(1);
  check_same_device(op, "dy", dy, x);
  check_same_dtype(op, "dy", dy, x);
  check_shape(op, "dy", dy, with_last(leading_shape(x, 1), {out_features}));

  MatrixBatch dym = as_matrices(dy, 0);
  LinearGrads grads;
  dispatch_cpu_float(op, x, [&]<class T>() {
    if (need_dx) {  // dx = dy · W
      grads.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      gemm_2d<T>(dym, as_matrices(weight, 0), grads.dx, dym.rows, in_features, out_features, false, false, 0.0);
    }
    if (need_dweight) {  // dW = dyᵀ · x
      grads.dweight = Tensor::empty(weight.shape(), x.dtype(), x.device());
      gemm_2d<T>(dym, as_matrices(x, 0), grads.dweight, out_features, in_features, dym.rows, true, false, 0.0);
    }
    if (need_dbias) {  // db = Σ over rows of dy
      grads.dbias = Tensor::empty({out_features}, x.dtype(), x.device());
      kernels::cpu::column_sum(
          kernels::ColumnSumArgs<T>{dym.t.data<T>(), grads.dbias.data<T>(), dym.rows, out_features, dym.ld});
    }
  });
  return grads;
}

}  // namespace alpha::ops
