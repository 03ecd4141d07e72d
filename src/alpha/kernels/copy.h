// Strided copy with dtype conversion within one device: dst[i] = convert(src[i]) for every multi-index i
// of a shape of up to kMaxCopyDims dimensions, each side with its own element strides. It is what
// Tensor::copy_from runs on a GPU for contiguous(), clone(), to(DType) and copies into views, so those
// never go through host memory. Conversions between f32, bf16 and f16 round to nearest even (as the
// host's); a same-dtype copy moves the bits. Source and destination must not overlap (the tensor layer
// stages overlapping copies through a temporary).
// The CPU's counterpart is the host copy inside Tensor::copy_from, which handles every dtype pair.
//
// copy_many: a list of contiguous same-dtype copies (data-parallel training packs and unpacks its gradient
// buckets: ~100 tensors a step) in one launch per kTensorsPerLaunch runs instead of one per tensor.
#pragma once
#include <cstdint>
#include <span>

#include "alpha/core/dtype.h"
#include "alpha/core/stream.h"
#include "alpha/kernels/multi_tensor.h"

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

// One contiguous run of bytes for copy_many; runs must not overlap one another.
struct ContiguousCopy {
  const void* src;
  void* dst;
  int64_t bytes;
};

// One contiguous run of floats for convert_many, rounded to nearest even into dst's bf16 or f16.
struct ContiguousConversion {
  const float* src;
  void* dst;
  int64_t numel;
};

#if ALPHA_WITH_CUDA
namespace cuda {
// Converts every run (Dst: bf16 or f16), a list per launch: the gradients packed into bf16 buckets.
template <class Dst>
void convert_many(std::span<const ContiguousConversion> runs, Stream stream);
// Moves the bits of every run, in words of the widest size (16, 4, 2 or 1 bytes) that every run's
// pointers and length allow.
void copy_many(std::span<const ContiguousCopy> copies, Stream stream);
// Src, Dst: the same type of 1, 2, 4 or 8 bytes (uint8_t, uint16_t, uint32_t, uint64_t: the bits move),
// or two different types among float, bf16 and f16 (converted).
template <class Src, class Dst> void copy(const CopyArgs<Src, Dst>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
