// Warpgroup-level tensor-core building blocks for Hopper (sm_90a): wgmma.mma_async products with f32
// accumulators in registers, their shared-memory operand descriptors, and the 128-byte swizzled tile layout
// they read. What mma.cuh is to mma.sync, this is to wgmma; the forward attention kernel for sm_90a
// (flash_attention_tma_forward.cuh) and the backward kernels (flash_attention_wgmma_backward.cu) are written in it.
//
// Why wgmma: mma.sync feeds the tensor cores from registers, so every operand passes through ldmatrix and
// the register file, and a warp's 16 rows bound the reuse of each loaded fragment. wgmma lets a warpgroup
// (4 consecutive warps, 64 rows) read B, and optionally A, straight from shared memory, at the tensor
// cores' full Hopper rate, asynchronously (issue, then wait for the group).
//
// Register layouts (PTX ISA, "Register fragments and shared memory matrix layouts" for wgmma .m64nNk16):
// warp w of the warpgroup owns rows [16w, 16w + 16); within the warp the accumulator of columns
// [8j, 8j + 8) is exactly mma.m16n8's C fragment (mma.cuh), and an A operand from registers is exactly
// mma.m16n8k16's A fragment. So the FragC / FragA helpers of mma.cuh (to_a_fragments: P = exp(S − m) from
// the registers that computed S) carry over unchanged.
//
// Shared layout (the canonical 128-byte swizzle, CUTLASS's Swizzle<3,4,3>): a tile's columns are cut into
// blocks of 64 16-bit elements (128 bytes); each block stores its rows back to back, 128 bytes apart, and
// the 16-byte chunk c of row r at chunk position c ^ (r % 8) within the row. Tiles start 1024-byte aligned
// (the swizzle's period), so the hardware's address-based swizzle and ours agree.
#pragma once
#include <cstdint>
#include <type_traits>

#include "alpha/kernels/cuda/mma.cuh"

namespace alpha::kernels::cuda::wgmma {

using mma::FragA;
using mma::FragC;

// A shared-memory matrix descriptor: start address, leading and stride byte offsets (each in 16-byte units),
// 128-byte swizzle (mode 1 in bits 62–63), base offset 0 (tiles are 1024-byte aligned).
__device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((address >> 4) & 0x3FFF) | uint64_t((leading_bytes >> 4) & 0x3FFF) << 16 |
         uint64_t((stride_bytes >> 4) & 0x3FFF) << 32 | uint64_t(1) << 62;
}

// A shared tile of kRows × kCols 16-bit elements in the swizzled layout above.
template <int kRows, int kCols>
struct SwizzledTile {
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "whole 64-column blocks of whole 8-row swizzle periods");
  static constexpr int kTileRows = kRows;
  static constexpr int kBlockBytes = kRows * 128;
  static constexpr int kBytes = kBlockBytes * (kCols / 64);
  static constexpr int kElements = kBytes / 2;
  uint16_t* data;

  // Byte offset of the 16-byte chunk `chunk` (columns [8·chunk, 8·chunk + 8)) of row `row`.
  __device__ static uint32_t chunk_offset(int row, int chunk) {
    return uint32_t(chunk / 8 * kBlockBytes + row * 128 + ((chunk % 8) ^ (row % 8)) * 16);
  }
  __device__ SwizzledTile next(int index) const { return {data + index * kElements}; }
  // Columns [64·block, 64·block + 64) as a tile of their own (an operand of N = 64 out of a wider tile).
  __device__ SwizzledTile<kRows, 64> column_block(int block) const { return {data + block * kBlockBytes / 2}; }

  // The tile as a K-major operand (rows are M or N, columns are K): rows from row0 (a multiple of 8), k-step
  // `k` (columns [16k, 16k + 16)). Within a 64-column block a k-step is a 32-byte step of the start address
  // (the hardware swizzles the addresses it forms); 8-row groups are 1024 bytes apart (the stride offset);
  // the leading offset is unused by swizzled K-major layouts.
  __device__ uint64_t k_major(int row0, int k) const {
    const uint32_t base = mma::shared_address(data);
    return descriptor(base + uint32_t(16 * k / 64 * kBlockBytes + row0 * 128 + 16 * k % 64 * 2), 16, 1024);
  }
  // The tile as an MN-major operand (rows are K, columns are M or N: B = tile, as V for P·V, or A = tileᵀ, as
  // dS for dS·K from a dSᵀ tile), k-step `k` (rows [16k, 16k + 16)): 64-column blocks kBlockBytes apart (the
  // leading offset), 8-row groups 1024 bytes apart.
  __device__ uint64_t mn_major(int k) const {
    const uint32_t base = mma::shared_address(data);
    return descriptor(base + uint32_t(16 * k * 128), kBlockBytes, 1024);
  }
};

