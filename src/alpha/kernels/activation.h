// Activation kernels over contiguous buffers: GELU (tanh form), softcap c·tanh(x/c) (bounds logits
// smoothly to (−c, c)), and softmax over the last dimension (max-subtracted, so exp never overflows).
// Softcap's and softmax's backwards take the forward's output y, not x, so the forward input need not be
// kept: d softcap/dx = 1 − (y/c)², and softmax's dx = y·(dy − Σ dy·y) per row.
#pragma once
#include <cstdint>

#include "alpha/core/dtype.h"
#include "alpha/core/stream.h"

namespace alpha::kernels {

template <class T>
struct GeluArgs {
  const T* x;  // (n)
  T* y;        // (n)
  int64_t n;
};

template <class T>
struct GeluBackwardArgs {
  const T* dy;  // (n)
  const T* x;   // (n), the forward's input
  T* dx;        // (n)
  int64_t n;
};

template <class T>
struct SoftcapArgs {
  const T* x;  // (n)
  T* y;        // (n)
  acc_t<T> cap;
  int64_t n;
};

template <class T>
struct SoftcapBackwardArgs {
  const T* dy;  // (n)
  const T* y;   // (n), the forward's output
  T* dx;        // (n)
  acc_t<T> cap;
  int64_t n;
};

template <class T>
struct SoftmaxArgs {
  const T* x;  // (rows, cols)
  T* y;        // (rows, cols)
  int64_t rows, cols;
};

template <class T>
struct SoftmaxBackwardArgs {
  const T* dy;  // (rows, cols)
  const T* y;   // (rows, cols), the forward's output
  T* dx;        // (rows, cols)
  int64_t rows, cols;
};

namespace cpu {
template <class T> void gelu(const GeluArgs<T>& args);
template <class T> void gelu_backward(const GeluBackwardArgs<T>& args);
template <class T> void softcap(const SoftcapArgs<T>& args);
template <class T> void softcap_backward(const SoftcapBackwardArgs<T>& args);
template <class T> void softmax(const SoftmaxArgs<T>& args);
template <class T> void softmax_backward(const SoftmaxBackwardArgs<T>& args);
}  // namespace cpu

#if ALPHA_WITH_CUDA
// Device pointers; queued on `stream`. T = float, bf16 or f16, computing in f32. GELU and softcap are
// vectorised element-wise maps; softmax and its backward take one warp (rows up to 1024 elements) or one
// block per row, the row held in registers, any row length.
namespace cuda {
template <class T> void gelu(const GeluArgs<T>& args, Stream stream);
template <class T> void gelu_backward(const GeluBackwardArgs<T>& args, Stream stream);
template <class T> void softcap(const SoftcapArgs<T>& args, Stream stream);
template <class T> void softcap_backward(const SoftcapBackwardArgs<T>& args, Stream stream);
template <class T> void softmax(const SoftmaxArgs<T>& args, Stream stream);
template <class T> void softmax_backward(const SoftmaxBackwardArgs<T>& args, Stream stream);
}  // namespace cuda
#endif

}  // namespace alpha::kernels
