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
  check_backend_float(op, "logits", logits);
  check_min_dim(op, "logits", logits, 1);
  const int64_t V = logits.size(-1);
  if (V < 1) raise<ShapeError>(op, "logits", "a non-empty last (class) dimension", shape_str(logits.shape()));
  return {logits.numel() / V, V};
}

struct CheckedTargets {
  Tensor targets;   // contiguous, on the logits' device
  int64_t counted;  // rows whose target is not kIgnoreIndex
};

// targets: i32, shaped like logits without the class dimension or flat [N], each in [0, V) or kIgnoreIndex.
// On a GPU the range check reads the targets on the host (index_check.h: one copy that waits for the stream).
CheckedTargets checked_targets(std::string_view op, const Tensor& targets, const Tensor& logits, Rows shape) {
  check_dtype(op, "targets", targets, {DType::i32});
  check_same_device(op, "targets", targets, logits);
  Shape leading(logits.shape().begin(), logits.shape().end() - 1);
  if (targets.shape() != leading && targets.shape() != Shape{shape.rows})
    raise<ShapeError>(op, "targets", "shape " + shape_str(leading) + " or [" + std::to_string(shape.rows) + "]",
                      shape_str(targets.shape()));
  Tensor tc = targets.contiguous();
  const int64_t counted = check_index_range(op, "targets", tc, shape.vocab, "row", kIgnoreIndex);
  return {tc, counted};
}

void check_device_scalar(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& logits,
                         DType dtype) {
  check_same_device(op, arg, t, logits);
  check_dtype(op, arg, t, {dtype});
  if (t.numel() != 1) raise<ShapeError>(op, arg, "one element", shape_str(t.shape()));
}

}  // namespace

CrossEntropyOutput cross_entropy(const Tensor& logits, const Tensor& targets) {
  Rows shape = checked_logits("cross_entropy", logits);
  CheckedTargets checked = checked_targets("cross_entropy", targets, logits, shape);
  Tensor xc = logits.contiguous();
  CrossEntropyOutput result;
  result.counted_rows = checked.counted;
  result.targets = checked.targets.reshape({shape.rows});
  result.counted = Tensor::empty({}, DType::i64, logits.device());
  Tensor loss;  // the kernel's mean, in the accumulation dtype
  dispatch_float("cross_entropy", logits, [&]<class T>(const auto& where) {
    using A = acc_t<T>;
    result.lse = Tensor::empty({shape.rows}, dtype_of<A>, logits.device());
    loss = Tensor::empty({}, dtype_of<A>, logits.device());
    ALPHA_KERNEL(cross_entropy)(where, kernels::CrossEntropyArgs<T>{xc.data<T>(), checked.targets.data<int32_t>(),
                                                                    result.lse.data<A>(), loss.data<A>(),
                                                                    result.counted.data<int64_t>(), shape.rows,
                                                                    shape.vocab, kIgnoreIndex});
  });
  result.loss = loss;  // f32 for bf16/f16 logits too: a loss to log and to differentiate needs its bits
  return result;
}

Tensor cross_entropy_backward(double dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t counted_rows) {
  constexpr std::string_view op = "cross_entropy_backward";
  Rows shape = checked_logits(op, logits);
  CheckedTargets checked = checked_targets(op, targets, logits, shape);
  check_same_device(op, "lse", lse, logits);
  check_shape(op, "lse", lse, {shape.rows});
  if (counted_rows < 0 || counted_rows > shape.rows)
    raise<ValueError>(op, "counted_rows", "a count in [0, " + std::to_string(shape.rows) + "]",
                      std::to_string(counted_rows));
  Tensor xc = logits.contiguous();
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  dispatch_float(op, logits, [&]<class T>(const auto& where) {
    check_dtype(op, "lse", lse, {dtype_of<acc_t<T>>});
    Tensor lc = lse.contiguous();
    // With every row ignored the loss is the constant 0, so its gradient is 0 as well.
    acc_t<T> scale = counted_rows > 0 ? acc_t<T>(dloss / double(counted_rows)) : acc_t<T>(0);
    ALPHA_KERNEL(cross_entropy_backward)(where, kernels::CrossEntropyBackwardArgs<T>{
        xc.data<T>(), checked.targets.data<int32_t>(), lc.data<acc_t<T>>(), dlogits.data<T>(), scale, shape.rows,
        shape.vocab, kIgnoreIndex, nullptr, nullptr});
  });
  return dlogits;
}

namespace {

// The backward with the loss gradient and the count read on the device, from targets already validated.
Tensor backward_from_device_values(std::string_view op, const Tensor& dloss, const Tensor& logits, Rows shape,
                                   const Tensor& targets, const Tensor& lse, const Tensor& counted_rows) {
  check_same_device(op, "lse", lse, logits);
  check_shape(op, "lse", lse, {shape.rows});
  check_device_scalar(op, "dloss", dloss, logits, accumulation_dtype(logits.dtype()));
  check_device_scalar(op, "counted_rows", counted_rows, logits, DType::i64);
  Tensor xc = logits.contiguous(), dc = dloss.contiguous(), cc = counted_rows.contiguous();
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  dispatch_float(op, logits, [&]<class T>(const auto& where) {
    check_dtype(op, "lse", lse, {dtype_of<acc_t<T>>});
    Tensor lc = lse.contiguous();
    ALPHA_KERNEL(cross_entropy_backward)(where, kernels::CrossEntropyBackwardArgs<T>{
        xc.data<T>(), targets.data<int32_t>(), lc.data<acc_t<T>>(), dlogits.data<T>(), acc_t<T>(1),
        shape.rows, shape.vocab, kIgnoreIndex, cc.data<int64_t>(), dc.data<acc_t<T>>()});
  });
  return dlogits;
}

}  // namespace

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& counted_rows) {
  constexpr std::string_view op = "cross_entropy_backward";
  Rows shape = checked_logits(op, logits);
  CheckedTargets checked = checked_targets(op, targets, logits, shape);
  return backward_from_device_values(op, dloss, logits, shape, checked.targets, lse, counted_rows);
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const CrossEntropyOutput& forward) {
  constexpr std::string_view op = "cross_entropy_backward";
  Rows shape = checked_logits(op, logits);
  check_dtype(op, "forward.targets", forward.targets, {DType::i32});
  check_same_device(op, "forward.targets", forward.targets, logits);
  check_shape(op, "forward.targets", forward.targets, {shape.rows});
  return backward_from_device_values(op, dloss, logits, shape, forward.targets.contiguous(), forward.lse,
                                     forward.counted);
}

}  // namespace alpha::ops
