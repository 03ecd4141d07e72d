#include "alpha/ops/layernorm.h"

#include <string>

#include "alpha/kernels/layernorm.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

// Validates x [..., C] and weight [C]; returns C.
int64_t check_layernorm_operands(std::string_view op, const Tensor& x, const Tensor& weight) {
  check_backend_float(op, "x", x);
  check_min_dim(op, "x", x, 1);
  check_same_device(op, "weight", weight, x);
  check_same_dtype(op, "weight", weight, x);
  check_shape(op, "weight", weight, {x.size(-1)});
  return x.size(-1);
}

int64_t row_count(const Tensor& x) { return shape_numel(std::span(x.shape()).first(size_t(x.dim() - 1))); }

// Validates a per-row statistic saved by the forward: [rows] in the accumulation dtype, contiguous.
void check_row_statistic(std::string_view op, std::string_view arg, const Tensor& stat, const Tensor& x) {
  check_same_device(op, arg, stat, x);
  check_dtype(op, arg, stat, {accumulation_dtype(x.dtype())});
  check_shape(op, arg, stat, {row_count(x)});
  check_contiguous(op, arg, stat);
}

}  // namespace

LayerNormOutput layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  constexpr std::string_view op = "layernorm";
  int64_t cols = check_layernorm_operands(op, x, weight);
  if (bias.defined()) {
    check_same_device(op, "bias", bias, x);
    check_same_dtype(op, "bias", bias, x);
    check_shape(op, "bias", bias, {cols});
  }
  if (!(eps > 0)) raise<ValueError>(op, "eps", "a positive value", std::to_string(eps));
  int64_t rows = row_count(x);
  Tensor xc = x.contiguous(), wc = weight.contiguous(), bc = bias.defined() ? bias.contiguous() : Tensor();
  LayerNormOutput out{Tensor::empty(x.shape(), x.dtype(), x.device()),
                      Tensor::empty({rows}, accumulation_dtype(x.dtype()), x.device()),
                      Tensor::empty({rows}, accumulation_dtype(x.dtype()), x.device())};
  dispatch_float(op, x, [&]<class T>(const auto& where) {
    using A = acc_t<T>;
    ALPHA_KERNEL(layernorm)(where, kernels::LayerNormArgs<T>{xc.data<T>(), wc.data<T>(),
                                                             bc.defined() ? bc.data<T>() : nullptr, out.y.data<T>(),
                                                             out.mean.data<A>(), out.rstd.data<A>(), rows, cols, A(eps)});
  });
  return out;
}

LayerNormGrads layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, bool need_dx, bool need_dweight, bool need_dbias,
                                  const Tensor& add_dx_into) {
  constexpr std::string_view op = "layernorm_backward";
  int64_t cols = check_layernorm_operands(op, x, weight);
  check_same_device(op, "dy", dy, x);
  check_same_dtype(op, "dy", dy, x);
  check_shape(op, "dy", dy, x.shape());
  check_row_statistic(op, "mean", mean, x);
  check_row_statistic(op, "rstd", rstd, x);
  Tensor dyc = dy.contiguous(), xc = x.contiguous(), wc = weight.contiguous();
  const bool accumulate = need_dx && add_dx_into.defined();
  if (accumulate) check_in_place(op, "add_dx_into", add_dx_into, x.shape(), x.dtype(), x);
  LayerNormGrads grads;
  if (need_dx) grads.dx = accumulate ? add_dx_into : Tensor::empty(x.shape(), x.dtype(), x.device());
  if (need_dweight) grads.dweight = Tensor::empty({cols}, accumulation_dtype(x.dtype()), x.device());
  if (need_dbias) grads.dbias = Tensor::empty({cols}, accumulation_dtype(x.dtype()), x.device());
  dispatch_float(op, x, [&]<class T>(const auto& where) {
    using A = acc_t<T>;
    auto sums = [](const Tensor& t) { return t.defined() ? t.data<A>() : nullptr; };
    ALPHA_KERNEL(layernorm_backward)
    (where, kernels::LayerNormBackwardArgs<T>{dyc.data<T>(), xc.data<T>(), wc.data<T>(), mean.data<A>(), rstd.data<A>(),
                                              grads.dx.defined() ? grads.dx.data<T>() : nullptr, accumulate,
                                              sums(grads.dweight), sums(grads.dbias), row_count(x), cols});
  });
  return grads;
}

}  // namespace alpha::ops