// Makes this thread's generic-proxy writes to shared memory (cp.async, st.shared) visible to the async
// proxy (wgmma's operand reads); a barrier after it publishes them to the block.
__device__ __forceinline__ void fence_async_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Orders register writes before the wgmma that reads them (accumulators, A fragments): once before each
// batch of wgmma after the registers were touched by ordinary instructions.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the batch of wgmma issued since the last commit into one group.
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most kPending committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving reads of the accumulators above the wait that completes them: an empty asm
// that claims to rewrite each register.
template <int kN>
__device__ __forceinline__ void hold(FragC (&c)[kN]) {
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int x = 0; x < 4; ++x) asm volatile("" : "+f"(c[n].x[x])::"memory");
}

// The operand lists of the accumulators: 8 columns (one FragC, 4 registers) at a time.
#define ALPHA_WGMMA_C(n) "+f"(c[n].x[0]), "+f"(c[n].x[1]), "+f"(c[n].x[2]), "+f"(c[n].x[3])
#define ALPHA_WGMMA_C64                                                                                       \
  ALPHA_WGMMA_C(0), ALPHA_WGMMA_C(1), ALPHA_WGMMA_C(2), ALPHA_WGMMA_C(3), ALPHA_WGMMA_C(4), ALPHA_WGMMA_C(5), \
      ALPHA_WGMMA_C(6), ALPHA_WGMMA_C(7)
#define ALPHA_WGMMA_C96 ALPHA_WGMMA_C64, ALPHA_WGMMA_C(8), ALPHA_WGMMA_C(9), ALPHA_WGMMA_C(10), ALPHA_WGMMA_C(11)
#define ALPHA_WGMMA_C128                                                                                        \
  ALPHA_WGMMA_C64, ALPHA_WGMMA_C(8), ALPHA_WGMMA_C(9), ALPHA_WGMMA_C(10), ALPHA_WGMMA_C(11), ALPHA_WGMMA_C(12), \
      ALPHA_WGMMA_C(13), ALPHA_WGMMA_C(14), ALPHA_WGMMA_C(15)
#define ALPHA_WGMMA_D32                                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define ALPHA_WGMMA_D48                                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47}"
#define ALPHA_WGMMA_D64                                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// D (+)= A·B with A and B from shared memory, both K-major (`major` "0, 0") or both MN-major ("1, 1").
// `accumulate` 0 overwrites the accumulators.
#define ALPHA_WGMMA_SS(shape, types, dregs, a, b, scale, major, ...)                                                   \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" scale ", 0;\n wgmma.mma_async.sync.aligned." shape ".f32." types \
               " " dregs ", %" a ", %" b ", p, 1, 1, " major ";\n}\n"                                                  \
               : __VA_ARGS__                                                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
// D += A·B with A from registers (an mma.m16n8k16 A fragment per warp) and B from shared memory, MN-major
// (transposed: the last 1).
#define ALPHA_WGMMA_RS(shape, types, dregs, aregs, b, one, accs)                                                     \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" one ", 0;\n wgmma.mma_async.sync.aligned." shape ".f32." types \
               " " dregs ", " aregs ", %" b ", p, 1, 1, 1;\n}\n"                                                     \
               : accs                                                                                                \
               : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "l"(desc_b), "r"(1))

