#include "alpha/ops/cross_entropy.h"

#include "alpha/kernels/cross_entropy.h"
#include "alpha/ops/check.h"
#include "alpha/ops/index_check.h"

namespace alpha::ops {

namespace {

// logits [..., V] viewed as rows [N, V].
struct Rows {
  int64_t rows;
  int64_t vocab;
};

Rows checked_logits(std::string_view op, const Tensor& logits) {
  check_cpu_float(op, "logits", logits);
  check_min_dim(op, "logits", logits, 1);
  const int64_t V = logits.size(-1);
  if (V < 1) raise<ShapeError>(op, "logits", "a non-empty last (class) dimension", shape_str(logits.shape()));
  return {logits.numel() / V, V};
}

// targets: i32, shaped like logits without the class dimension or flat [N], each in [0, V) or kIgnoreIndex.
Tensor checked_targets(std::string_view op, const Tensor& targets, const Tensor& logits, Rows shape) {
  check_dtype(op, "targets", targets, {DType::i32});
  check_same_device(op, "targets", targets, logits);
  Shape leading(logits.shape().begin(), logits.shape().end() - 1);
  if (targets.shape() != leading && targets.shape() != Shape{shape.rows})
    raise<ShapeError>(op, "targets", "shape " + shape_str(leading) + " or [" + std::to_string(shape.rows) + "]",
                      shape_str(targets.shape()));
  Tensor tc = targets.contiguous();
  check_index_range(op, "targets", tc, shape.vocab, "row", kIgnoreIndex);
  return tc;
}

}  // namespace

CrossEntropyOutput cross_entropy(const Tensor& logits, const Tensor& targets) {
  Rows shape = checked_logits("cross_entropy", logits);
  Tensor tc = checked_targets("cross_entropy", targets, logits, shape);
  Tensor xc = logits.contiguous();
  CrossEntropyOutput result;
  result.loss = Tensor::empty({}, logits.dtype(), logits.device());
  dispatch_cpu_float("cross_entropy", logits, [&]<class T>() {
    result.lse = Tensor::empty({shape.rows}, dtype_of<acc_t<T>>, logits.device());
    acc_t<T> loss = 0;
    kernels::cpu::cross_entropy(kernels::CrossEntropyArgs<T>{xc.data<T>(), tc.data<int32_t>(),
                                                             result.lse.data<acc_t<T>>(), &loss,
                                                             &result.counted_rows, shape.rows, shape.vocab,
                                                             kIgnoreIndex});
    *result.loss.data<T>() = T(loss);
  });
  return result;
}

Tensor cross_entropy_backward(double dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t counted_rows) {
  constexpr std::string_view op = "cross_entropy_backward";
  Rows shape = checked_logits(op, logits);
  Tensor tc = checked_targets(op, targets, logits, shape);
  check_same_device(op, "lse", lse, logits);
  check_shape(op, "lse", lse, {shape.rows});
  if (counted_rows < 0 || counted_rows > shape.rows)
    raise<ValueError>(op, "counted_rows", "a count in [0, " + std::to_string(shape.rows) + "]",
                      std::to_string(counted_rows));
  Tensor xc = logits.contiguous();
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  dispatch_cpu_float(op, logits, [&]<class T>() {
    check_dtype(op, "lse", lse, {dtype_of<acc_t<T>>});
    Tensor lc = lse.contiguous();
    // With every row ignored the loss is the constant 0, so its gradient is 0 as well.
    acc_t<T> scale = counted_rows > 0 ? acc_t<T>(dloss / double(counted_rows)) : acc_t<T>(0);
    kernels::cpu::cross_entropy_backward(kernels::CrossEntropyBackwardArgs<T>{
        xc.data<T>(), tc.data<int32_t>(), lc.data<acc_t<T>>(), dlogits.data<T>(), scale, shape.rows, shape.vocab,
        kIgnoreIndex});
  });
  return dlogits;
}

}  // namespace alpha::ops
