#include "alpha/ops/nsa.h"

#include <array>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include "alpha/ops/attention_params.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

constexpr std::string_view kForward = "nsa";
constexpr std::string_view kBackward = "nsa_backward";

// The shapes and dtypes of NsaOutput's tensors, in member order, with their names for errors.
struct Slot {
  std::string_view name;
  Shape shape;
  DType dtype;
};
std::array<Slot, 7> output_layout(const NsaInputs& in, const NsaConfig& config) {
  const int64_t B = in.q.size(0), T = in.q.size(1), Hq = in.q.size(2), Hkv = in.k.size(2);
  const int64_t D = in.q.size(3), Dv = in.v.size(3);
  const int64_t blocks = kernels::nsa_compressed_blocks(T, config.block_len, config.block_stride);
  const DType dtype = in.q.dtype(), stats = attention_statistics_dtype(in.q);
  const Shape stats_shape = {kernels::kNsaBranches, B, Hq, T};
  return {Slot{"forward.out", {B, T, Hq, Dv}, dtype},
          Slot{"forward.branch_out", {kernels::kNsaBranches, B, T, Hq, Dv}, dtype},
          Slot{"forward.compressed_k", {B, blocks, Hkv, D}, dtype},
          Slot{"forward.compressed_v", {B, blocks, Hkv, Dv}, dtype},
          Slot{"forward.row_max", stats_shape, stats},
          Slot{"forward.row_sum", stats_shape, stats},
          Slot{"forward.selected", {B, T, Hkv, config.select_count}, DType::i32}};
}

// Pointers to NsaOutput's tensors in member order (const for a const output).
template <class Output>
auto members(Output& o) {
  return std::array{&o.out, &o.branch_out, &o.compressed_k, &o.compressed_v, &o.row_max, &o.row_sum, &o.selected};
}

// Uninitialised tensors on `device` (the kernels write every element).
NsaAllocator empty_on(Device device) {
  return [device](Shape shape, DType dtype) { return Tensor::empty(std::move(shape), dtype, device); };
}

// in with the gates and the compressor's parameters made contiguous, as the kernels read them.
NsaInputs dense_parameters(const NsaInputs& in) {
  return {in.q,
          in.k,
          in.v,
          in.gates.contiguous(),
          in.k_pos.contiguous(),
          in.k_weight.contiguous(),
          in.v_pos.contiguous(),
          in.v_weight.contiguous()};
}

template <class T>
kernels::NsaParams<T> kernel_params(const NsaInputs& in, const NsaConfig& config) {
  AttentionConfig scaled;
  scaled.scale = config.scale;
  const kernels::AttentionParams<T> a = attention_kernel_params<T>(in.q, in.k, in.v, scaled);
  return {a.batch,           a.q_len,
          a.q_heads,         a.kv_heads,
          a.head_dim,        a.value_dim,
          a.q_strides,       a.k_strides,
          a.v_strides,       a.scale,
          config.block_len,  config.block_stride,
          config.select_len, config.select_count,
          config.window};
}

template <class T>
kernels::NsaInputPointers<T> input_pointers(const NsaInputs& in) {
  return {in.q.data<T>(),     in.k.data<T>(),        in.v.data<T>(),     in.gates.data<T>(),
          in.k_pos.data<T>(), in.k_weight.data<T>(), in.v_pos.data<T>(), in.v_weight.data<T>()};
}

}  // namespace

void check_nsa_inputs(std::string_view op, const NsaInputs& in, const NsaConfig& config) {
  check_defined(op, "q", in.q);
  check_backend_float(op, "q", in.q);
  AttentionConfig scaled;
  scaled.scale = config.scale;
  check_attention_inputs(op, in.q, in.k, in.v, scaled);
  check_size(op, "k", in.k, 1, in.q.size(1));
  int64_t B = in.q.size(0), T = in.q.size(1), Hq = in.q.size(2), D = in.q.size(3), Dv = in.v.size(3);
  if (Dv < 1) raise<ShapeError>(op, "v", "a head dimension of at least 1", shape_str(in.v.shape()));
  if (in.q.device().is_cuda())  // the CUDA kernels' register tiles (kernels/cuda/nsa.cu)
    for (auto [name, dim] : {std::pair<std::string_view, int64_t>{"q", D}, {"v", Dv}})
      if (dim > kernels::kNsaCudaMaxHeadDim)
        raise<ShapeError>(op, name,
                          "a head dimension of at most " + std::to_string(kernels::kNsaCudaMaxHeadDim) + " on a GPU",
                          std::to_string(dim));
  for (auto [name, value] : {std::pair<std::string_view, int64_t>{"config.block_len", config.block_len},
                             {"config.block_stride", config.block_stride},
                             {"config.select_len", config.select_len},
                             {"config.window", config.window}})
    if (value < 1) raise<ValueError>(op, name, "a length of at least 1", std::to_string(value));
  if (config.select_count < 3)
    raise<ValueError>(op, "config.select_count",
                      "at least 3 (the first block and the two local blocks are always kept)",
                      std::to_string(config.select_count));
  const int64_t l = config.block_len;
  const std::pair<std::string_view, const Tensor&> parameters[] = {{"gates", in.gates},
                                                                   {"k_pos", in.k_pos},
                                                                   {"k_weight", in.k_weight},
                                                                   {"v_pos", in.v_pos},
                                                                   {"v_weight", in.v_weight}};
  const Shape shapes[] = {{B, T, Hq, kernels::kNsaBranches}, {l, D}, {D, l * D}, {l, Dv}, {Dv, l * Dv}};
  for (size_t i = 0; i < std::size(parameters); ++i) {
    auto [name, t] = parameters[i];
    check_defined(op, name, t);
    check_same_device(op, name, t, in.q);
    check_same_dtype(op, name, t, in.q);
    check_shape(op, name, t, shapes[i]);
  }
}

