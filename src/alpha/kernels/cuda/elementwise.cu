// CUDA element-wise kernels over contiguous device buffers, taking the CPU backend's argument structs
// (kernels/elementwise.h): add, mul, scale and axpy through one vectorised map kernel, and a deterministic
// sum. Element types: f32, and bf16/f16 storage computing in f32.
//
// Arithmetic uses __fadd_rn/__fmul_rn, never a fused multiply-add, so every result is rounded as the CPU
// kernel rounds it (one f32 rounding per operation, then one to the storage type): the backends agree bit
// for bit on add, mul, scale and axpy.
// Map: 128-bit loads and stores move 4 f32 or 8 16-bit elements at a time. When every pointer sits at the
// same offset within 16 bytes, a scalar head brings them to the boundary, the body moves whole vectors
// and a scalar tail ends it; pointers at different offsets take the scalar path.
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
  __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};
struct Mul {
  static constexpr int kInputs = 2;
  __device__ float operator()(float a, float b) const { return __fmul_rn(a, b); }
};
struct Scale {
  static constexpr int kInputs = 1;
  float alpha;
  __device__ float operator()(float x, float) const { return __fmul_rn(alpha, x); }
};
struct Axpy {  // a = y, b = x
  static constexpr int kInputs = 2;
  float alpha;
  __device__ float operator()(float y, float x) const { return __fadd_rn(y, __fmul_rn(alpha, x)); }
};

template <class T>
struct MapArgs {
  const Bits<T>* a;  // (n)
  const Bits<T>* b;  // (n), unused by unary operations
  Bits<T>* out;      // (n), may alias a or b
  int64_t n;
  int64_t head;      // elements before the first 16-byte boundary; -1: scalar path throughout
};

template <class T, class Op>
__global__ void map_kernel(MapArgs<T> m, Op op) {
  constexpr int W = kLanes<T>;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  auto scalar = [&](int64_t i) {
    float b = 0.0f;
    if constexpr (Op::kInputs == 2) b = Elem<T>::load(m.b[i]);
    m.out[i] = Elem<T>::store(op(Elem<T>::load(m.a[i]), b));
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
    for (int k = 0; k < W; ++k) r[k] = op(a[k], b[k]);
    *reinterpret_cast<uint4*>(m.out + i) = pack<T>(r);
  }
}

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride beyond this: enough blocks to fill any current GPU

int64_t misalignment(const void* p) { return int64_t(reinterpret_cast<uintptr_t>(p) % kVectorBytes); }

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
  const int64_t blocks = std::min((work + kThreads - 1) / kThreads, kMaxBlocks);
  constexpr auto kernel = map_kernel<T, Op>;
  ALPHA_CUDA_LAUNCH(kernel, unsigned(blocks), kThreads, alpha::cuda::stream_handle(stream), m, op);
}

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
