#include "alpha/ops/attention_jvp.h"

#include <string>
#include <tuple>

#include "alpha/kernels/attention_jvp.h"
#include "alpha/ops/attention_params.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

// What both forms take: the attention inputs, tangents shaped as (q, k, v) on their device in their dtype,
// no dropout, and a CPU device (no GPU kernels yet).
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
  if (!q.device().is_cpu())
    raise<DeviceError>(op, "q", "a CPU tensor (the GPU JVP kernels are not built yet: issue 6)", q.device().str());
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
  dispatch_cpu_float(op, q, [&]<class T>() {
    kernels::cpu::attention_jvp(kernels::AttentionJvpArgs<T>{
        operands.inputs<T>(), out_c.data<T>(), row_max_c.data<acc_t<T>>(), row_sum_c.data<acc_t<T>>(),
        tangent_out.data<T>(), attention_kernel_params<T>(q, k, v, config)});
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
  dispatch_cpu_float(op, q, [&]<class T>() {
    kernels::cpu::attention_jvp_fused(kernels::AttentionJvpFusedArgs<T>{
        operands.inputs<T>(), result.out.data<T>(), result.tangent_out.data<T>(), result.row_max.data<acc_t<T>>(), result.row_sum.data<acc_t<T>>(),
        attention_kernel_params<T>(q, k, v, config)});
  });
  return result;
}

}  // namespace alpha::ops