// c (kN/8 fragments per warp: the warpgroup's 64 × kN block) = (accumulate ? c : 0) + A·B, one 16-deep
// k-step, A (64 rows) and B (kN columns) in shared memory: both K-major (kMnMajor false: c += A·Bᵀ with the
// tiles' rows M and N, as Q·Kᵀ) or both MN-major (true: rows K, as dS·K with dSᵀ and K stored row by row).
// kN is 64 or 128.
template <class T, int kN, bool kMnMajor = false>
__device__ __forceinline__ void product_ss(FragC (&c)[kN / 8], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, f16>, "wgmma takes bf16 or f16 here");
  static_assert(kN == 64 || kN == 96 || kN == 128, "instantiated for N = 64, 96 and 128");
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
#define ALPHA_WGMMA_SS_LAYOUTS(shape, types, dregs, a, b, scale, ...)      \
  if constexpr (kMnMajor)                                                  \
    ALPHA_WGMMA_SS(shape, types, dregs, a, b, scale, "1, 1", __VA_ARGS__); \
  else                                                                     \
    ALPHA_WGMMA_SS(shape, types, dregs, a, b, scale, "0, 0", __VA_ARGS__);
  if constexpr (kN == 64 && kBf16) {
    ALPHA_WGMMA_SS_LAYOUTS("m64n64k16", "bf16.bf16", ALPHA_WGMMA_D32, "32", "33", "34", ALPHA_WGMMA_C64)
  }
  if constexpr (kN == 64 && !kBf16) {
    ALPHA_WGMMA_SS_LAYOUTS("m64n64k16", "f16.f16", ALPHA_WGMMA_D32, "32", "33", "34", ALPHA_WGMMA_C64)
  }
  if constexpr (kN == 96 && kBf16) {
    ALPHA_WGMMA_SS_LAYOUTS("m64n96k16", "bf16.bf16", ALPHA_WGMMA_D48, "48", "49", "50", ALPHA_WGMMA_C96)
  }
  if constexpr (kN == 96 && !kBf16) {
    ALPHA_WGMMA_SS_LAYOUTS("m64n96k16", "f16.f16", ALPHA_WGMMA_D48, "48", "49", "50", ALPHA_WGMMA_C96)
  }
  if constexpr (kN == 128 && kBf16) {
    ALPHA_WGMMA_SS_LAYOUTS("m64n128k16", "bf16.bf16", ALPHA_WGMMA_D64, "64", "65", "66", ALPHA_WGMMA_C128)
  }
  if constexpr (kN == 128 && !kBf16) {
    ALPHA_WGMMA_SS_LAYOUTS("m64n128k16", "f16.f16", ALPHA_WGMMA_D64, "64", "65", "66", ALPHA_WGMMA_C128)
  }
#undef ALPHA_WGMMA_SS_LAYOUTS
}

// c += A·B, one 16-deep k-step: A from this warp's registers (its 16 rows), B MN-major in shared memory.
template <class T, int kN>
__device__ __forceinline__ void product_rs(FragC (&c)[kN / 8], const FragA& a, uint64_t desc_b) {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, f16>, "wgmma takes bf16 or f16 here");
  static_assert(kN == 64 || kN == 128, "instantiated for N = 64 and 128");
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  if constexpr (kN == 64 && kBf16)
    ALPHA_WGMMA_RS("m64n64k16", "bf16.bf16", ALPHA_WGMMA_D32, "{%32, %33, %34, %35}", "36", "37", ALPHA_WGMMA_C64);
  if constexpr (kN == 64 && !kBf16)
    ALPHA_WGMMA_RS("m64n64k16", "f16.f16", ALPHA_WGMMA_D32, "{%32, %33, %34, %35}", "36", "37", ALPHA_WGMMA_C64);
  if constexpr (kN == 128 && kBf16)
    ALPHA_WGMMA_RS("m64n128k16", "bf16.bf16", ALPHA_WGMMA_D64, "{%64, %65, %66, %67}", "68", "69", ALPHA_WGMMA_C128);
  if constexpr (kN == 128 && !kBf16)
    ALPHA_WGMMA_RS("m64n128k16", "f16.f16", ALPHA_WGMMA_D64, "{%64, %65, %66, %67}", "68", "69", ALPHA_WGMMA_C128);
}

#undef ALPHA_WGMMA_C
#undef ALPHA_WGMMA_C64
#undef ALPHA_WGMMA_C96
#undef ALPHA_WGMMA_C128
#undef ALPHA_WGMMA_D32
#undef ALPHA_WGMMA_D48
#undef ALPHA_WGMMA_D64
#undef ALPHA_WGMMA_SS
#undef ALPHA_WGMMA_RS

}  // namespace alpha::kernels::cuda::wgmma
