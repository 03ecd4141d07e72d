// Device-side building blocks shared by the CUDA kernels: how each element type is held and converted to
// and from f32 (round to nearest even), 128-bit vector loads and stores of f32 or 16-bit elements, warp
// and block reductions whose order is fixed (a butterfly within a warp, then warp 0 over the warps' results),
// so every reduction built on them gives the same bits on every run, the vectorised element-wise map
// (launch_map), stream-ordered scratch memory (StreamScratch) and the launch of a kernel with a large dynamic
// shared-memory block (launch_with_shared).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "alpha/core/dtype.h"
#include "alpha/core/error.h"
#include "alpha/core/stream.h"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

// How a T is held on the device and converted to and from f32 (round to nearest even).
template <class T> struct Elem;
template <> struct Elem<float> {
  using Bits = float;
  static __device__ float load(Bits b) { return b; }
  static __device__ Bits store(float f) { return f; }
};
template <> struct Elem<bf16> {
  using Bits = unsigned short;
  static __device__ float load(Bits b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
  static __device__ Bits store(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};
template <> struct Elem<f16> {
  using Bits = unsigned short;
  static __device__ float load(Bits b) { return __half2float(__ushort_as_half(b)); }
  static __device__ Bits store(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
template <class T> using Bits = typename Elem<T>::Bits;
static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2, "bf16/f16 are one 16-bit word");

// bf16 and f16 are standard-layout structs holding one uint16_t, so a pointer to one is a pointer to its bits.
template <class T> __host__ __device__ const Bits<T>* bits(const T* p) { return reinterpret_cast<const Bits<T>*>(p); }
template <class T> __host__ __device__ Bits<T>* bits(T* p) { return reinterpret_cast<Bits<T>*>(p); }

constexpr int kVectorBytes = 16;
template <class T> inline constexpr int kLanes = kVectorBytes / int(sizeof(T));

// A grid's largest y (and z) extent; x goes to 2³¹ − 1.
inline constexpr int64_t kMaxGridY = 65535;

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// Transcendental functions, each one special-function-unit instruction with subnormals flushed to zero
// (.ftz). Besides being fast, they make the attention kernels constant-time (kernels/flash_attention.h):
// IEEE division, tanhf and log2f compile to value-dependent slow paths (FCHK and a CALL into a subroutine
// for some operands), these to a fixed instruction sequence for every input.
// 2^x: ex2.approx.ftz, relative error ~2⁻²².
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// log2 x: lg2.approx.ftz, absolute error ~2⁻²² (−inf for 0).
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// 1/x: rcp.approx.ftz, within 1 ulp (inf for 0, 0 for inf).
__device__ __forceinline__ float fast_reciprocal(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// tanh x = 1 − 2/(e^{2x} + 1): absolute error ~2⁻²², exactly ±1 where e^{2x} overflows or vanishes.
__device__ __forceinline__ float fast_tanh(float x) {
  return 1.0f - 2.0f * fast_reciprocal(fast_exp2(x * (2.0f * kLog2e)) + 1.0f);
}

// One 128-bit vector <-> its kLanes<T> elements as f32 (element k at the k-th lowest address).
template <class T>
__device__ void unpack(uint4 v, float (&f)[kLanes<T>]) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
  if constexpr (sizeof(T) == 4) {
    for (int k = 0; k < 4; ++k) f[k] = __uint_as_float(words[k]);
  } else {
    for (int k = 0; k < 4; ++k) {
      f[2 * k] = Elem<T>::load(Bits<T>(words[k] & 0xffffu));
      f[2 * k + 1] = Elem<T>::load(Bits<T>(words[k] >> 16));
    }
  }
}
template <class T>
__device__ uint4 pack(const float (&f)[kLanes<T>]) {
  unsigned words[4];
  if constexpr (sizeof(T) == 4) {
    for (int k = 0; k < 4; ++k) words[k] = __float_as_uint(f[k]);
  } else {
    for (int k = 0; k < 4; ++k)
      words[k] = unsigned(Elem<T>::store(f[2 * k])) | (unsigned(Elem<T>::store(f[2 * k + 1])) << 16);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

constexpr unsigned kFullWarp = 0xffffffffu;

// Sum and max over the 32 lanes of a warp; every lane gets the result. The butterfly's order is fixed.
__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

// Sum or max over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets the
// result. `scratch` is shared memory of at least 32 floats; the call synchronises the block, so it must
// be reached by every thread, and scratch may be reused after it returns.
template <bool kMax>
__device__ inline float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const float identity = kMax ? -INFINITY : 0.0f;
  v = lane < warps ? scratch[lane] : identity;
  v = kMax ? warp_max(v) : warp_sum(v);
  return v;
}
__device__ inline float block_sum(float v, float* scratch) { return block_reduce<false>(v, scratch); }
__device__ inline float block_max(float v, float* scratch) { return block_reduce<true>(v, scratch); }

// Element-wise map: out[i] = op(i, a[i], b[i]) over n elements, for an op on f32 values with kInputs = 1 (b
// unused, may be nullptr) or 2; i is the element's index (for ops whose result depends on it, such as a
// dropout mask). Each thread works on its own copy of op, which may keep state between its calls (a cache
// of random bits); a thread's body calls it with increasing indices. 128-bit loads and stores move 4 f32 or 8 16-bit elements at a time. When
// every pointer sits at the same offset within 16 bytes, a scalar head brings them to the boundary, the body
// moves whole vectors and a scalar tail ends it; pointers at different offsets take the scalar path.
template <class T>
struct MapArgs {
  const Bits<T>* a;  // (n)
  const Bits<T>* b;  // (n), unused by unary operations
  Bits<T>* out;      // (n), may alias a or b
  int64_t n;
  int64_t head;      // elements before the first 16-byte boundary; -1: scalar path throughout
};

template <class T, class Op>
__global__ void map_kernel(MapArgs<T> m, Op op) {  // op by value: this thread's copy
  constexpr int W = kLanes<T>;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  auto scalar = [&](int64_t i) {
    float b = 0.0f;
    if constexpr (Op::kInputs == 2) b = Elem<T>::load(m.b[i]);
    m.out[i] = Elem<T>::store(op(i, Elem<T>::load(m.a[i]), b));
  };
  if (m.head < 0) {
    for (int64_t i = first; i < m.n; i += stride) scalar(i);
    return;
  }
  const int64_t vectors = (m.n - m.head) / W;
  const int64_t tail = m.head + vectors * W;
  if (first < m.head) scalar(first);
  if (first < m.n - tail) scalar(tail + first);
  for (int64_t v = first; v < vectors; v += stride) {
    const int64_t i = m.head + v * W;
    float a[W], b[W] = {}, r[W];
    unpack<T>(*reinterpret_cast<const uint4*>(m.a + i), a);
    if constexpr (Op::kInputs == 2) unpack<T>(*reinterpret_cast<const uint4*>(m.b + i), b);
    for (int k = 0; k < W; ++k) r[k] = op(i + k, a[k], b[k]);
    *reinterpret_cast<uint4*>(m.out + i) = pack<T>(r);
  }
}

constexpr int kMapThreads = 256;
constexpr int64_t kMaxMapBlocks = 1 << 16;  // grid-stride beyond this: enough blocks to fill any current GPU

inline int64_t misalignment(const void* p) { return int64_t(reinterpret_cast<uintptr_t>(p) % kVectorBytes); }

template <class T, class Op>
void launch_map(const T* a, const T* b, T* out, int64_t n, Op op, Stream stream) {
  if (n == 0) return;
  const int64_t offset = misalignment(a);
  const bool vectorised = misalignment(out) == offset && (Op::kInputs == 1 || misalignment(b) == offset);
  MapArgs<T> m{bits(a), bits(b), bits(out), n, -1};
  int64_t work = n;
  if (vectorised) {
    m.head = std::min<int64_t>(n, (kVectorBytes - offset) % kVectorBytes / int64_t(sizeof(T)));
    work = std::max<int64_t>((n - m.head) / kLanes<T>, kLanes<T>);  // at least one thread per head/tail element
  }
  const int64_t blocks = std::min((work + kMapThreads - 1) / kMapThreads, kMaxMapBlocks);
  constexpr auto kernel = map_kernel<T, Op>;
  ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kMapThreads, alpha::cuda::stream_handle(stream), m, op);
}

// Scratch memory ordered on a stream (cudaMallocAsync from the device's pool, cudaFreeAsync on the same
// stream when it goes out of scope): the kernels queued on the stream in between may use it. A release that
// fails is not reported (a destructor cannot throw); the next checked call on the stream reports a broken
// stream.
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0) ALPHA_CUDA_CHECK(cudaMallocAsync(&data_, bytes, stream));
  }
  ~StreamScratch() {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <class U> U* as(size_t byte_offset = 0) const {
    return reinterpret_cast<U*>(static_cast<char*>(data_) + byte_offset);
  }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

// An attribute of the current device (the runtime answers from what it learnt of the device at its start).
inline int device_attribute(cudaDeviceAttr attribute) {
  int device = 0, value = 0;
  ALPHA_CUDA_CHECK(cudaGetDevice(&device));
  ALPHA_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
  return value;
}

// The shared memory the current device offers a block (its opt-in maximum), in bytes.
inline size_t block_shared_memory_limit() { return size_t(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)); }

// The operation a launch is named after in errors, and what its caller can change when the device offers a block less
// shared memory than the launch asks (a size the caller's arguments set, as NSA's group and head dims do).
struct SharedLaunchName {
  SharedLaunchName(const char* op, const char* remedy = nullptr) : op(op), remedy(remedy) {}
  const char* op;
  const char* remedy;
};

// Checks that the device offers `bytes` of shared memory to a block and raises the kernel's limit to it. Launch paths
// call this every launch, so the driver is asked once per kernel, device and larger size: a limit already raised as
// far serves every smaller launch.
template <class... Params>
void allow_shared(void (*kernel)(Params...), SharedLaunchName name, size_t bytes) {
  int device = 0;
  ALPHA_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<void (*)(Params...), int>, size_t> raised;  // the limit set so far
  std::lock_guard lock(mutex);
  size_t& limit_set = raised[{kernel, device}];
  if (bytes <= limit_set) return;
  const size_t limit = block_shared_memory_limit();
  if (bytes > limit)
    raise<BackendError>(name.op, "shared memory",
                        "at most " + std::to_string(limit) + " bytes per block on this device" +
                            (name.remedy ? std::string(" (") + name.remedy + ")" : std::string()),
                        std::to_string(bytes));
  ALPHA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  limit_set = bytes;
}

// The blocks of `kernel` (`threads` threads, `bytes` of dynamic shared memory) the current device runs at
// once: a persistent kernel's grid. Worked out once per kernel, launch shape and device, not on every launch.
template <class... Params>
int64_t resident_blocks(void (*kernel)(Params...), const char* name, int threads, size_t bytes) {
  int device = 0;
  ALPHA_CUDA_CHECK(cudaGetDevice(&device));
  using Key = std::tuple<void (*)(Params...), int, int, size_t>;
  static std::mutex mutex;
  static std::map<Key, int64_t> known;
  const Key key{kernel, device, threads, bytes};
  std::lock_guard lock(mutex);
  if (const auto found = known.find(key); found != known.end()) return found->second;
  allow_shared(kernel, name, bytes);
  int per_sm = 0;
  ALPHA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes));
  if (per_sm == 0) raise<BackendError>(name, "resident blocks", "at least one block per SM", "0");
  return known[key] = int64_t(device_attribute(cudaDevAttrMultiProcessorCount)) * per_sm;
}

// Launches kernel<<<grid, threads, bytes of dynamic shared memory, stream>>>(args...), after checking the
// device offers that much shared memory to a block and raising the kernel's limit to it.
template <class... Params, class... Args>
void launch_with_shared(void (*kernel)(Params...), SharedLaunchName name, dim3 grid, int threads, size_t bytes,
                        cudaStream_t stream, const Args&... args) {
  if (grid.x == 0 || grid.y == 0) return;
  allow_shared(kernel, name, bytes);
  kernel<<<grid, threads, bytes, stream>>>(args...);
  alpha::cuda::check(cudaGetLastError(), name.op, __FILE__, __LINE__);
}

}  // namespace alpha::kernels::cuda
