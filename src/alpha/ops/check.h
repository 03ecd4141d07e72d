// Argument validation shared by every tensor op. Each check throws the matching typed error with the
// op, the argument name, what was expected and what came.
#pragma once
#include <initializer_list>
#include <string_view>
#include <type_traits>

#include "alpha/core/launch.h"
#include "alpha/core/stream.h"
#include "alpha/tensor/tensor.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha::ops {

void check_defined(std::string_view op, std::string_view arg, const Tensor& t);
void check_dtype(std::string_view op, std::string_view arg, const Tensor& t, std::initializer_list<DType> allowed);
void check_same_dtype(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& reference);
void check_same_device(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& reference);
void check_contiguous(std::string_view op, std::string_view arg, const Tensor& t);
void check_dim(std::string_view op, std::string_view arg, const Tensor& t, int64_t dims);
void check_min_dim(std::string_view op, std::string_view arg, const Tensor& t, int64_t dims);
void check_shape(std::string_view op, std::string_view arg, const Tensor& t, const Shape& expected);
void check_size(std::string_view op, std::string_view arg, const Tensor& t, int64_t dim, int64_t expected);
// A tensor an op writes into in place (an optimiser's moments, a gradient dx is added into): on `reference`'s
// device, of `dtype` and `shape`, contiguous.
void check_in_place(std::string_view op, std::string_view arg, const Tensor& t, const Shape& shape, DType dtype,
                    const Tensor& reference);
// The float dtypes the CPU backend computes in: f32, and f64 (the reference precision).
void check_cpu_float(std::string_view op, std::string_view arg, const Tensor& t);

// The float dtypes the tensor's backend computes in: f32 and f64 (the reference precision) on the CPU;
// f32, bf16 and f16 (storage, computing in f32) on a CUDA device.
void check_backend_float(std::string_view op, std::string_view arg, const Tensor& t);

// Calls fn.template operator()<T>() with T = float or double for a CPU float tensor, raising DeviceError
// for a device whose backend has no kernel for this op. Counts one kernel launch.
template <class Fn>
void dispatch_cpu_float(std::string_view op, const Tensor& t, Fn&& fn) {
  check_cpu_float(op, "input", t);
  LaunchScope launch(op, t.device());
  if (t.dtype() == DType::f64) fn.template operator()<double>();
  else fn.template operator()<float>();
}

// Where a kernel runs, handed to an op's launch: the CPU, or a CUDA device (made current) and its stream.
struct OnCpu {};
struct OnCuda {
  Stream stream;
};

// Calls fn.template operator()<T>(where) with the tensor's element type and backend: T = float or double
// with OnCpu, T = float, bf16 or f16 with OnCuda (the tensor's device made current, its default stream, or
// `stream` when one is given). Raises like check_backend_float for other dtypes. Counts one kernel launch.
template <class Fn>
void dispatch_float(std::string_view op, const Tensor& t, Fn&& fn, [[maybe_unused]] Stream stream = {}) {
  check_backend_float(op, "input", t);
  LaunchScope launch(op, t.device());
  if (t.device().is_cpu()) {
    if (t.dtype() == DType::f64) fn.template operator()<double>(OnCpu{});
    else fn.template operator()<float>(OnCpu{});
    return;
  }
#if ALPHA_WITH_CUDA
  OnCuda where{stream.handle ? stream : cuda::default_stream(t.device().index)};
  cuda::set_device(t.device().index);
  switch (t.dtype()) {
    case DType::bf16: fn.template operator()<bf16>(where); break;
    case DType::f16: fn.template operator()<f16>(where); break;
    default: fn.template operator()<float>(where); break;
  }
#endif
}

// Calls fn(where) with OnCpu for the CPU, or OnCuda (the device made current, its default stream) for a
// CUDA device: for kernels with no element type to dispatch on (dropout masks, the grad norm's f64
// scalars). Raises DeviceError for a device this build has no backend for. Counts one kernel launch.
template <class Fn>
void dispatch_device(std::string_view op, Device device, Fn&& fn) {
  LaunchScope launch(op, device);
  if (device.is_cpu()) {
    fn(OnCpu{});
    return;
  }
#if ALPHA_WITH_CUDA
  cuda::require_device(op, device);
  cuda::set_device(device.index);
  fn(OnCuda{cuda::default_stream(device.index)});
#else
  raise<DeviceError>(op, "device", "a CPU device (no CUDA backend in this build)", device.str());
#endif
}

}  // namespace alpha::ops

// A callable (where, args) running the kernel `name` of the backend `where` names:
// kernels::cpu::name(args) for OnCpu, kernels::cuda::name(args, stream) for OnCuda. The CUDA kernel is
// referred to only in builds that have it, so ops need no #if of their own.
#if ALPHA_WITH_CUDA
#define ALPHA_KERNEL(name)                                                                    \
  [](const auto& where, const auto& args) {                                                   \
    if constexpr (std::is_same_v<std::decay_t<decltype(where)>, ::alpha::ops::OnCuda>)        \
      ::alpha::kernels::cuda::name(args, where.stream);                                       \
    else                                                                                      \
      ::alpha::kernels::cpu::name(args);                                                      \
  }
#else
#define ALPHA_KERNEL(name) [](const ::alpha::ops::OnCpu&, const auto& args) { ::alpha::kernels::cpu::name(args); }
#endif
