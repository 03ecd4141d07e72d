#include "alpha/ops/linear_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "alpha/kernels/cross_entropy.h"
#include "alpha/ops/activation.h"
#include "alpha/ops/check.h"
#include "alpha/ops/cross_entropy.h"
#include "alpha/ops/elementwise.h"
#include "alpha/ops/index_check.h"
#include "alpha/ops/matmul.h"
#include "alpha/ops/optim.h"

namespace alpha::ops {

namespace {

constexpr std::string_view kOp = "linear_cross_entropy";

// Returns the number of rows, N.
int64_t check_operands(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& targets,
                       double logit_softcap, size_t chunk_bytes) {
  check_linear_operands(kOp, x, weight, bias);
  if (weight.size(0) < 1) raise<ShapeError>(kOp, "weight", "at least one class (row)", shape_str(weight.shape()));
  check_dtype(kOp, "targets", targets, {DType::i32});
  if (!targets.device().is_cpu()) check_same_device(kOp, "targets", targets, x);
  const Shape leading(x.shape().begin(), x.shape().end() - 1);
  const int64_t rows = shape_numel(leading);
  if (targets.shape() != leading && targets.shape() != Shape{rows})
    raise<ShapeError>(kOp, "targets", "shape " + shape_str(leading) + " or [" + std::to_string(rows) + "]",
                      shape_str(targets.shape()));
  if (!(logit_softcap >= 0.0 && std::isfinite(logit_softcap)))
    raise<ValueError>(kOp, "logit_softcap", "0 (none) or a finite cap > 0", std::to_string(logit_softcap));
  if (chunk_bytes == 0) raise<ValueError>(kOp, "chunk_bytes", "a positive byte count", "0");
  return rows;
}

}  // namespace

LinearCrossEntropy linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        const Tensor& targets, bool need_dx, bool need_dweight, bool need_dbias,
                                        double logit_softcap, size_t chunk_bytes, bool wide_param_grads,
                                        bool targets_checked) {
  const int64_t rows = check_operands(x, weight, bias, targets, logit_softcap, chunk_bytes);
  const bool need_grads = need_dx || need_dweight || need_dbias;
  if (need_grads && x.dtype() == DType::f16)
    raise<DTypeError>(kOp, "x",
                      "bf16, f32 or f64 when gradients are asked for (an f16 gradient needs the loss scale, which "
                      "only the backward knows: use linear and cross_entropy)",
                      "f16");
  const int64_t features = x.size(-1), vocab = weight.size(0);
  const Device device = x.device();
  const DType accumulation = accumulation_dtype(x.dtype());

  // The targets on the host (validated there: no wait for the device unless they live on it; none when the
  // caller checked them) and on the device.
  const Tensor host_targets = targets_checked ? Tensor() : targets.to(Device::cpu()).contiguous().reshape({rows});
  const int64_t counted =
      targets_checked ? rows : check_index_range(kOp, "targets", host_targets, vocab, "row", kIgnoreIndex);
  const Tensor device_targets =
      targets.device() == device ? targets.contiguous().reshape({rows}) : host_targets.to(device);

  // As few chunks as keep each chunk's logits within chunk_bytes, of equal rows (the last may be shorter).
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const size_t logits_bytes = size_t(rows) * size_t(vocab) * dtype_size(x.dtype());
  const int64_t wanted_chunks = std::max<int64_t>(int64_t((logits_bytes + chunk_bytes - 1) / chunk_bytes), 1);
  const int64_t chunk_rows = std::max<int64_t>(ceil_div(rows, wanted_chunks), 1);
  const int64_t chunks = std::max<int64_t>(ceil_div(rows, chunk_rows), 1);

  const Tensor x_rows = x.reshape({rows, features});
  // Each chunk's kernel writes the mean over its counted rows into its own slot; the loss is their
  // average weighted by the chunks' counts (known on the host from the validation).
  Tensor chunk_losses = Tensor::empty({chunks}, accumulation, device);
  Tensor chunk_counts = Tensor::empty({chunks}, DType::i64, device);  // the kernel's counts (the host has them)
  std::vector<double> chunk_weights(size_t(chunks), 0.0);
  // A chunk's rows that count (all of them when the targets were checked, none being ignored).
  auto counted_in = [&](int64_t first, int64_t count) {
    if (targets_checked) return count;
    const int32_t* host_target = host_targets.data<int32_t>() + first;
    return int64_t(std::count_if(host_target, host_target + count, [](int32_t t) { return t != kIgnoreIndex; }));
  };
  LinearCrossEntropy out;
  if (need_dx && chunks > 1) out.dx = Tensor::empty({rows, features}, x.dtype(), device);
  // dW and db: with several chunks (or wide_param_grads) summed over the chunks by their GEMM in the
  // accumulation dtype (bf16 operands into f32: no chunk's gradient stored apart, widened and added); with one
  // chunk in x's dtype, from linear_backward.
  const bool sum_params = chunks > 1 || wide_param_grads;
  if (sum_params && need_dweight) out.dweight = Tensor::empty({vocab, features}, accumulation, device);
  if (sum_params && need_dbias) out.dbias = Tensor::empty({vocab}, accumulation, device);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = c * chunk_rows, count = std::min(chunk_rows, rows - first);
    if (counted > 0) chunk_weights[size_t(c)] = double(counted_in(first, count)) / double(counted);
    const Tensor x_chunk = x_rows.slice(0, first, first + count);
    Tensor logits = linear(x_chunk, weight, bias);  // [count, V]
    if (logit_softcap > 0) logits = softcap(logits, logit_softcap);  // the uncapped ones are released
    // Without a cap the gradient overwrites the logits; the cap's backward needs the capped logits kept.
    Tensor dlogits = !need_grads         ? Tensor()
                     : logit_softcap > 0 ? Tensor::empty(logits.shape(), logits.dtype(), device)
                                         : logits;
    dispatch_float(kOp, x, [&]<class T>(const auto& where) {
      using A = acc_t<T>;
      Tensor lse = Tensor::empty({count}, accumulation, device);
      const int32_t* chunk_targets = device_targets.data<int32_t>() + first;
      const kernels::CrossEntropyArgs<T> forward{logits.data<T>(),
                                                 chunk_targets,
                                                 lse.data<A>(),
                                                 chunk_losses.data<A>() + c,
                                                 chunk_counts.data<int64_t>() + c,
                                                 count,
                                                 vocab,
                                                 kIgnoreIndex};
      if (!need_grads) {
        ALPHA_KERNEL(cross_entropy)(where, forward);
        return;
      }
      // dlogits of the mean over every counted row of x, not just this chunk's, in the same pass as the loss.
      const A scale = counted > 0 ? A(1.0 / double(counted)) : A(0);
      const kernels::CrossEntropyWithGradArgs<T> with_grad{forward, dlogits.data<T>(), scale};
      ALPHA_KERNEL(cross_entropy_with_grad)(where, with_grad);
    });
    if (!need_grads) continue;
    if (logit_softcap > 0) dlogits = softcap_backward(dlogits, logits, logit_softcap);  // through the cap
    const bool need_params = need_dweight || need_dbias;
    if (need_dx || (need_params && !sum_params)) {  // dx, and one chunk's dW and db (the whole) beside it
      LinearGrads grads = linear_backward(dlogits, x_chunk, weight, need_dx, need_dweight && !sum_params,
                                          need_dbias && !sum_params);
      if (need_dx && chunks == 1) out.dx = grads.dx;
      else if (need_dx) out.dx.slice(0, first, first + count).copy_from(grads.dx);
      if (!sum_params) out.dweight = grads.dweight, out.dbias = grads.dbias;
    }
    if (need_params && sum_params) linear_param_grads_into(dlogits, x_chunk, out.dweight, out.dbias, c > 0);
  }
  if (chunks == 1) {
    out.loss = chunk_losses.reshape({});
  } else {
    // Each chunk's loss times its weight, a run of chunks of one weight at a time (with checked targets: all but
    // the last chunk, and that one): the weights stay host values, no copy of them goes to the device.
    for (int64_t c = 0, end = 0; c < chunks; c = end) {
      for (end = c + 1; end < chunks && chunk_weights[size_t(end)] == chunk_weights[size_t(c)];) ++end;
      std::vector<Tensor> run{chunk_losses.slice(0, c, end)};
      scale_grads(run, chunk_weights[size_t(c)]);
    }
    out.loss = sum(chunk_losses);
  }
  if (need_dx) out.dx = out.dx.reshape(x.shape());
  if (!wide_param_grads) {  // the sums rounded once to x's dtype (no pass when they are in it)
    if (need_dweight) out.dweight = out.dweight.to(x.dtype());
    if (need_dbias) out.dbias = out.dbias.to(x.dtype());
  }
  return out;
}

}  // namespace alpha::ops
