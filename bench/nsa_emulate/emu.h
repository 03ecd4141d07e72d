// A CPU emulation of the CUDA subset kernels/cuda/nsa.cu uses, for bench/nsa_emulate.sh: every CUDA thread of a
// block is a std::thread, blocks run one after another; __syncthreads is a barrier of the block, __syncwarp, the
// shuffles and the ballot barriers of the warp (so a barrier not reached by every thread deadlocks); dynamic shared
// memory and the scratch start as NaN; static __shared__ arrays are function statics (one block at a time);
// atomicAdd on an int is a std::atomic_ref add. f32, bf16 and f16 (the host's conversions, round to nearest even
// as cuda_bf16.h and cuda_fp16.h). Not a model of the hardware: memory ordering, occupancy and the device's limits
// are not checked here.
#pragma once
#include <math.h>

#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "alpha/core/dtype.h"
#include "alpha/core/half.h"
#include "alpha/core/stream.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __launch_bounds__(x)
#define __shared__ static
typedef void* cudaStream_t;
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
namespace emu_rt {
struct Dim {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local Dim tid, bid;
inline Dim bdim, gdim;
inline std::barrier<>* block_bar = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
inline uint64_t exch[64][32];
inline std::vector<float> dyn;
inline void sync_block() { block_bar->arrive_and_wait(); }
inline void sync_warp() { warp_bars[tid.x / 32]->arrive_and_wait(); }
template <class V>
V shfl_xor(V v, int o) {
  const int lane = tid.x % 32, w = tid.x / 32;
  uint64_t bitsv = 0;
  std::memcpy(&bitsv, &v, sizeof(V));
  exch[w][lane] = bitsv;
  sync_warp();
  uint64_t r = exch[w][lane ^ o];
  sync_warp();
  V out;
  std::memcpy(&out, &r, sizeof(V));
  return out;
}
inline unsigned ballot(bool pred) {
  const int lane = tid.x % 32, w = tid.x / 32;
  exch[w][lane] = pred;
  sync_warp();
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= unsigned(exch[w][i] != 0) << i;
  sync_warp();
  return r;
}
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, int threads, size_t bytes, const A&... args) {
  if (grid.x == 0 || grid.y == 0) return;
  dyn.assign(bytes / 4 + 1, std::nanf(""));  // uninitialised shared memory reads as NaN
  bdim = {unsigned(threads), 1, 1};
  gdim = {grid.x, grid.y, 1};
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      std::barrier<> bar(threads);
      block_bar = &bar;
      warp_bars.clear();
      for (int w = 0; w < threads / 32; ++w) warp_bars.push_back(std::make_unique<std::barrier<>>(32));
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          tid = {unsigned(t), 0, 0};
          bid = {bx, by, 0};
          kernel(args...);
        });
      for (auto& t : ts) t.join();
    }
}
}  // namespace emu_rt
#define threadIdx emu_rt::tid
#define blockIdx emu_rt::bid
#define blockDim emu_rt::bdim
#define gridDim emu_rt::gdim
#define __syncthreads() emu_rt::sync_block()
#define __syncwarp() emu_rt::sync_warp()
#define __shfl_xor_sync(m, v, o) emu_rt::shfl_xor(v, o)
#define __ballot_sync(m, p) emu_rt::ballot(p)
inline int __popc(unsigned v) { return std::popcount(v); }
inline int atomicAdd(int* address, int value) { return std::atomic_ref<int>(*address).fetch_add(value); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
enum { cudaDevAttrMaxSharedMemoryPerBlockOptin = 0, cudaFuncAttributeMaxDynamicSharedMemorySize = 0 };
inline int cudaGetDevice(int* d) {
  *d = 0;
  return 0;
}
inline int cudaDeviceGetAttribute(int* v, int, int) {
  *v = 227 * 1024;
  return 0;
}
template <class K>
int cudaFuncSetAttribute(K, int, int) {
  return 0;
}
inline int cudaGetLastError() { return 0; }
inline void emu_check(int, const char*, const char*, int) {}
#define ALPHA_CUDA_CHECK(x) (void)(x)
#define ALPHA_CUDA_LAUNCH(kernel, grid, block, stream, ...) emu_rt::launch(kernel, dim3(grid), block, 0, __VA_ARGS__)

namespace alpha::kernels::emu {
template <class T>
struct Elem;
template <>
struct Elem<float> {
  using Bits = float;
  static float load(Bits b) { return b; }
  static Bits store(float f) { return f; }
};
template <>
struct Elem<bf16> {
  using Bits = unsigned short;
  static float load(Bits b) { return float(bf16{std::bit_cast<bf16>(b)}); }
  static Bits store(float f) { return bf16(f).bits; }
};
template <>
struct Elem<f16> {
  using Bits = unsigned short;
  static float load(Bits b) { return f16::to_float(b); }
  static Bits store(float f) { return f16::from_float(f); }
};
template <class T>
using Bits = typename Elem<T>::Bits;
template <class T>
const Bits<T>* bits(const T* p) {
  return reinterpret_cast<const Bits<T>*>(p);
}
template <class T>
Bits<T>* bits(T* p) {
  return reinterpret_cast<Bits<T>*>(p);
}
constexpr unsigned kFullWarp = 0xffffffffu;
inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = v + __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}
inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t) : data_(bytes / 4 + 1, std::nanf("")) {}
  template <class U>
  U* as(size_t byte_offset = 0) const {
    return reinterpret_cast<U*>(reinterpret_cast<char*>(const_cast<float*>(data_.data())) + byte_offset);
  }

 private:
  std::vector<float> data_;
};
}  // namespace alpha::kernels::emu
