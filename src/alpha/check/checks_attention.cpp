// Harness checks of the materialising CUDA attention (kernels/cuda/attention_materialized.cu) against the
// CPU reference in f64 (row cuda.attention), for every dtype, over shapes that cover: causal with Tq < Tk
// and with Tq > Tk (leading query rows that see no key: m = −inf, l = 0, output 0, no gradient), softcap,
// dropout on P (the reference's Philox mask), GQA (Hq = 8, Hkv = 2) and MQA (Hkv = 1), D = 48, 64 and 128,
// Dv != D, Tq = 1 (decoding), odd lengths (77), q/k/v as strided views into one fused qkv tensor, the
// `seed` model's shape (B = 8, T = 512, H = 8, D = 48, causal), and sliding windows (left only with and
// without causal, right only, both sides with Tq < Tk, rows left empty by a window with Tq > Tk, a
// zero-width window) whose edges fall inside 64-wide tiles, so that tiles are skipped on both sides.
// The forward's out, row_max and row_sum are compared; the backward runs on the reference's forward
// results rounded to the dtype (so both sides see the same numbers) and its dq, dk, dv are compared, and
// it runs twice: dq, dk and dv (dk and dv summed over each GQA group) must repeat bit for bit.
// The workspace is poisoned with NaN: a kernel reading an entry no kernel wrote (a masked one) fails.
#if ALPHA_WITH_CUDA
#include <cmath>
#include <string>
#include <tuple>

#include "alpha/check/families.h"
#include "alpha/kernels/attention_materialized.h"
#include "alpha/ops/attention_params.h"

