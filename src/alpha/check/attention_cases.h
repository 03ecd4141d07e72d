// What the harness checks of the CUDA attention kernels share (the materialising kernels in
// checks_attention.cpp, flash attention in checks_flash_attention.cpp): a case's shapes and configuration,
// and the check itself, which takes the kernels under test as two callables.
//
// check_attention_case runs the forward on fresh inputs (q, k, v as separate tensors, or as strided slices
// of one fused qkv tensor) into poisoned outputs and compares out, row_max and row_sum with the CPU
// reference in f64. The backward runs on the reference's forward results rounded as the GPU holds them (so
// both sides see the same numbers); dq, dk and dv are compared, and it runs twice: its results must repeat
// bit for bit (dq excepted when the check runs the kernels with config.deterministic false, whose atomic dQ
// may add in another order). Comparisons are named "<prefix>.<case>.<output>".
//
// How outputs are judged (tolerances.h): in f32, by the check's row (relative error far below the issue's
// 1e-3). In bf16 and f16, out, dq, dk and dv by the field's criterion: their error against the f64
// reference may be at most twice that of naive attention computed in the same precision on the same
// inputs (naive_low_precision_attention.h; the backward's with the same dout, q, k, v), plus a floor
// (Context::compare_with_naive). Kernels that round P and dS to T before their matrix products, as
// FlashAttention does, meet it; fixed rows sized for f32 internals would not fit them. row_max and row_sum
// are f32 statistics of scores accumulated in f32 from exact products, for every dtype: the f32 row.
#pragma once
#if ALPHA_WITH_CUDA
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "alpha/check/kernel_check.h"
#include "alpha/check/naive_low_precision_attention.h"
#include "alpha/kernels/attention_reference.h"
#include "alpha/ops/attention_params.h"

