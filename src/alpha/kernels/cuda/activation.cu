// CUDA activation kernels over contiguous device buffers, taking the CPU backend's argument structs
// (kernels/activation.h). Element types: f32, and bf16/f16 storage computing in f32.
//
// GELU, softcap and their backwards go through the vectorised element-wise map (common.cuh: launch_map,
// 128-bit loads and stores with a scalar head and tail), computing what the CPU kernels compute in f32.
// Softmax and its backward: a team (a warp for rows up to kWarpRowMax elements, else a block) per row holds
// the row in registers (rows.cuh; longer rows read the rest again from L2) and makes its passes there:
// max, Σ exp(x − max) (both fixed-order team reductions), then y = exp(x − max) / Σ; the backward reduces
// Σ dy·y and writes dx = y·(dy − Σ dy·y). Any row length, 1 included.
#include "alpha/kernels/activation.h"
#include "alpha/kernels/cuda/rows.cuh"

namespace alpha::kernels::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;

struct Gelu {
  static constexpr int kInputs = 1;
  __device__ float operator()(int64_t, float x, float) const {
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    return 0.5f * x * (1.0f + t);
  }
};
// d/dx [½x(1 + tanh u)], u = √(2/π)(x + 0.044715x³): ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²).
struct GeluBackward {  // a = dy, b = x
  static constexpr int kInputs = 2;
  __device__ float operator()(int64_t, float dy, float x) const {
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
};
struct Softcap {
  static constexpr int kInputs = 1;
  float cap, inv_cap;
  __device__ float operator()(int64_t, float x, float) const { return cap * tanhf(x * inv_cap); }
};
struct SoftcapBackward {  // a = dy, b = y
  static constexpr int kInputs = 2;
  float inv_cap;
  __device__ float operator()(int64_t, float dy, float y) const {
    const float s = y * inv_cap;
    return dy * (1.0f - s * s);
  }
};

template <class T, class Team, int V>
__global__ void __launch_bounds__(Team::kThreads) softmax_kernel(SoftmaxArgs<T> a) {
  constexpr int kSlots = Team::kHeld / V;
  __shared__ float scratch[32];
  const int rank = Team::rank();
  const int64_t cols = a.cols, chunks = cols / V;
  for (int64_t r = Team::slot(); r < a.rows; r += Team::slots()) {
    const HeldRow<T, V, kSlots> x(bits(a.x) + r * cols, chunks, rank, Team::kSize);
    float max = -INFINITY;
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float f[V];
      x.get(k, j, f);
      for (int v = 0; v < V; ++v) max = fmaxf(max, f[v]);
    });
    max = Team::max(max, scratch);
    float total = 0.0f;
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float f[V];
      x.get(k, j, f);
      for (int v = 0; v < V; ++v) total += expf(f[v] - max);
    });
    const float inv_total = 1.0f / Team::sum(total, scratch);
    Bits<T>* y = bits(a.y) + r * cols;
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float f[V];
      x.get(k, j, f);
      for (int v = 0; v < V; ++v) f[v] = expf(f[v] - max) * inv_total;
      store_chunk<T, V>(y, j, f);
    });
  }
}

template <class T, class Team, int V>
__global__ void __launch_bounds__(Team::kThreads) softmax_backward_kernel(SoftmaxBackwardArgs<T> a) {
  constexpr int kSlots = Team::kHeld / V;
  __shared__ float scratch[32];
  const int rank = Team::rank();
  const int64_t cols = a.cols, chunks = cols / V;
  for (int64_t r = Team::slot(); r < a.rows; r += Team::slots()) {
    const HeldRow<T, V, kSlots> dy(bits(a.dy) + r * cols, chunks, rank, Team::kSize);
    const HeldRow<T, V, kSlots> y(bits(a.y) + r * cols, chunks, rank, Team::kSize);
    float dot = 0.0f;
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float fdy[V], fy[V];
      dy.get(k, j, fdy);
      y.get(k, j, fy);
      for (int v = 0; v < V; ++v) dot += fdy[v] * fy[v];
    });
    dot = Team::sum(dot, scratch);
    Bits<T>* dx = bits(a.dx) + r * cols;
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float fdy[V], fy[V], out[V];
      dy.get(k, j, fdy);
      y.get(k, j, fy);
      for (int v = 0; v < V; ++v) out[v] = fy[v] * (fdy[v] - dot);
      store_chunk<T, V>(dx, j, out);
    });
  }
}

}  // namespace

template <class T>
void gelu(const GeluArgs<T>& args, Stream stream) {
  launch_map<T>(args.x, nullptr, args.y, args.n, Gelu{}, stream);
}

template <class T>
void gelu_backward(const GeluBackwardArgs<T>& args, Stream stream) {
  launch_map<T>(args.dy, args.x, args.dx, args.n, GeluBackward{}, stream);
}

template <class T>
void softcap(const SoftcapArgs<T>& args, Stream stream) {
  launch_map<T>(args.x, nullptr, args.y, args.n, Softcap{args.cap, 1.0f / args.cap}, stream);
}

template <class T>
void softcap_backward(const SoftcapBackwardArgs<T>& args, Stream stream) {
  launch_map<T>(args.dy, args.y, args.dx, args.n, SoftcapBackward{1.0f / args.cap}, stream);
}

template <class T>
void softmax(const SoftmaxArgs<T>& args, Stream stream) {
  if (args.rows == 0 || args.cols == 0) return;
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  with_row_team<T>(args.cols, rows_vectorisable<T>(args.cols, {args.x, args.y}), [&]<class Team, int V>() {
    constexpr auto kernel = softmax_kernel<T, Team, V>;
    ALPHA_CUDA_LAUNCH(kernel, row_blocks<Team>(args.rows), Team::kThreads, s, args);
  });
}

template <class T>
void softmax_backward(const SoftmaxBackwardArgs<T>& args, Stream stream) {
  if (args.rows == 0 || args.cols == 0) return;
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  with_row_team<T>(args.cols, rows_vectorisable<T>(args.cols, {args.dy, args.y, args.dx}), [&]<class Team, int V>() {
    constexpr auto kernel = softmax_backward_kernel<T, Team, V>;
    ALPHA_CUDA_LAUNCH(kernel, row_blocks<Team>(args.rows), Team::kThreads, s, args);
  });
}

#define ALPHA_INSTANTIATE(T)                                                      \
  template void gelu<T>(const GeluArgs<T>&, Stream);                              \
  template void gelu_backward<T>(const GeluBackwardArgs<T>&, Stream);             \
  template void softcap<T>(const SoftcapArgs<T>&, Stream);                        \
  template void softcap_backward<T>(const SoftcapBackwardArgs<T>&, Stream);       \
  template void softmax<T>(const SoftmaxArgs<T>&, Stream);                        \
  template void softmax_backward<T>(const SoftmaxBackwardArgs<T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
