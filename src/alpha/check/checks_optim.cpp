// Harness checks of the CUDA optimiser kernels (kernels/cuda/optim.cu):
// - adamw_step at every size, for T = f32, bf16 and f16 (G = T), against the CPU kernel in f64 (row
//   cuda.adamw) and bit for bit against the CPU kernel in f32 rounded to T (the CUDA kernel rounds each
//   operation as the CPU does in f32: the claim is exact agreement);
// - mixed precision (T = f32 master, G = bf16 or f16 grad and compute copy) at every size, bit for bit
//   against the CPU's mixed kernel and against f64; the same with the compute copy rounded stochastically
//   (within one gap of f64: row cuda.adamw.stochastic_rounding), and stochastic_round bit for bit against the
//   CPU's and the step's copy;
// - sum_squares against f64 (row cuda.grad_norm, the f64 sums being added in another order) and against
//   itself run again (it must repeat bit for bit);
// - the grad norm's finish kernels (grad_norm, clip_coefficient, scale_by) bit for bit against the CPU's,
//   and the ops: global_grad_norm over a list of grads against the CPU op in f64, repeated bit for bit,
//   and clipping with the norm on the device against clipping with it on the host, bit for bit;
// - the trainer's queued step: step_guard's factor bit for bit against the CPU op's, AdamW over f32 masters with
//   bf16 compute copies reading that factor on the device against the host factor, bit for bit, the same with
//   the per-step terms read on the device and the copies rounded stochastically with the terms' step (as a
//   replayed CUDA graph runs it) against the host's configs, and a NaN factor (an infinite loss) leaving every
//   param, moment and copy as it was.
#if ALPHA_WITH_CUDA
#include <cmath>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "alpha/check/families.h"
#include "alpha/kernels/optim.h"
#include "alpha/ops/optim.h"

namespace alpha::check {

namespace {

// One step's configuration: a resumed run (step 3), weight decay, clipping by 0.7.
struct Step {
  double lr = 1e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1, grad_scale = 0.7;
  int64_t step = 3;
};
constexpr Step kStep;

template <class T, class G>
kernels::AdamWArgs<T, G> adamw_args(T* param, const G* grad, T* m, T* v, G* copy, int64_t n) {
  using A = acc_t<T>;
  return {param, grad, m, v, A(kStep.lr), A(kStep.beta1), A(kStep.beta2), A(kStep.eps), A(kStep.weight_decay),
          A(kStep.grad_scale), kStep.step, n, copy};
}

// Random AdamW state (v > 0) rounded to `state`, and a gradient rounded to `grad`, all f64 on the CPU.
struct AdamWState {
  Tensor param, grad, m, v;
  AdamWState(Context& ctx, int64_t n, DType state, DType grad_dtype)
      : param(ctx.random({n}, state)), grad(ctx.random({n}, grad_dtype)), m(ctx.random({n}, state, -0.1, 0.1)),
        v(ctx.random({n}, state, 0.01, 1.0)) {}
};

// T = G: the GPU step against the CPU kernel in f64 and, bit for bit, in f32.
template <class T>
void check_adamw(Context& ctx, int64_t n) {
  const DType dtype = dtype_of<T>;
  AdamWState s(ctx, n, dtype, dtype);
  Tensor param = ctx.to_gpu(s.param, dtype), grad = ctx.to_gpu(s.grad, dtype);
  Tensor m = ctx.to_gpu(s.m, dtype), v = ctx.to_gpu(s.v, dtype);
  kernels::cuda::adamw_step(adamw_args<T, T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), nullptr, n),
                            ctx.stream());
  Tensor p64 = s.param.clone(), m64 = s.m.clone(), v64 = s.v.clone();
  kernels::cpu::adamw_step(adamw_args<double, double>(p64.data<double>(), s.grad.data<double>(), m64.data<double>(),
                                                      v64.data<double>(), nullptr, n));
  Tensor p32 = s.param.to(DType::f32), g32 = s.grad.to(DType::f32), m32 = s.m.to(DType::f32), v32 = s.v.to(DType::f32);
  kernels::cpu::adamw_step(adamw_args<float, float>(p32.data<float>(), g32.data<float>(), m32.data<float>(),
                                                    v32.data<float>(), nullptr, n));
  for (auto [name, got, want, exact] : {std::tuple<const char*, const Tensor&, const Tensor&, const Tensor&>{
                                            "adamw.param", param, p64, p32},
                                        {"adamw.m", m, m64, m32},
                                        {"adamw.v", v, v64, v32}}) {
    ctx.compare(name, got, want, "cuda.adamw");
    ctx.compare_bits(std::string(name) + ".same_bits_as_cpu_f32", got, exact.to(dtype));
  }
}

