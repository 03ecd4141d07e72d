// Dropout with counter-based masks: y = x · keep / (1 − p), the mask regenerated from Philox on demand
// (forward and backward draw it again, it is never stored), and the fused out = residual + dropout(x)
// used after attention and MLP blocks, which saves one full read and write of the activation.
//
// Mask contract (a CUDA kernel reproduces it bit for bit): element i of a buffer, i being its flat
// row-major index in [0, n), is kept iff alpha::dropout_keep(seed, offset + i, p) (core/philox.h),
// i.e. iff the 24-bit Philox4x32-10 uniform of counter offset + i under key seed is >= p, with p given
// as f32. A kept element is multiplied by `scale` (1 / (1 − p), computed by the caller in acc_t<T>),
// a dropped one becomes exactly 0. Consequently the mask of the elements [k, n) of a tensor equals
// the mask of a buffer of n − k elements drawn at offset + k.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"
#include "alpha/core/stream.h"

namespace alpha::kernels {

template <class T>
struct DropoutArgs {
  const T* x;       // (n); for the backward, dy
  T* out;           // (n), may alias x
  float p;          // drop probability in [0, 1)
  acc_t<T> scale;   // 1 / (1 − p)
  uint64_t seed;
  uint64_t offset;  // Philox counter of element 0
  int64_t n;
};

template <class T>
struct ResidualDropoutArgs {
  const T* residual;  // (n)
  const T* x;         // (n)
  T* out;             // (n) = residual + dropout(x), may alias either input
  float p;
  acc_t<T> scale;
  uint64_t seed;
  uint64_t offset;
  int64_t n;
};

struct DropoutMaskArgs {
  uint8_t* mask;  // (n), 1 = kept, 0 = dropped
  float p;
  uint64_t seed;
  uint64_t offset;
  int64_t n;
};

namespace cpu {
template <class T> void dropout(const DropoutArgs<T>& args);
template <class T> void residual_dropout_add(const ResidualDropoutArgs<T>& args);
void dropout_mask(const DropoutMaskArgs& args);
}  // namespace cpu

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream` (Stream{}: the current device's default stream). T = float, bf16 or
// f16, computing in f32 and rounding once to T. The mask is the contract's, bit for bit, and the values
// round exactly as the CPU kernels in f32 do (one f32 rounding for scale·x, one for the residual sum, then
// one to T): every output equals the CPU kernel's in f32 rounded to T.
namespace cuda {
template <class T> void dropout(const DropoutArgs<T>& args, Stream stream);
template <class T> void residual_dropout_add(const ResidualDropoutArgs<T>& args, Stream stream);
void dropout_mask(const DropoutMaskArgs& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
