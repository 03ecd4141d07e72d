#include "alpha/ops/attention.h"

#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "alpha/kernels/attention_materialized.h"
#include "alpha/kernels/flash_attention.h"
#include "alpha/ops/attention_params.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

// The two implementations behind one contract: the materialising one (the CPU reference, and its GPU
// twin) and the flash kernels (GPU only).
enum class Algorithm { materialized, flash };

std::string_view forward_name(Algorithm a) { return a == Algorithm::flash ? "flash_attention" : "attention_materialized"; }
std::string_view backward_name(Algorithm a) {
  return a == Algorithm::flash ? "flash_attention_backward" : "attention_materialized_backward";
}

// The feature dimension must be unit-stride; the other three may have any strides.
void check_unit_last_stride(std::string_view op, std::string_view arg, const Tensor& t) {
  if (t.size(3) > 1 && t.stride(3) != 1)
    raise<LayoutError>(op, arg, "unit stride in the last dimension",
                       "strides " + shape_str(t.strides()) + " for shape " + shape_str(t.shape()));
}

kernels::AttentionStrides strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// The flash kernels' guardrails: a CUDA device and the head dims they are built for (the kernels also
// raise for rows that are not 16-byte aligned); nothing falls back.
void check_flash_inputs(std::string_view op, const Tensor& q, const Tensor& v) {
  if (!q.device().is_cuda())
    raise<DeviceError>(op, "q", "a CUDA tensor (flash attention runs on the GPU; attention_materialized is the CPU's)",
                       q.device().str());
  const bool tensor_cores = q.dtype() == DType::bf16 || q.dtype() == DType::f16;
  for (auto [name, dim] : {std::pair<std::string_view, int64_t>{"q", q.size(3)}, {"v", v.size(3)}}) {
    if (dim > kernels::kFlashMaxHeadDim)
      raise<ShapeError>(op, name, "a head dimension of at most " + std::to_string(kernels::kFlashMaxHeadDim),
                        std::to_string(dim));
    if (tensor_cores && dim % 8 != 0)
      raise<ShapeError>(op, name, "a head dimension that is a multiple of 8 for bf16/f16 (tiles move 16 bytes)",
                        std::to_string(dim));
  }
}

// constant_time is a promise of the bf16/f16 tensor-core flash kernels only (their SASS is audited).
void check_constant_time(std::string_view op, Algorithm algorithm, const Tensor& q, const AttentionConfig& config) {
  if (!config.constant_time) return;
  if (!config.deterministic)
    raise<ValueError>(op, "config.deterministic", "true with constant_time (the atomic-dQ backward is not audited)",
                      "false");
  if (algorithm != Algorithm::flash)
    raise<ValueError>(op, "config.constant_time", "false: only flash_attention has a constant-time mode", "true");
  if (q.dtype() != DType::bf16 && q.dtype() != DType::f16)
    raise<DTypeError>(op, "q", "bf16 or f16 for constant_time (the f32 kernels are not constant-time)",
                      std::string(dtype_name(q.dtype())));
}

// Runs the chosen implementation's kernel on `args`: the reference on the CPU; on a GPU the materialising
// or the flash kernels, with their workspace from the device's caching allocator (released when this
// returns: the next user of the block is queued after the kernels on the same stream).
template <class T, class Where>
void forward_kernel(Algorithm algorithm, [[maybe_unused]] const Where& where,
                    const kernels::AttentionForwardArgs<T>& args, [[maybe_unused]] Device device) {
  if constexpr (std::is_same_v<Where, OnCpu>) {
    (void)algorithm;  // flash inputs were refused on the CPU
    kernels::cpu::attention_reference_forward(args);
  } else {
#if ALPHA_WITH_CUDA
    if (algorithm == Algorithm::flash) {
      kernels::cuda::flash_attention_forward(args, where.stream);
      return;
    }
    Tensor workspace = Tensor::empty({kernels::attention_materialized_workspace(args.params)}, DType::f32, device);
    kernels::cuda::attention_materialized_forward(args, workspace.data<float>(), where.stream);
#endif
  }
}