namespace alpha::check {

namespace {

struct Case {
  const char* name;
  int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim, value_dim;
  bool causal;
  double softcap, dropout_p;
  bool fused_qkv;  // q, k, v are slices of one [B, T, Hq + 2·Hkv, D] tensor (Tq = Tk, Dv = D)
  int64_t window_left = -1, window_right = -1;
};

constexpr Case kCases[] = {
    {"mha", 2, 64, 64, 4, 4, 64, 64, false, 0.0, 0.0, false},
    {"causal_gqa_dropout_d48", 2, 128, 128, 8, 2, 48, 48, true, 0.0, 0.1, false},
    {"causal_tq_lt_tk_softcap", 1, 77, 200, 4, 4, 64, 64, true, 0.3, 0.0, false},
    {"causal_masked_rows_mqa_dv64_d128", 2, 100, 37, 4, 1, 128, 64, true, 0.0, 0.0, false},
    {"decode_tq1_gqa_dropout", 3, 1, 77, 8, 2, 64, 64, true, 0.0, 0.2, false},
    {"fused_qkv_t77_gqa_softcap_dropout", 2, 77, 77, 8, 2, 64, 64, true, 0.3, 0.1, true},
    {"cross_tq33_tk130_d128_dv96", 1, 33, 130, 2, 2, 128, 96, false, 0.0, 0.1, false},
    {"seed", 8, 512, 512, 8, 8, 48, 48, true, 0.0, 0.0, false},
    {"window_left63_causal_gqa_dropout", 2, 200, 200, 8, 2, 64, 64, true, 0.0, 0.1, false, 63, -1},
    {"window_left100_noncausal_d48", 1, 200, 200, 4, 4, 48, 48, false, 0.0, 0.0, false, 100, -1},
    {"window_right70_fused_qkv_dropout", 2, 130, 130, 8, 2, 64, 64, false, 0.0, 0.1, true, -1, 70},
    {"window_both_tq_lt_tk_softcap", 1, 77, 300, 4, 4, 64, 64, false, 0.3, 0.0, false, 20, 45},
    {"window_empty_rows_tq_gt_tk_mqa", 2, 300, 100, 4, 1, 48, 64, false, 0.0, 0.1, false, 10, 5},
    {"window_causal_empty_rows_tq_gt_tk", 1, 150, 70, 2, 2, 64, 32, true, 0.0, 0.0, false, 30, 0},
    {"window_zero_width_causal", 1, 65, 65, 2, 2, 64, 64, true, 0.0, 0.0, false, 0, 0},
};

// q, k, v (f64 on the CPU, values rounded to the dtype) and their copies on the GPU in the dtype.
struct Inputs {
  Tensor q, k, v, gq, gk, gv;
};

Inputs make_inputs(Context& ctx, const Case& c, DType dtype) {
  Inputs in;
  if (c.fused_qkv) {
    Tensor qkv = ctx.random({c.batch, c.q_len, c.q_heads + 2 * c.kv_heads, c.head_dim}, dtype);
    Tensor gqkv = ctx.to_gpu(qkv, dtype);
    const int64_t k0 = c.q_heads, v0 = c.q_heads + c.kv_heads, end = c.q_heads + 2 * c.kv_heads;
    in.q = qkv.slice(2, 0, k0), in.k = qkv.slice(2, k0, v0), in.v = qkv.slice(2, v0, end);
    in.gq = gqkv.slice(2, 0, k0), in.gk = gqkv.slice(2, k0, v0), in.gv = gqkv.slice(2, v0, end);
    return in;
  }
  in.q = ctx.random({c.batch, c.q_len, c.q_heads, c.head_dim}, dtype);
  in.k = ctx.random({c.batch, c.kv_len, c.kv_heads, c.head_dim}, dtype);
  in.v = ctx.random({c.batch, c.kv_len, c.kv_heads, c.value_dim}, dtype);
  in.gq = ctx.to_gpu(in.q, dtype), in.gk = ctx.to_gpu(in.k, dtype), in.gv = ctx.to_gpu(in.v, dtype);
  return in;
}

Tensor nans(const Shape& shape) { return Tensor::full(shape, NAN, DType::f64); }

template <class T>
void check_case(Context& ctx, const Case& c) {
  const DType dtype = dtype_of<T>;
  const std::string name = std::string("attention.") + c.name;
  ops::AttentionConfig config;
  config.causal = c.causal;
  config.softcap = c.softcap;
  config.dropout_p = c.dropout_p;
  config.dropout_seed = ctx.next_seed();
  config.dropout_offset = 12345;
  config.window_left = c.window_left;
  config.window_right = c.window_right;
  Inputs in = make_inputs(ctx, c, dtype);
  const Shape out_shape = {c.batch, c.q_len, c.q_heads, c.value_dim}, stats_shape = {c.batch, c.q_heads, c.q_len};
  const kernels::AttentionParams<T> params = ops::attention_kernel_params<T>(in.gq, in.gk, in.gv, config);
  const kernels::AttentionParams<double> params64 = ops::attention_kernel_params<double>(in.q, in.k, in.v, config);
  auto workspace = [&] { return ctx.poisoned({kernels::attention_materialized_workspace(params)}, DType::f32); };

  // Forward.
  Tensor out = ctx.poisoned(out_shape, dtype);
  Tensor row_max = ctx.poisoned(stats_shape, DType::f32), row_sum = ctx.poisoned(stats_shape, DType::f32);
  Tensor ws = workspace();
  kernels::cuda::attention_materialized_forward(
      kernels::AttentionForwardArgs<T>{in.gq.data<T>(), in.gk.data<T>(), in.gv.data<T>(), out.data<T>(),
                                       row_max.data<float>(), row_sum.data<float>(), params},
      ws.data<float>(), ctx.stream());
  Tensor want_out = nans(out_shape), want_max = nans(stats_shape), want_sum = nans(stats_shape);
  kernels::cpu::attention_reference_forward(kernels::AttentionForwardArgs<double>{
      in.q.data<double>(), in.k.data<double>(), in.v.data<double>(), want_out.data<double>(),
      want_max.data<double>(), want_sum.data<double>(), params64});
  ctx.compare(name + ".out", out, want_out, "cuda.attention");
  ctx.compare(name + ".row_max", row_max, want_max, "cuda.attention");
  ctx.compare(name + ".row_sum", row_sum, want_sum, "cuda.attention");

  // Backward, on the reference's forward results rounded as the GPU holds them.
  Tensor dout = ctx.random(out_shape, dtype);
  Tensor out_in = want_out.to(dtype).to(DType::f64);
  Tensor max_in = want_max.to(DType::f32).to(DType::f64), sum_in = want_sum.to(DType::f32).to(DType::f64);
  Tensor g_dout = ctx.to_gpu(dout, dtype), g_out = ctx.to_gpu(out_in, dtype);
  Tensor g_max = ctx.to_gpu(max_in, DType::f32), g_sum = ctx.to_gpu(sum_in, DType::f32);
  auto backward = [&] {
    std::tuple<Tensor, Tensor, Tensor> grads{ctx.poisoned(in.q.shape(), dtype), ctx.poisoned(in.k.shape(), dtype),
                                             ctx.poisoned(in.v.shape(), dtype)};
    auto& [dq, dk, dv] = grads;
    Tensor scratch = workspace();
    kernels::cuda::attention_materialized_backward(
        kernels::AttentionBackwardArgs<T>{g_dout.data<T>(), in.gq.data<T>(), in.gk.data<T>(), in.gv.data<T>(),
                                          g_out.data<T>(), g_max.data<float>(), g_sum.data<float>(), dq.data<T>(),
                                          dk.data<T>(), dv.data<T>(), params},
        scratch.data<float>(), ctx.stream());
    return grads;
  };
  auto [dq, dk, dv] = backward();
  auto [dq2, dk2, dv2] = backward();
  Tensor want_dq = nans(in.q.shape()), want_dk = nans(in.k.shape()), want_dv = nans(in.v.shape());
  kernels::cpu::attention_reference_backward(kernels::AttentionBackwardArgs<double>{
      dout.data<double>(), in.q.data<double>(), in.k.data<double>(), in.v.data<double>(), out_in.data<double>(),
      max_in.data<double>(), sum_in.data<double>(), want_dq.data<double>(), want_dk.data<double>(),
      want_dv.data<double>(), params64});
  ctx.compare(name + ".dq", dq, want_dq, "cuda.attention");
  ctx.compare(name + ".dk", dk, want_dk, "cuda.attention");
  ctx.compare(name + ".dv", dv, want_dv, "cuda.attention");
  ctx.compare_bits(name + ".dq.repeats", dq2, dq);
  ctx.compare_bits(name + ".dk.repeats", dk2, dk);
  ctx.compare_bits(name + ".dv.repeats", dv2, dv);
}

}  // namespace

void check_attention(Context& ctx) {
  for_each_cuda_dtype([&]<class T>() {
    for (const Case& c : kCases) check_case<T>(ctx, c);
  });
}

}  // namespace alpha::check
#endif
