// Strided copy with dtype conversion within one device: dst[i] = convert(src[i]) for every multi-index i
// of a shape of up to kMaxCopyDims dimensions, each side with its own element strides. It is what
// Tensor::copy_from runs on a GPU for contiguous(), clone(), to(DType) and copies into views, so those
// never go through host memory. Conversions between f32, bf16 and f16 round to nearest even (as the
// host's); a same-dtype copy moves the bits. Source and destination must not overlap (the tensor layer
// stages overlapping copies through a temporary).
// The CPU's counterpart is the host copy inside Tensor::copy_from, which handles every dtype pair.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"
#include "alpha/core/stream.h"

namespace alpha::kernels {

inline constexpr int kMaxCopyDims = 8;

struct CopyLayout {
  int dims = 0;                      // 0: one element
  int64_t shape[kMaxCopyDims] = {};
  int64_t src_strides[kMaxCopyDims] = {};  // in elements
  int64_t dst_strides[kMaxCopyDims] = {};
  int64_t numel = 1;
};

template <class Src, class Dst>
struct CopyArgs {
  const Src* src;  // the first element of the source view
  Dst* dst;        // the first element of the destination view
  CopyLayout layout;
};

#if ALPHA_WITH_CUDA
namespace cuda {
// Src, Dst: the same type of 1, 2, 4 or 8 bytes (uint8_t, uint16_t, uint32_t, uint64_t: the bits move),
// or two different types among float, bf16 and f16 (converted).
template <class Src, class Dst> void copy(const CopyArgs<Src, Dst>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
