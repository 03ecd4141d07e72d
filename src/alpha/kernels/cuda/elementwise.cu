// CUDA element-wise kernels over contiguous device buffers, taking the CPU backend's argument structs
// (kernels/elementwise.h): add, mul, scale and axpy through one vectorised map kernel, and a deterministic
// sum. Element types: f32, and bf16/f16 storage computing in f32.
//
// Arithmetic uses __fadd_rn/__fmul_rn, never a fused multiply-add, so every result is rounded as the CPU
// kernel rounds it (one f32 rounding per operation, then one to the storage type): the backends agree bit
// for bit on add, mul, scale and axpy.
// Map: launch_map (common.cuh), 128-bit loads and stores with a scalar head and tail.
// Sum: each block reduces one fixed chunk of kSumBlock elements (a fixed stride per thread, then a fixed
// shared-memory tree) into a partial; one final block reduces the partials the same way. The order depends
// only on n, so the result has the same bits on every run and every GPU; there are no atomics.
#include <algorithm>

#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/elementwise.h"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda {

namespace {

// The operations, on f32 values; unary ones ignore their second operand.
struct Add {
  static constexpr int kInputs = 2;
  __device__ float operator()(int64_t, float a, float b) const { return __fadd_rn(a, b); }
};
struct Mul {
  static constexpr int kInputs = 2;
  __device__ float operator()(int64_t, float a, float b) const { return __fmul_rn(a, b); }
};
struct Scale {
  static constexpr int kInputs = 1;
  float alpha;
  __device__ float operator()(int64_t, float x, float) const { return __fmul_rn(alpha, x); }
};
struct Axpy {  // a = y, b = x
  static constexpr int kInputs = 2;
  float alpha;
  __device__ float operator()(int64_t, float y, float x) const { return __fadd_rn(y, __fmul_rn(alpha, x)); }
};

constexpr int kThreads = 256;

static_assert(kSumBlock % kThreads == 0, "a sum chunk is whole strides of the block");

// Block b reduces x[b * chunk, min(n, (b + 1) * chunk)) into out[b]: thread t adds elements t, t + kThreads, ...
// in order, then a shared-memory tree halves the kThreads sums. The order depends only on n and chunk.
template <class T>
__global__ void sum_kernel(const Bits<T>* x, int64_t n, int64_t chunk, float* out) {
  __shared__ float partial[kThreads];
  const int64_t start = int64_t(blockIdx.x) * chunk;
  const int64_t end = start + chunk < n ? start + chunk : n;
  float s = 0.0f;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) s = __fadd_rn(s, Elem<T>::load(x[i]));
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) partial[threadIdx.x] = __fadd_rn(partial[threadIdx.x], partial[threadIdx.x + width]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

}  // namespace

template <class T>
void add(const BinaryArgs<T>& args, Stream stream) {
  launch_map(args.a, args.b, args.out, args.n, Add{}, stream);
}

template <class T>
void mul(const BinaryArgs<T>& args, Stream stream) {
  launch_map(args.a, args.b, args.out, args.n, Mul{}, stream);
}

template <class T>
void scale(const ScaleArgs<T>& args, Stream stream) {
  launch_map<T>(args.x, nullptr, args.out, args.n, Scale{args.alpha}, stream);
}

template <class T>
void axpy(const AxpyArgs<T>& args, Stream stream) {
  launch_map<T>(args.y, args.x, args.y, args.n, Axpy{args.alpha}, stream);
}

template <class T>
void sum(const SumArgs<T>& args, Stream stream) {
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t chunks = std::max<int64_t>((args.n + kSumBlock - 1) / kSumBlock, 1);
  constexpr auto chunk_kernel = sum_kernel<T>;
  if (chunks == 1) {
    ALPHA_CUDA_LAUNCH(chunk_kernel, 1, kThreads, s, bits(args.x), args.n, kSumBlock, args.out);
    return;
  }
  // Partials in stream-ordered scratch from the driver's pool, released on the same stream.
  float* partials = nullptr;
  ALPHA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partials), size_t(chunks) * sizeof(float), s));
  ALPHA_CUDA_LAUNCH(chunk_kernel, unsigned(chunks), kThreads, s, bits(args.x), args.n, kSumBlock, partials);
  constexpr auto final_kernel = sum_kernel<float>;
  ALPHA_CUDA_LAUNCH(final_kernel, 1, kThreads, s, partials, chunks, chunks, args.out);
  ALPHA_CUDA_CHECK(cudaFreeAsync(partials, s));
}

#define ALPHA_INSTANTIATE(T)                                 \
  template void add<T>(const BinaryArgs<T>&, Stream);        \
  template void mul<T>(const BinaryArgs<T>&, Stream);        \
  template void scale<T>(const ScaleArgs<T>&, Stream);       \
  template void axpy<T>(const AxpyArgs<T>&, Stream);         \
  template void sum<T>(const SumArgs<T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