// The bits of a stochastically rounded compute copy: an arbitrary seed, tensor 3 at the step, from element 11.
const kernels::StochasticRounding kRounding{0x5eed, kernels::stochastic_rounding_stream(3, kStep.step), 11};

// f32 master param, m, v; G grad and compute copy, rounded to nearest or stochastically.
template <class G>
void check_mixed_adamw(Context& ctx, int64_t n, bool stochastic) {
  const DType low = dtype_of<G>;
  AdamWState s(ctx, n, DType::f32, low);
  Tensor param = ctx.to_gpu(s.param, DType::f32), grad = ctx.to_gpu(s.grad, low);
  Tensor m = ctx.to_gpu(s.m, DType::f32), v = ctx.to_gpu(s.v, DType::f32), copy = ctx.poisoned({n}, low);
  auto rounded = [stochastic](kernels::AdamWArgs<float, G> args) {
    args.stochastic_rounding = stochastic;
    args.rounding = kRounding;
    return args;
  };
  kernels::cuda::adamw_step(rounded(adamw_args<float, G>(param.data<float>(), grad.data<G>(), m.data<float>(),
                                                         v.data<float>(), copy.data<G>(), n)),
                            ctx.stream());
  Tensor p32 = s.param.to(DType::f32), g = s.grad.to(low), m32 = s.m.to(DType::f32), v32 = s.v.to(DType::f32);
  Tensor copy_cpu = Tensor::full({n}, NAN, low);
  kernels::cpu::adamw_step(rounded(adamw_args<float, G>(p32.data<float>(), g.data<G>(), m32.data<float>(),
                                                        v32.data<float>(), copy_cpu.data<G>(), n)));
  Tensor p64 = s.param.clone(), m64 = s.m.clone(), v64 = s.v.clone();
  kernels::cpu::adamw_step(adamw_args<double, double>(p64.data<double>(), s.grad.data<double>(), m64.data<double>(),
                                                      v64.data<double>(), nullptr, n));
  const std::string prefix =
      "adamw_mixed_" + std::string(dtype_name(low)) + (stochastic ? "_stochastic_rounding" : "");
  for (auto [name, got, want, exact] : {std::tuple<const char*, const Tensor&, const Tensor&, const Tensor&>{
                                            ".param", param, p64, p32},
                                        {".m", m, m64, m32},
                                        {".v", v, v64, v32},
                                        {".compute_copy", copy, p64, copy_cpu}}) {
    const bool rounded_copy = stochastic && std::string_view(name) == ".compute_copy";
    ctx.compare(prefix + name, got, want, rounded_copy ? "cuda.adamw.stochastic_rounding" : "cuda.adamw");
    ctx.compare_bits(prefix + name + ".same_bits_as_cpu", got, exact);
  }
  if (!stochastic) return;
  // stochastic_round from the updated master: the step's copy again, and the CPU's bits.
  Tensor again = ctx.poisoned({n}, low), again_cpu = Tensor::full({n}, NAN, low);
  kernels::cuda::stochastic_round(kernels::StochasticRoundArgs<G>{param.data<float>(), again.data<G>(), n, kRounding},
                                  ctx.stream());
  kernels::cpu::stochastic_round(kernels::StochasticRoundArgs<G>{p32.data<float>(), again_cpu.data<G>(), n, kRounding});
  ctx.compare_bits("stochastic_round_" + std::string(dtype_name(low)) + ".same_bits_as_cpu", again, again_cpu);
  ctx.compare_bits("stochastic_round_" + std::string(dtype_name(low)) + ".same_bits_as_the_step", again, copy);
}

template <class T>
void check_sum_squares(Context& ctx, int64_t n) {
  const DType dtype = dtype_of<T>;
  Tensor x = ctx.random({n}, dtype);
  Tensor dx = ctx.to_gpu(x, dtype);
  auto gpu = [&] {
    Tensor total = ctx.poisoned({1}, DType::f64);
    kernels::cuda::sum_squares(kernels::SumSquaresArgs<T>{dx.data<T>(), total.data<double>(), n}, ctx.stream());
    return total;
  };
  Tensor first = gpu(), second = gpu();
  double want = NAN;
  kernels::cpu::sum_squares(kernels::SumSquaresArgs<double>{x.data<double>(), &want, n});
  ctx.compare("sum_squares", first, Tensor::from_vector<double>({want}, {1}), tolerance("cuda.grad_norm", dtype));
  ctx.compare_bits("sum_squares.repeats", second, first);
}

