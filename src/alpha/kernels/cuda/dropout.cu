// CUDA dropout kernels over contiguous device buffers, taking the CPU backend's argument structs
// (kernels/dropout.h): dropout (forward, and backward on dy), the fused out = residual + dropout(x), and the
// keep mask itself. Element types: f32, and bf16/f16 storage computing in f32.
//
// The mask is the contract's bit for bit: element i is kept iff dropout_keeps(philox_bits(seed, offset + i), p)
// (core/philox.h, the same functions the CPU calls). A thread drawing consecutive elements calls Philox
// once per block of four counters (PhiloxRun), not once per element; the bits are the same.
// Arithmetic uses __fmul_rn/__fadd_rn, never a fused multiply-add, so kept values round as the CPU kernel
// in f32 rounds them (scale·x, then + residual, then to T): the backends agree bit for bit.
// Layout: dropout and residual + dropout are operations of the vectorised element-wise map (common.cuh:
// launch_map, 128-bit loads and stores with a scalar head and tail); the mask kernel stores 16 mask bytes
// at a time in the same head/body/tail arrangement.
#include <algorithm>

#include "alpha/core/philox.h"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/dropout.h"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

// The random bits of a run of counters drawn in increasing order, one Philox call per block of four.
class PhiloxRun {
 public:
  __host__ __device__ explicit PhiloxRun(uint64_t seed) : seed_(seed) {}
  __device__ uint32_t bits(uint64_t index) {
    const uint64_t block = index >> 2;
    if (!valid_ || block != block_) {
      draws_ = philox_block(seed_, block);
      block_ = block;
      valid_ = true;
    }
    switch (index & 3) {  // a switch keeps the four lanes in registers
      case 0: return draws_.c[0];
      case 1: return draws_.c[1];
      case 2: return draws_.c[2];
      default: return draws_.c[3];
    }
  }

 private:
  uint64_t seed_;
  uint64_t block_ = 0;
  bool valid_ = false;
  Philox4x32 draws_{};
};

// residual + (kept ? scale·x : 0), rounded as the CPU kernel in f32 rounds it.
template <bool kResidual>
__device__ float dropped(bool kept, float scale, float x, float residual) {
  const float y = kept ? __fmul_rn(scale, x) : 0.0f;
  return kResidual ? __fadd_rn(residual, y) : y;
}

// The map operation (common.cuh: launch_map, a = x, b = residual) of dropout and of the fused
// residual + dropout: element i draws the counter offset + i.
template <bool kResidual>
struct Dropout {
  static constexpr int kInputs = kResidual ? 2 : 1;
  float p;
  float scale;
  uint64_t offset;
  PhiloxRun draws;
  __device__ float operator()(int64_t i, float x, float residual) {
    return dropped<kResidual>(dropout_keeps(draws.bits(offset + uint64_t(i)), p), scale, x, residual);
  }
};

// p = 0 keeps every element (dropout_keeps is uniform24(bits) >= p), so nothing is drawn: the draws were most of
// the map's time (gpt2-124m's residual adds, 12.6 M bf16 elements: 30 µs a call against an add's 17 µs, H200).
template <bool kResidual>
struct KeepEvery {
  static constexpr int kInputs = kResidual ? 2 : 1;
  float scale;
  __device__ float operator()(int64_t, float x, float residual) { return dropped<kResidual>(true, scale, x, residual); }
};

// The mask: one byte per element; the body stores 16 bytes per thread.
__global__ void mask_kernel(uint8_t* mask, float p, uint64_t seed, uint64_t offset, int64_t n, int64_t head) {
  constexpr int W = kVectorBytes;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  auto scalar = [&](int64_t i) { mask[i] = dropout_keeps(philox_bits(seed, offset + uint64_t(i)), p) ? 1 : 0; };
  const int64_t vectors = (n - head) / W;
  const int64_t tail = head + vectors * W;
  if (first < head) scalar(first);
  if (first < n - tail) scalar(tail + first);
  PhiloxRun draws(seed);
  for (int64_t v = first; v < vectors; v += stride) {
    const int64_t i = head + v * W;
    unsigned words[4] = {0u, 0u, 0u, 0u};
    for (int k = 0; k < W; ++k)
      if (dropout_keeps(draws.bits(offset + uint64_t(i + k)), p)) words[k / 4] |= 1u << (8 * (k % 4));
    *reinterpret_cast<uint4*>(mask + i) = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// Elements before the first 16-byte boundary of a buffer of n elements of `size` bytes at offset `at`.
int64_t head_of(int64_t at, int64_t n, int64_t size) {
  return std::min<int64_t>(n, (kVectorBytes - at) % kVectorBytes / size);
}

// Blocks for `work` threads' worth of vectors, with at least one thread per head and tail element.
unsigned blocks_for(int64_t work, int64_t lanes) {
  work = std::max<int64_t>(work, lanes);
  return unsigned(std::min((work + kMapThreads - 1) / kMapThreads, kMaxMapBlocks));
}

}  // namespace

template <class T>
void dropout(const DropoutArgs<T>& args, Stream stream) {
  if (args.p == 0) return launch_map<T>(args.x, nullptr, args.out, args.n, KeepEvery<false>{float(args.scale)}, stream);
  launch_map<T>(args.x, nullptr, args.out, args.n,
                Dropout<false>{args.p, float(args.scale), args.offset, PhiloxRun(args.seed)}, stream);
}

template <class T>
void residual_dropout_add(const ResidualDropoutArgs<T>& args, Stream stream) {
  if (args.p == 0)
    return launch_map<T>(args.x, args.residual, args.out, args.n, KeepEvery<true>{float(args.scale)}, stream);
  launch_map<T>(args.x, args.residual, args.out, args.n,
                Dropout<true>{args.p, float(args.scale), args.offset, PhiloxRun(args.seed)}, stream);
}

void dropout_mask(const DropoutMaskArgs& args, Stream stream) {
  if (args.n == 0) return;
  const int64_t head = head_of(misalignment(args.mask), args.n, 1);
  ALPHA_CUDA_LAUNCH(mask_kernel, blocks_for((args.n - head) / kVectorBytes, kVectorBytes), kMapThreads,
                    alpha::cuda::stream_handle(stream), args.mask, args.p, args.seed, args.offset, args.n, head);
}

#define ALPHA_INSTANTIATE(T)                                                     \
  template void dropout<T>(const DropoutArgs<T>&, Stream);                       \
  template void residual_dropout_add<T>(const ResidualDropoutArgs<T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