NsaOutput nsa_allocate_output(const NsaInputs& in, const NsaConfig& config, const NsaAllocator& make) {
  std::array<Slot, 7> slots = output_layout(in, config);
  auto at = [&](size_t i) { return make(slots[i].shape, slots[i].dtype); };
  return {at(0), at(1), at(2), at(3), at(4), at(5), at(6)};
}

NsaGrads nsa_allocate_grads(const NsaInputs& in, const NsaAllocator& make) {
  const DType dtype = in.q.dtype();
  return {make(in.q.shape(), dtype),     make(in.k.shape(), dtype),       make(in.v.shape(), dtype),
          make(in.gates.shape(), dtype), make(in.k_pos.shape(), dtype),   make(in.k_weight.shape(), dtype),
          make(in.v_pos.shape(), dtype), make(in.v_weight.shape(), dtype)};
}

template <class T>
kernels::NsaForwardArgs<T> nsa_forward_args(const NsaInputs& in, const NsaOutput& out, const NsaConfig& config) {
  return {input_pointers<T>(in),        out.out.data<T>(),
          out.branch_out.data<T>(),     out.compressed_k.data<T>(),
          out.compressed_v.data<T>(),   out.row_max.data<acc_t<T>>(),
          out.row_sum.data<acc_t<T>>(), out.selected.data<int32_t>(),
          kernel_params<T>(in, config)};
}

template <class T>
kernels::NsaBackwardArgs<T> nsa_backward_args(const Tensor& dout, const NsaInputs& in, const NsaOutput& forward,
                                              const NsaGrads& grads, const NsaConfig& config) {
  return {dout.data<T>(),
          input_pointers<T>(in),
          forward.branch_out.data<T>(),
          forward.compressed_k.data<T>(),
          forward.compressed_v.data<T>(),
          forward.row_max.data<acc_t<T>>(),
          forward.row_sum.data<acc_t<T>>(),
          forward.selected.data<int32_t>(),
          grads.dq.data<T>(),
          grads.dk.data<T>(),
          grads.dv.data<T>(),
          grads.dgates.data<T>(),
          grads.dk_pos.data<T>(),
          grads.dk_weight.data<T>(),
          grads.dv_pos.data<T>(),
          grads.dv_weight.data<T>(),
          kernel_params<T>(in, config)};
}

#define ALPHA_INSTANTIATE(T)                                                                                     \
  template kernels::NsaForwardArgs<T> nsa_forward_args<T>(const NsaInputs&, const NsaOutput&, const NsaConfig&); \
  template kernels::NsaBackwardArgs<T> nsa_backward_args<T>(const Tensor&, const NsaInputs&, const NsaOutput&,   \
                                                            const NsaGrads&, const NsaConfig&);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(double)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

NsaOutput nsa(const NsaInputs& in, const NsaConfig& config) {
  check_nsa_inputs(kForward, in, config);
  const NsaInputs dense = dense_parameters(in);
  NsaOutput r = nsa_allocate_output(in, config, empty_on(in.q.device()));
  dispatch_float(kForward, in.q, [&]<class T>([[maybe_unused]] const auto& where) {
    if constexpr (std::is_same_v<std::decay_t<decltype(where)>, OnCpu>) {
      kernels::cpu::nsa_reference_forward(nsa_forward_args<T>(dense, r, config));
    } else {
#if ALPHA_WITH_CUDA
      kernels::cuda::nsa_forward(nsa_forward_args<T>(dense, r, config), where.stream);
#endif
    }
  });
  return r;
}

NsaGrads nsa_backward(const Tensor& dout, const NsaInputs& in, const NsaOutput& forward, const NsaConfig& config) {
  check_nsa_inputs(kBackward, in, config);
  std::array<Slot, 7> slots = output_layout(in, config);
  slots[0].name = "dout";  // the backward reads dout in place of the forward's out
  std::array<const Tensor*, 7> given = members(forward);
  given[0] = &dout;
  NsaOutput saved;  // what the kernel reads: dout, then the forward's tensors, contiguous
  std::array<Tensor*, 7> contiguous = members(saved);
  for (size_t i = 0; i < slots.size(); ++i) {
    check_defined(kBackward, slots[i].name, *given[i]);
    check_same_device(kBackward, slots[i].name, *given[i], in.q);
    check_dtype(kBackward, slots[i].name, *given[i], {slots[i].dtype});
    check_shape(kBackward, slots[i].name, *given[i], slots[i].shape);
    *contiguous[i] = given[i]->contiguous();
  }
  const NsaInputs dense = dense_parameters(in);
  NsaGrads g = nsa_allocate_grads(in, empty_on(in.q.device()));
  dispatch_float(kBackward, in.q, [&]<class T>([[maybe_unused]] const auto& where) {
    if constexpr (std::is_same_v<std::decay_t<decltype(where)>, OnCpu>) {
      kernels::cpu::nsa_reference_backward(nsa_backward_args<T>(saved.out, dense, saved, g, config));
    } else {
#if ALPHA_WITH_CUDA
      kernels::cuda::nsa_backward(nsa_backward_args<T>(saved.out, dense, saved, g, config), where.stream);
#endif
    }
  });
  return g;
}

}  // namespace alpha::ops