// grad_norm, clip_coefficient and scale_by against the CPU's, bit for bit.
template <class T>
void check_norm_kernels(Context& ctx) {
  const DType dtype = dtype_of<T>;
  Tensor squares = ctx.random({37}, DType::f64, 0.0, 100.0);
  Tensor d_squares = ctx.to_gpu(squares, DType::f64);
  Tensor norm = ctx.poisoned({1}, DType::f64), coefficient = ctx.poisoned({1}, DType::f64);
  kernels::cuda::grad_norm(kernels::GradNormArgs{d_squares.data<double>(), 37, norm.data<double>()}, ctx.stream());
  kernels::cuda::clip_coefficient(kernels::ClipCoefficientArgs{norm.data<double>(), 3.0, coefficient.data<double>()},
                                  ctx.stream());
  double want_norm = NAN, want_coefficient = NAN;
  kernels::cpu::grad_norm(kernels::GradNormArgs{squares.data<double>(), 37, &want_norm});
  kernels::cpu::clip_coefficient(kernels::ClipCoefficientArgs{&want_norm, 3.0, &want_coefficient});
  ctx.compare_bits("grad_norm.same_bits_as_cpu", norm, Tensor::from_vector<double>({want_norm}, {1}));
  ctx.compare_bits("clip_coefficient.same_bits_as_cpu", coefficient,
                   Tensor::from_vector<double>({want_coefficient}, {1}));
  const int64_t n = kOddSizes[1];
  Tensor x = ctx.random({n}, dtype);
  Tensor dx = ctx.to_gpu(x, dtype), x32 = x.to(DType::f32);
  kernels::cuda::scale_by(kernels::ScaleByArgs<T>{dx.data<T>(), coefficient.data<double>(), n}, ctx.stream());
  kernels::cpu::scale_by(kernels::ScaleByArgs<float>{x32.data<float>(), &want_coefficient, n});
  ctx.compare_bits("scale_by.same_bits_as_cpu_f32", dx, x32.to(dtype));
}

// The ops over a list of grads of several sizes: the norm against the CPU's f64 op, repeated bit for bit;
// clipping with the norm on the device against clipping with it read back, bit for bit.
template <class T>
void check_grad_norm_ops(Context& ctx) {
  const DType dtype = dtype_of<T>;
  std::vector<Tensor> host, first, second;
  for (int64_t n : {int64_t(1), int64_t(4099), int64_t(65536), int64_t(1000003)}) {
    host.push_back(ctx.random({n}, dtype, -2.0, 2.0));
    first.push_back(ctx.to_gpu(host.back(), dtype));
    second.push_back(ctx.to_gpu(host.back(), dtype));
  }
  Tensor norm = ops::global_grad_norm_tensor(first);
  const double want = ops::global_grad_norm(host);
  ctx.compare("global_grad_norm", norm.reshape({1}), Tensor::from_vector<double>({want}, {1}),
              tolerance("cuda.grad_norm", dtype));
  ctx.compare_bits("global_grad_norm.repeats", ops::global_grad_norm_tensor(first), norm);
  const double max_norm = 0.25 * want;  // clips: the coefficient is about 1/4
  Tensor on_device = ops::clip_grad_norm(first, max_norm, norm);
  const double on_host = ops::clip_grad_norm(second, max_norm, norm.to(Device::cpu()).item());
  ctx.compare_bits("clip_grad_norm.device_coefficient_same_bits_as_host", on_device.reshape({1}),
                   Tensor::from_vector<double>({on_host}, {1}));
  for (size_t k = 0; k < first.size(); ++k)
    ctx.compare_bits("clip_grad_norm.grads[" + std::to_string(k) + "].device_norm_same_bits_as_host", first[k],
                     second[k]);
}

