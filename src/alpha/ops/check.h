// Argument validation shared by every tensor op. Each check throws the matching typed error with the
// op, the argument name, what was expected and what came.
#pragma once
#include <initializer_list>
#include <string_view>

#include "alpha/tensor/tensor.h"

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
// The float dtypes the CPU backend computes in: f32, and f64 (the reference precision).
void check_cpu_float(std::string_view op, std::string_view arg, const Tensor& t);

// Kernel launches since the process started (this thread), for the trainer's ops-per-step telemetry.
uint64_t kernel_launches();
void count_kernel_launch();

// Calls fn.template operator()<T>() with T = float or double for a CPU float tensor, raising DeviceError
// for a device whose backend has no kernel for this op. Counts one kernel launch.
template <class Fn>
void dispatch_cpu_float(std::string_view op, const Tensor& t, Fn&& fn) {
  check_cpu_float(op, "input", t);
  count_kernel_launch();
  if (t.dtype() == DType::f64) fn.template operator()<double>();
  else fn.template operator()<float>();
}

}  // namespace alpha::ops