namespace alpha::check {

struct AttentionCase {
  const char* name;
  int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim, value_dim;
  bool causal;
  double softcap, dropout_p;
  bool fused_qkv;  // q, k, v are slices of one [B, T, Hq + 2·Hkv, D] tensor (Tq = Tk, Dv = D)
  int64_t window_left = -1, window_right = -1;
};

// q, k, v (f64 on the CPU, values rounded to the dtype) and their copies on the GPU in the dtype.
struct AttentionInputs {
  Tensor q, k, v, gq, gk, gv;
};
AttentionInputs make_attention_inputs(Context& ctx, const AttentionCase& c, DType dtype);

// A CPU f64 tensor of NaN: the reference's outputs before it writes them.
Tensor nans(const Shape& shape);

// forward(const AttentionForwardArgs<T>&) and backward(const AttentionBackwardArgs<T>&) queue the kernels
// under test on ctx.stream() (each brings its own workspace); `row` names the tolerance table's rows: its
// f32 entry judges f32 outputs and the statistics, and gives the naive rule its floor's absolute part.
template <class T, class Forward, class Backward>
void check_attention_case(Context& ctx, const AttentionCase& c, std::string_view prefix, std::string_view row,
                          const Forward& forward, const Backward& backward, bool deterministic = true) {
  const DType dtype = dtype_of<T>;
  const std::string name = std::string(prefix) + "." + c.name;
  ops::AttentionConfig config;
  config.causal = c.causal;
  config.softcap = c.softcap;
  config.dropout_p = c.dropout_p;
  config.dropout_seed = ctx.next_seed();
  config.dropout_offset = 12345;
  config.window_left = c.window_left;
  config.window_right = c.window_right;
  config.deterministic = deterministic;
  AttentionInputs in = make_attention_inputs(ctx, c, dtype);
  Tensor dout = ctx.random({c.batch, c.q_len, c.q_heads, c.value_dim}, dtype);
  const Shape out_shape = dout.shape(), stats_shape = {c.batch, c.q_heads, c.q_len};
  const kernels::AttentionParams<T> params = ops::attention_kernel_params<T>(in.gq, in.gk, in.gv, config);
  const kernels::AttentionParams<double> params64 = ops::attention_kernel_params<double>(in.q, in.k, in.v, config);

  // out, dq, dk, dv: by the f32 row, or in bf16/f16 against the naive computation in T (see the header).
  constexpr bool low_precision = !std::is_same_v<T, float>;
  const NaiveAttention naive = low_precision ? naive_low_precision_attention(in.q.to(dtype), in.k.to(dtype),
                                                                              in.v.to(dtype), dout.to(dtype), config)
                                             : NaiveAttention{};
  auto judge = [&](std::string_view output, const Tensor& got, const Tensor& want, const Tensor& naive_result) {
    if constexpr (low_precision) ctx.compare_with_naive(name + "." + std::string(output), got, want, naive_result, row);
    else ctx.compare(name + "." + std::string(output), got, want, row);
  };

  // Forward.
  Tensor out = ctx.poisoned(out_shape, dtype);
  Tensor row_max = ctx.poisoned(stats_shape, DType::f32), row_sum = ctx.poisoned(stats_shape, DType::f32);
  forward(kernels::AttentionForwardArgs<T>{in.gq.data<T>(), in.gk.data<T>(), in.gv.data<T>(), out.data<T>(),
                                           row_max.data<float>(), row_sum.data<float>(), params});
  Tensor want_out = nans(out_shape), want_max = nans(stats_shape), want_sum = nans(stats_shape);
  kernels::cpu::attention_reference_forward(kernels::AttentionForwardArgs<double>{
      in.q.data<double>(), in.k.data<double>(), in.v.data<double>(), want_out.data<double>(),
      want_max.data<double>(), want_sum.data<double>(), params64});
  judge("out", out, want_out, naive.out);
  ctx.compare(name + ".row_max", row_max, want_max, row);
  ctx.compare(name + ".row_sum", row_sum, want_sum, row);

  // Backward, on the reference's forward results rounded as the GPU holds them.
  Tensor out_in = want_out.to(dtype).to(DType::f64);
  Tensor max_in = want_max.to(DType::f32).to(DType::f64), sum_in = want_sum.to(DType::f32).to(DType::f64);
  Tensor g_dout = ctx.to_gpu(dout, dtype), g_out = ctx.to_gpu(out_in, dtype);
  Tensor g_max = ctx.to_gpu(max_in, DType::f32), g_sum = ctx.to_gpu(sum_in, DType::f32);
  auto run_backward = [&] {
    std::tuple<Tensor, Tensor, Tensor> grads{ctx.poisoned(in.q.shape(), dtype), ctx.poisoned(in.k.shape(), dtype),
                                             ctx.poisoned(in.v.shape(), dtype)};
    auto& [dq, dk, dv] = grads;
    backward(kernels::AttentionBackwardArgs<T>{g_dout.data<T>(), in.gq.data<T>(), in.gk.data<T>(), in.gv.data<T>(),
                                               g_out.data<T>(), g_max.data<float>(), g_sum.data<float>(),
                                               dq.data<T>(), dk.data<T>(), dv.data<T>(), params});
    return grads;
  };
  auto [dq, dk, dv] = run_backward();
  auto [dq2, dk2, dv2] = run_backward();
  Tensor want_dq = nans(in.q.shape()), want_dk = nans(in.k.shape()), want_dv = nans(in.v.shape());
  kernels::cpu::attention_reference_backward(kernels::AttentionBackwardArgs<double>{
      dout.data<double>(), in.q.data<double>(), in.k.data<double>(), in.v.data<double>(), out_in.data<double>(),
      max_in.data<double>(), sum_in.data<double>(), want_dq.data<double>(), want_dk.data<double>(),
      want_dv.data<double>(), params64});
  judge("dq", dq, want_dq, naive.dq);
  judge("dk", dk, want_dk, naive.dk);
  judge("dv", dv, want_dv, naive.dv);
  if (deterministic) ctx.compare_bits(name + ".dq.repeats", dq2, dq);
  ctx.compare_bits(name + ".dk.repeats", dk2, dk);
  ctx.compare_bits(name + ".dv.repeats", dv2, dv);
}

}  // namespace alpha::check
#endif