template <class T, class Where>
void backward_kernel(Algorithm algorithm, [[maybe_unused]] const Where& where,
                     const kernels::AttentionBackwardArgs<T>& args, [[maybe_unused]] Device device) {
  if constexpr (std::is_same_v<Where, OnCpu>) {
    (void)algorithm;
    kernels::cpu::attention_reference_backward(args);
  } else {
#if ALPHA_WITH_CUDA
    const int64_t floats = algorithm == Algorithm::flash
                               ? kernels::cuda::flash_attention_backward_workspace_here(args.params)
                               : kernels::attention_materialized_workspace(args.params);
    Tensor workspace = Tensor::empty({floats}, DType::f32, device);
    if (algorithm == Algorithm::flash) kernels::cuda::flash_attention_backward(args, workspace.data<float>(), where.stream);
    else kernels::cuda::attention_materialized_backward(args, workspace.data<float>(), where.stream);
#endif
  }
}

}  // namespace

void check_attention_inputs(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionConfig& config) {
  check_backend_float(op, "q", q);
  for (auto [name, t] : {std::pair<std::string_view, const Tensor&>{"k", k}, {"v", v}}) {
    check_same_device(op, name, t, q);
    check_same_dtype(op, name, t, q);
  }
  check_dim(op, "q", q, 4);
  check_dim(op, "k", k, 4);
  check_dim(op, "v", v, 4);
  check_size(op, "k", k, 0, q.size(0));
  check_size(op, "k", k, 3, q.size(3));
  check_size(op, "v", v, 0, q.size(0));
  check_size(op, "v", v, 1, k.size(1));
  check_size(op, "v", v, 2, k.size(2));
  if (q.size(3) < 1) raise<ShapeError>(op, "q", "a head dimension of at least 1", shape_str(q.shape()));
  if (k.size(2) < 1 || q.size(2) % k.size(2) != 0)
    raise<ShapeError>(op, "k", "a head count (dimension 2) dividing q's " + std::to_string(q.size(2)),
                      shape_str(k.shape()));
  check_unit_last_stride(op, "q", q);
  check_unit_last_stride(op, "k", k);
  check_unit_last_stride(op, "v", v);
  if (!(config.scale >= 0) || !std::isfinite(config.scale))
    raise<ValueError>(op, "config.scale", "a finite scale >= 0 (0 for 1/sqrt(D))", std::to_string(config.scale));
  if (!(config.softcap >= 0) || !std::isfinite(config.softcap))
    raise<ValueError>(op, "config.softcap", "a finite value >= 0 (0 disables)", std::to_string(config.softcap));
  if (!(config.dropout_p >= 0 && config.dropout_p < 1))
    raise<ValueError>(op, "config.dropout_p", "a probability in [0, 1)", std::to_string(config.dropout_p));
  for (auto [name, window] : {std::pair<std::string_view, int64_t>{"config.window_left", config.window_left},
                               {"config.window_right", config.window_right}})
    if (window < -1)
      raise<ValueError>(op, name, "a window of -1 (unbounded) or >= 0", std::to_string(window));
}

DType attention_statistics_dtype(const Tensor& q) { return accumulation_dtype(q.dtype()); }

void check_attention_statistics(std::string_view op, const Tensor& q, const Tensor& row_max, const Tensor& row_sum) {
  const Shape shape = {q.size(0), q.size(2), q.size(1)};
  for (auto [name, t] : {std::pair<std::string_view, const Tensor&>{"row_max", row_max}, {"row_sum", row_sum}}) {
    check_same_device(op, name, t, q);
    check_dtype(op, name, t, {attention_statistics_dtype(q)});
    check_shape(op, name, t, shape);
  }
}

