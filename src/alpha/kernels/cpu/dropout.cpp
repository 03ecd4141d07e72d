// CPU dropout kernels: every element draws its own Philox bits (element-parallel, no state), so the
// thread count and the split of the work never change the mask.
#include "alpha/kernels/dropout.h"

#include "alpha/core/philox.h"

namespace alpha::kernels::cpu {

template <class T>
void dropout(const DropoutArgs<T>& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i)
    args.out[i] = dropout_keep(args.seed, args.offset + uint64_t(i), args.p) ? T(args.scale * args.x[i]) : T(0);
}

template <class T>
void residual_dropout_add(const ResidualDropoutArgs<T>& args) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) {
    A dropped = dropout_keep(args.seed, args.offset + uint64_t(i), args.p) ? args.scale * A(args.x[i]) : A(0);
    args.out[i] = T(A(args.residual[i]) + dropped);
  }
}

void dropout_mask(const DropoutMaskArgs& args) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < args.n; ++i) args.mask[i] = dropout_keep(args.seed, args.offset + uint64_t(i), args.p);
}

#define ALPHA_INSTANTIATE(T)                                      \
  template void dropout<T>(const DropoutArgs<T>&);                \
  template void residual_dropout_add<T>(const ResidualDropoutArgs<T>&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cpu
