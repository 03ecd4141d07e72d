// Native Sparse Attention on tensors (kernels/nsa_reference.h holds the algorithm and its conventions): each query
// attends to compressed blocks, to the top-n selection blocks its GQA group chose from the compressed probabilities,
// and to a sliding window, combined by sigmoid gates. On the CPU (f32 or f64) the reference kernels; on a GPU (f32,
// bf16 or f16, computing in f32) the CUDA kernels of kernels/cuda/nsa.cu, head dims up to 256.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "alpha/kernels/nsa_reference.h"
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

struct NsaConfig {
  double scale = 0.0;         // 0 means 1/√D
  int64_t block_len = 32;     // l: compression block length
  int64_t block_stride = 16;  // d: distance between compression blocks
  int64_t select_len = 64;    // l': selection block length
  int64_t select_count = 16;  // n >= 3: selection blocks kept (first and two local ones included)
  int64_t window = 512;       // w: sliding window, in tokens (the query's own included)
};

// The inputs: q [B, T, Hq, D], k [B, T, Hkv, D], v [B, T, Hkv, Dv] (unit-stride features, any other strides), gate
// logits [B, T, Hq, 3] (compressed, selected, window), and the compressor's parameters k_pos [l, D], k_weight [D,
// l·D], v_pos [l, Dv], v_weight [Dv, l·Dv].
struct NsaInputs {
  Tensor q, k, v, gates, k_pos, k_weight, v_pos, v_weight;
};

struct NsaOutput {
  Tensor out;           // [B, T, Hq, Dv]
  Tensor branch_out;    // [3, B, T, Hq, Dv]: each branch's output before gating
  Tensor compressed_k;  // [B, Nc, Hkv, D], Nc = (T − l)/d + 1 (0 when T < l)
  Tensor compressed_v;  // [B, Nc, Hkv, Dv]
  Tensor row_max;       // [3, B, Hq, T], accumulation dtype; −inf for a row that sees no key
  Tensor row_sum;       // [3, B, Hq, T]; 0 for a row that sees no key
  Tensor selected;      // [B, T, Hkv, n] i32: the kept selection blocks ascending, then −1s
};

NsaOutput nsa(const NsaInputs& in, const NsaConfig& config);

struct NsaGrads {
  Tensor dq, dk, dv, dgates, dk_pos, dk_weight, dv_pos, dv_weight;  // shaped as the inputs
  std::vector<Tensor> list() const { return {dq, dk, dv, dgates, dk_pos, dk_weight, dv_pos, dv_weight}; }
};
// dout [B, T, Hq, Dv]; `forward` is what nsa returned for the same inputs and config. No gradient flows through the
// choice of selection blocks.
NsaGrads nsa_backward(const Tensor& dout, const NsaInputs& in, const NsaOutput& forward, const NsaConfig& config);

// Validates the inputs and config as nsa does: the typed error names `op`, the argument, what was expected and
// what came.
void check_nsa_inputs(std::string_view op, const NsaInputs& in, const NsaConfig& config);

// The forward's outputs and the backward's gradients for `in` (validated), each made by make(shape, dtype):
// nsa allocates them empty; tests calling the kernels directly pass NaN-poisoned ones.
using NsaAllocator = std::function<Tensor(Shape, DType)>;
NsaOutput nsa_allocate_output(const NsaInputs& in, const NsaConfig& config, const NsaAllocator& make);
NsaGrads nsa_allocate_grads(const NsaInputs& in, const NsaAllocator& make);

// The kernels' arguments over these tensors (T float or double; bf16 or f16 for the CUDA kernels), built as nsa and nsa_backward build them, for
// tests calling the kernels directly. in's gates and compressor parameters, dout and the forward's tensors must
// be contiguous (nsa_allocate_* makes them so); q, k, v may be strided.
template <class T>
kernels::NsaForwardArgs<T> nsa_forward_args(const NsaInputs& in, const NsaOutput& out, const NsaConfig& config);
template <class T>
kernels::NsaBackwardArgs<T> nsa_backward_args(const Tensor& dout, const NsaInputs& in, const NsaOutput& forward,
                                              const NsaGrads& grads, const NsaConfig& config);

}  // namespace alpha::ops