template <class T>
kernels::AttentionParams<T> attention_kernel_params(const Tensor& q, const Tensor& k, const Tensor& v,
                                                    const AttentionConfig& config) {
  kernels::AttentionParams<T> params;
  params.batch = q.size(0);
  params.q_len = q.size(1);
  params.kv_len = k.size(1);
  params.q_heads = q.size(2);
  params.kv_heads = k.size(2);
  params.head_dim = q.size(3);
  params.value_dim = v.size(3);
  params.q_strides = strides_of(q);
  params.k_strides = strides_of(k);
  params.v_strides = strides_of(v);
  params.scale = acc_t<T>(config.scale != 0 ? config.scale : 1.0 / std::sqrt(double(q.size(3))));
  params.softcap = acc_t<T>(config.softcap);
  params.causal = config.causal;
  params.dropout_p = float(config.dropout_p);
  params.dropout_scale = acc_t<T>(1.0 / (1.0 - config.dropout_p));
  params.dropout_seed = config.dropout_seed;
  params.dropout_offset = config.dropout_offset;
  params.window_left = config.window_left;
  params.window_right = config.window_right;
  params.deterministic = config.deterministic;
  return params;
}

#define ALPHA_INSTANTIATE(T)                                                                                    \
  template kernels::AttentionParams<T> attention_kernel_params<T>(const Tensor&, const Tensor&, const Tensor&, \
                                                                  const AttentionConfig&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

namespace {

AttentionOutput attention_forward(Algorithm algorithm, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionConfig& config) {
  const std::string_view op = forward_name(algorithm);
  check_attention_inputs(op, q, k, v, config);
  if (algorithm == Algorithm::flash) check_flash_inputs(op, q, v);
  check_constant_time(op, algorithm, q, config);
  int64_t batch = q.size(0), q_len = q.size(1), q_heads = q.size(2);
  AttentionOutput result;
  result.out = Tensor::empty({batch, q_len, q_heads, v.size(3)}, q.dtype(), q.device());
  result.row_max = Tensor::empty({batch, q_heads, q_len}, attention_statistics_dtype(q), q.device());
  result.row_sum = Tensor::empty({batch, q_heads, q_len}, attention_statistics_dtype(q), q.device());
  dispatch_float(op, q, [&]<class T>(const auto& where) {
    forward_kernel(algorithm, where, kernels::AttentionForwardArgs<T>{
        q.data<T>(), k.data<T>(), v.data<T>(), result.out.data<T>(), result.row_max.data<acc_t<T>>(),
        result.row_sum.data<acc_t<T>>(), attention_kernel_params<T>(q, k, v, config)}, q.device());
  });
  return result;
}

// The row stride of `into`'s tensor `name`, the gradient of `like` ([B, T, H, D]): same shape, dtype and device,
// each (b, t) row's heads packed as [H, D] and the rows evenly spaced, at least H·D apart.
int64_t gradient_row_stride(std::string_view op, std::string_view name, const Tensor& grad, const Tensor& like) {
  check_same_device(op, name, grad, like);
  check_same_dtype(op, name, grad, like);
  check_shape(op, name, grad, like.shape());
  const int64_t B = like.size(0), T = like.size(1), H = like.size(2), D = like.size(3);
  const int64_t row_stride = T > 1 ? grad.stride(1) : B > 1 ? grad.stride(0) : H * D;
  const bool packed = (D == 1 || grad.stride(3) == 1) && (H == 1 || grad.stride(2) == D) &&
                      (B == 1 || grad.stride(0) == T * row_stride) && row_stride >= H * D;
  if (!packed)
    raise<LayoutError>(op, name,
                       "each (b, t) row's heads packed as [H, D] and the rows evenly spaced, at least H·D = " +
                           std::to_string(H * D) + " apart",
                       "strides " + shape_str(grad.strides()));
  return row_stride;
}

AttentionGrads attention_backward(Algorithm algorithm, const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& row_max, const Tensor& row_sum,
                                  const AttentionConfig& config, const AttentionGrads* into) {
  const std::string_view op = backward_name(algorithm);
  check_attention_inputs(op, q, k, v, config);
  if (algorithm == Algorithm::flash) check_flash_inputs(op, q, v);
  check_constant_time(op, algorithm, q, config);
  Shape out_shape = {q.size(0), q.size(1), q.size(2), v.size(3)};
  for (auto [name, t] : {std::pair<std::string_view, const Tensor&>{"dout", dout}, {"out", out}}) {
    check_same_device(op, name, t, q);
    check_same_dtype(op, name, t, q);
    check_shape(op, name, t, out_shape);
  }
  check_attention_statistics(op, q, row_max, row_sum);
  Tensor dout_c = dout.contiguous(), out_c = out.contiguous();
  Tensor row_max_c = row_max.contiguous(), row_sum_c = row_sum.contiguous();
  AttentionGrads grads;
  int64_t dq_row_stride = 0, dk_row_stride = 0, dv_row_stride = 0;  // 0: contiguous
  if (into) {
    dq_row_stride = gradient_row_stride(op, "into.dq", into->dq, q);
    dk_row_stride = gradient_row_stride(op, "into.dk", into->dk, k);
    dv_row_stride = gradient_row_stride(op, "into.dv", into->dv, v);
    grads = *into;
  } else {
    grads.dq = Tensor::empty(q.shape(), q.dtype(), q.device());
    grads.dk = Tensor::empty(k.shape(), k.dtype(), k.device());
    grads.dv = Tensor::empty(v.shape(), v.dtype(), v.device());
  }
  dispatch_float(op, q, [&]<class T>(const auto& where) {
    const kernels::AttentionBackwardArgs<T> args{.dout = dout_c.data<T>(),
                                                 .q = q.data<T>(),
                                                 .k = k.data<T>(),
                                                 .v = v.data<T>(),
                                                 .out = out_c.data<T>(),
                                                 .row_max = row_max_c.data<acc_t<T>>(),
                                                 .row_sum = row_sum_c.data<acc_t<T>>(),
                                                 .dq = grads.dq.data<T>(),
                                                 .dk = grads.dk.data<T>(),
                                                 .dv = grads.dv.data<T>(),
                                                 .params = attention_kernel_params<T>(q, k, v, config),
                                                 .dq_row_stride = dq_row_stride,
                                                 .dk_row_stride = dk_row_stride,
                                                 .dv_row_stride = dv_row_stride};
    backward_kernel(algorithm, where, args, q.device());
  });
  return grads;
}

}  // namespace

AttentionOutput attention_materialized(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const AttentionConfig& config) {
  return attention_forward(Algorithm::materialized, q, k, v, config);
}

AttentionGrads attention_materialized_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                               const Tensor& out, const Tensor& row_max, const Tensor& row_sum,
                                               const AttentionConfig& config, const AttentionGrads* into) {
  return attention_backward(Algorithm::materialized, dout, q, k, v, out, row_max, row_sum, config, into);
}

std::string flash_attention_kernels(Device device, DType dtype, int64_t head_dim, int64_t value_dim) {
  constexpr std::string_view op = "flash_attention_kernels";
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    raise<DTypeError>(op, "dtype", "f32, bf16 or f16", std::string(dtype_name(dtype)));
  if (!device.is_cuda())
    raise<DeviceError>(op, "device", "a CUDA device (flash attention runs on the GPU)", device.str());
#if ALPHA_WITH_CUDA
  cuda::require_device(op, device);
  cuda::set_device(device.index);
  return kernels::cuda::flash_attention_kernels_here(dtype == DType::f32, head_dim, value_dim);
#else
  (void)head_dim, (void)value_dim;
  raise<DeviceError>(op, "device", "a CPU device (no CUDA backend in this build)", device.str());
#endif
}

AttentionOutput flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionConfig& config) {
  return attention_forward(Algorithm::flash, q, k, v, config);
}

AttentionGrads flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& row_max, const Tensor& row_sum,
                                        const AttentionConfig& config, const AttentionGrads* into) {
  return attention_backward(Algorithm::flash, dout, q, k, v, out, row_max, row_sum, config, into);
}

}  // namespace alpha::ops
