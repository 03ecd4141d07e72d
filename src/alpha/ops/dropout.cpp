#include "alpha/ops/dropout.h"

#include <string>

#include "alpha/kernels/dropout.h"
#include "alpha/ops/check.h"
#include "alpha/tensor/allocator.h"

namespace alpha::ops {

namespace {

// The drop probability as the kernels take it (f32). p must be in [0, 1) also after rounding to f32,
// else every element would be dropped and scaled by an infinite 1 / (1 − p).
float checked_p(std::string_view op, const DropoutConfig& config) {
  if (!(config.p >= 0.0 && config.p < 1.0 && float(config.p) < 1.0f))
    raise<ValueError>(op, "p", "a drop probability in [0, 1)", std::to_string(config.p));
  return float(config.p);
}

// What a kept element is multiplied by, from the exact (f64) p.
double keep_scale(const DropoutConfig& config) { return 1.0 / (1.0 - config.p); }

// y = dropout(x) under `config`: the forward on x, and (same mask) the backward on dy.
Tensor apply_dropout(std::string_view op, std::string_view arg, const Tensor& x, const DropoutConfig& config) {
  check_backend_float(op, arg, x);
  float p = checked_p(op, config);
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_float(op, x, [&]<class T>(const auto& where) {
    ALPHA_KERNEL(dropout)(where, kernels::DropoutArgs<T>{xc.data<T>(), out.data<T>(), p, acc_t<T>(keep_scale(config)),
                                                         config.seed, config.offset, out.numel()});
  });
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, const DropoutConfig& config) { return apply_dropout("dropout", "x", x, config); }

Tensor dropout_backward(const Tensor& dy, const DropoutConfig& config) {
  return apply_dropout("dropout_backward", "dy", dy, config);
}

Tensor dropout_mask(const Shape& shape, const DropoutConfig& config, Device device) {
  constexpr std::string_view op = "dropout_mask";
  float p = checked_p(op, config);
  for (int64_t size : shape)
    if (size < 0) raise<ShapeError>(op, "shape", "non-negative sizes", shape_str(shape));
  require_available(op, device);
  Tensor mask = Tensor::empty(shape, DType::u8, device);
  dispatch_device(op, device, [&](const auto& where) {
    ALPHA_KERNEL(dropout_mask)(where, kernels::DropoutMaskArgs{mask.data<uint8_t>(), p, config.seed, config.offset,
                                                               mask.numel()});
  });
  return mask;
}

Tensor residual_dropout_add(const Tensor& residual, const Tensor& x, const DropoutConfig& config) {
  constexpr std::string_view op = "residual_dropout_add";
  check_backend_float(op, "residual", residual);
  check_same_device(op, "x", x, residual);
  check_same_dtype(op, "x", x, residual);
  check_shape(op, "x", x, residual.shape());
  float p = checked_p(op, config);
  Tensor rc = residual.contiguous(), xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_float(op, x, [&]<class T>(const auto& where) {
    ALPHA_KERNEL(residual_dropout_add)(where, kernels::ResidualDropoutArgs<T>{
        rc.data<T>(), xc.data<T>(), out.data<T>(), p, acc_t<T>(keep_scale(config)), config.seed, config.offset,
        out.numel()});
  });
  return out;
}

}  // namespace alpha::ops
