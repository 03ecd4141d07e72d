// CPU element-wise kernels: OpenMP over contiguous buffers. sum is deterministic (fixed block tree).
#include "alpha/kernels/elementwise.h"

#include "alpha/kernels/cpu/reduce.h"

namespace alpha::kernels::cpu {

template <class T>
void add(const BinaryArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.out[i] = args.a[i] + args.b[i];
}

template <class T>
void mul(const BinaryArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.out[i] = args.a[i] * args.b[i];
}

template <class T>
void scale(const ScaleArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.out[i] = T(args.alpha * args.x[i]);
}

template <class T>
void axpy(const AxpyArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.y[i] = T(args.y[i] + args.alpha * args.x[i]);
}

template <class T>
void sum(const SumArgs<T>& args) {
  *args.out = deterministic_sum<acc_t<T>>(args.n, [&](int64_t i) { return args.x[i]; });
}

template <class T>
void sum_rows(const SumRowsArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) {
    T s = args.rows[i];
    for (int64_t r = 1; r < args.rows_count; ++r) s = T(s + args.rows[r * args.n + i]);
    args.out[i] = T(args.scale * s);
  }
}

#define ALPHA_INSTANTIATE(T)                        \
  template void sum_rows<T>(const SumRowsArgs<T>&); \
  template void add<T>(const BinaryArgs<T>&);       \
  template void mul<T>(const BinaryArgs<T>&);       \
  template void scale<T>(const ScaleArgs<T>&);      \
  template void axpy<T>(const AxpyArgs<T>&);        \
  template void sum<T>(const SumArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