// The trainer's queued step (train::AdamW::queued_step): f32 masters, f32 grads, bf16 compute copies.
void check_queued_step(Context& ctx) {
  struct List {
    std::vector<Tensor> params, grads, ms, vs, copies;
  };
  std::vector<int64_t> sizes{1, 4099, 65536};
  std::vector<AdamWState> state;
  for (int64_t n : sizes) state.emplace_back(ctx, n, DType::f32, DType::f32);
  auto make = [&] {  // the same starting state on the GPU each time
    List l;
    for (const AdamWState& s : state) {
      l.params.push_back(ctx.to_gpu(s.param, DType::f32));
      l.grads.push_back(ctx.to_gpu(s.grad, DType::f32));
      l.ms.push_back(ctx.to_gpu(s.m, DType::f32));
      l.vs.push_back(ctx.to_gpu(s.v, DType::f32));
      l.copies.push_back(l.params.back().to(DType::bf16));
    }
    return l;
  };
  std::vector<ops::AdamWConfig> configs(sizes.size(), {1e-2, 0.9, 0.95, 1e-8, 0.1, 3});
  const double loss_scale = 4.0, max_norm = 0.5;
  const Tensor norm = ops::global_grad_norm_tensor(make().grads);
  const Tensor losses = Tensor::from_vector<float>({2.5f, 3.25f}, {2}).to(ctx.gpu());  // the trainer's f32
  const Tensor factor = ops::step_guard(norm, losses, loss_scale, max_norm);
  const Tensor cpu_factor = ops::step_guard(norm.to(Device::cpu()), losses.to(Device::cpu()), loss_scale, max_norm);
  ctx.compare_bits("step_guard.same_bits_as_cpu", factor.reshape({1}), cpu_factor.reshape({1}));

  // Every param, moment and copy of `got` bit for bit against `want`'s, the rows named prefix.what[k].suffix.
  auto compare_lists = [&](const std::string& prefix, const List& got, const List& want, const std::string& suffix) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      const std::string at = "[" + std::to_string(k) + "]" + suffix;
      ctx.compare_bits(prefix + ".params" + at, got.params[k], want.params[k]);
      ctx.compare_bits(prefix + ".m" + at, got.ms[k], want.ms[k]);
      ctx.compare_bits(prefix + ".v" + at, got.vs[k], want.vs[k]);
      ctx.compare_bits(prefix + ".copies" + at, got.copies[k], want.copies[k]);
    }
  };
  List on_device = make(), on_host = make();
  ops::adamw_step(on_device.params, on_device.grads, on_device.ms, on_device.vs, on_device.copies, configs, factor);
  ops::adamw_step(on_host.params, on_host.grads, on_host.ms, on_host.vs, on_host.copies, configs, cpu_factor.item());
  compare_lists("queued_step", on_device, on_host, ".same_bits_as_host_factor");

  // As a captured step replays it: the terms (learning rate, bias corrections, step) read on the device, the
  // configs' stale, and the copies rounded stochastically with the terms' step.
  std::vector<ops::AdamWConfig> rounded = configs, stale;
  for (size_t k = 0; k < rounded.size(); ++k)
    rounded[k].stochastic_rounding = ops::StochasticRounding{77, uint32_t(k), 0};
  stale = rounded;
  for (auto& c : stale) c.lr = 1.0, c.step = 1;
  const Tensor terms = ops::adamw_step_terms(make().params, rounded).to(ctx.gpu());
  List replayed = make(), direct = make();
  ops::adamw_step(replayed.params, replayed.grads, replayed.ms, replayed.vs, replayed.copies, stale, factor, terms);
  ops::adamw_step(direct.params, direct.grads, direct.ms, direct.vs, direct.copies, rounded, cpu_factor.item());
  compare_lists("queued_step.device_terms_stochastic", replayed, direct, ".same_bits_as_host_configs");

  const Tensor bad_losses = Tensor::from_vector<float>({2.5f, INFINITY}, {2}).to(ctx.gpu());
  const Tensor skip = ops::step_guard(norm, bad_losses, loss_scale, max_norm);
  List skipped = make(), untouched = make();
  ops::adamw_step(skipped.params, skipped.grads, skipped.ms, skipped.vs, skipped.copies, configs, skip);
  compare_lists("queued_step.nan_factor", skipped, untouched, ".untouched");
}

}  // namespace

void check_optim(Context& ctx) {
  const std::vector<int64_t> sizes = ctx.element_counts();
  for_each_cuda_dtype([&]<class T>() {
    for (int64_t n : sizes) {
      check_adamw<T>(ctx, n);
      check_sum_squares<T>(ctx, n);
    }
    check_norm_kernels<T>(ctx);
    check_grad_norm_ops<T>(ctx);
  });
  for (int64_t n : sizes)
    for (bool stochastic : {false, true}) {
      check_mixed_adamw<bf16>(ctx, n, stochastic);
      check_mixed_adamw<f16>(ctx, n, stochastic);
    }
  check_queued_step(ctx);
}

}  // namespace alpha::check
#endif
