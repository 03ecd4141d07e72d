#include "alpha/ops/attention_jvp.h"

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "alpha/kernels/attention_jvp.h"
#include "alpha/ops/attention_params.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

// What both forms take: the attention inputs, tangents shaped as (q, k, v) on their device in their dtype,
// no dropout, and on a GPU head dimensions the CUDA kernels are built for.
void check_jvp_inputs(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tq,
                      const Tensor& tk, const Tensor& tv, const AttentionConfig& config) {
  check_attention_inputs(op, q, k, v, config);
  for (auto [name, t, primal] : {std::tuple<std::string_view, const Tensor&, const Tensor&>{"tq", tq, q},
                                 {"tk", tk, k},
                                 {"tv", tv, v}}) {
    check_defined(op, name, t);
    check_same_device(op, name, t, q);
    check_same_dtype(op, name, t, q);
    check_shape(op, name, t, primal.shape());
  }
  if (config.dropout_p != 0)
    raise<ValueError>(op, "config.dropout_p", "0 (the JVP of attention with dropout is not supported)",
                      std::to_string(config.dropout_p));
  if (q.device().is_cuda())
    for (auto [name, dim] : {std::pair<std::string_view, int64_t>{"q", q.size(3)}, {"v", v.size(3)}})
      if (dim > kernels::kAttentionJvpMaxHeadDim)
        raise<ShapeError>(op, name,
                          "a head dimension of at most " + std::to_string(kernels::kAttentionJvpMaxHeadDim) +
                              " on a GPU (the CUDA JVP kernels' widest tile)",
                          std::to_string(dim));
}

// Runs the saved-statistics or the fused kernel where the dispatch put it: on the CPU or on the GPU.
template <class T, class Where>
void run_kernel(const kernels::AttentionJvpArgs<T>& args, [[maybe_unused]] const Where& where) {
  if constexpr (std::is_same_v<Where, OnCpu>) kernels::cpu::attention_jvp(args);
#if ALPHA_WITH_CUDA
  else kernels::cuda::attention_jvp(args, where.stream);
#endif
}
template <class T, class Where>
void run_kernel(const kernels::AttentionJvpFusedArgs<T>& args, [[maybe_unused]] const Where& where) {
  if constexpr (std::is_same_v<Where, OnCpu>) kernels::cpu::attention_jvp_fused(args);
#if ALPHA_WITH_CUDA
  else kernels::cuda::attention_jvp_fused(args, where.stream);
#endif
}

// The operands as the kernels take them: q, k, v as they are (strided), the tangents made contiguous.
struct JvpOperands {
  const Tensor &q, &k, &v;
  Tensor tq, tk, tv;

  template <class T>
  kernels::AttentionJvpInputs<T> inputs() const {
    return {q.data<T>(), k.data<T>(), v.data<T>(), tq.data<T>(), tk.data<T>(), tv.data<T>()};
  }
};

}  // namespace

Tensor attention_jvp(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tq, const Tensor& tk,
                     const Tensor& tv, const Tensor& out, const Tensor& row_max, const Tensor& row_sum,
                     const AttentionConfig& config) {
  constexpr std::string_view op = "attention_jvp";
  check_jvp_inputs(op, q, k, v, tq, tk, tv, config);
  check_defined(op, "out", out);
  check_same_device(op, "out", out, q);
  check_same_dtype(op, "out", out, q);
  check_shape(op, "out", out, {q.size(0), q.size(1), q.size(2), v.size(3)});
  check_attention_statistics(op, q, row_max, row_sum);
  const JvpOperands operands{q, k, v, tq.contiguous(), tk.contiguous(), tv.contiguous()};
  Tensor out_c = out.contiguous(), row_max_c = row_max.contiguous(), row_sum_c = row_sum.contiguous();
  Tensor tangent_out = Tensor::empty(out.shape(), q.dtype(), q.device());
  dispatch_float(op, q, [&]<class T>(const auto& where) {
    run_kernel(kernels::AttentionJvpArgs<T>{operands.inputs<T>(), out_c.data<T>(), row_max_c.data<acc_t<T>>(),
                                            row_sum_c.data<acc_t<T>>(), tangent_out.data<T>(),
                                            attention_kernel_params<T>(q, k, v, config), /*tensor_cores=*/true},
               where);
  });
  return tangent_out;
}

AttentionJvpOutput attention_jvp_fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tq,
                                       const Tensor& tk, const Tensor& tv, const AttentionConfig& config) {
  constexpr std::string_view op = "attention_jvp_fused";
  check_jvp_inputs(op, q, k, v, tq, tk, tv, config);
  const JvpOperands operands{q, k, v, tq.contiguous(), tk.contiguous(), tv.contiguous()};
  const Shape out_shape = {q.size(0), q.size(1), q.size(2), v.size(3)};
  const Shape stats_shape = {q.size(0), q.size(2), q.size(1)};
  AttentionJvpOutput result{Tensor::empty(out_shape, q.dtype(), q.device()),
                            Tensor::empty(out_shape, q.dtype(), q.device()),
                            Tensor::empty(stats_shape, attention_statistics_dtype(q), q.device()),
                            Tensor::empty(stats_shape, attention_statistics_dtype(q), q.device())};
  dispatch_float(op, q, [&]<class T>(const auto& where) {
    run_kernel(kernels::AttentionJvpFusedArgs<T>{operands.inputs<T>(), result.out.data<T>(),
                                                 result.tangent_out.data<T>(), result.row_max.data<acc_t<T>>(),
                                                 result.row_sum.data<acc_t<T>>(),
                                                 attention_kernel_params<T>(q, k, v, config)},
               where);
  });
  return result;
}

}  // namespace alpha::ops
