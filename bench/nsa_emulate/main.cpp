// The driver of bench/nsa_emulate.sh: the CUDA NSA kernels' code, run on the CPU through emu.h, against the f64
// reference (kernels/nsa_reference.h) on the same inputs and the same kept blocks (given_selected), as
// tests/kernels/test_nsa_cuda.cpp compares them on a GPU. Prints each output's and gradient's largest error per
// unit of max(1, max|want|) (dk_pos: of max|dk_weight|, as dk_pos is 0 in exact arithmetic). Exit 1 above 1e-4.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "alpha/kernels/nsa_reference.h"
#include "alpha/ops/nsa.h"

namespace alpha::kernels::emu {
template <class T>
void nsa_forward(const NsaForwardArgs<T>& args, Stream stream);
template <class T>
void nsa_backward(const NsaBackwardArgs<T>& args, Stream stream);
}  // namespace alpha::kernels::emu

using namespace alpha;
static uint64_t seed = 1;
Tensor rnd(Shape s, double lo = -1, double hi = 1) { return Tensor::uniform(std::move(s), lo, hi, seed++, DType::f64); }

double largest_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>())
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

double err(const Tensor& got, const Tensor& want, const char* name, const std::string& label, double unit = 1) {
  auto g = got.to(DType::f64).to_vector<double>(), w = want.to_vector<double>();
  double largest = unit, e = 0;
  int bad = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(g[i]) != std::isnan(w[i]) || (std::isinf(w[i]) && g[i] != w[i])) {
      ++bad;
      continue;
    }
    if (!std::isfinite(w[i])) continue;
    largest = std::max(largest, std::abs(w[i]));
    e = std::max(e, std::abs(g[i] - w[i]));
  }
  std::printf("  %-28s %-12s err/scale %.3g%s\n", label.c_str(), name, e / largest, bad ? "  NAN/INF MISMATCH" : "");
  return bad ? 1e9 : e / largest;
}

int main(int argc, char** argv) {
  struct Case {
    std::string name;
    int64_t B, T, Hq, Hkv, D, Dv;
    ops::NsaConfig c;
  };
  std::vector<Case> cases = {
      {"t1", 1, 1, 1, 1, 8, 8, {0, 32, 16, 64, 16, 512}},
      {"t17_g2", 1, 17, 2, 1, 16, 16, {0, 8, 4, 8, 4, 12}},
      {"t32_g1", 1, 32, 1, 1, 8, 8, {0, 8, 4, 8, 4, 12}},
      {"t65_g3_odd", 1, 65, 3, 1, 12, 10, {0.7, 7, 3, 5, 4, 10}},
      {"t70_g2_b2_hkv2", 2, 70, 4, 2, 8, 12, {0, 8, 4, 4, 6, 20}},
      {"t80_g5_d40", 1, 80, 5, 1, 40, 36, {0, 16, 8, 16, 4, 40}},
      {"t100_g1_paper", 1, 100, 1, 1, 16, 16, {0, 32, 16, 64, 16, 512}},
      {"t600_g16_d64_v48", 1, 600, 16, 1, 64, 48, {0, 8, 4, 8, 6, 40}},
      {"ties_t200_g2", 1, 200, 2, 1, 16, 16, {0, 8, 4, 8, 5, 16}},  // k_weight 0: every free block tied
      {"t300_g4_d192_v128", 1, 300, 8, 2, 192, 128, {0, 16, 8, 16, 5, 64}},
  };
  double worst = 0;
  for (auto& k : cases) {
    if (argc > 1 && k.name.find(argv[1]) == std::string::npos) continue;
    const int64_t l = k.c.block_len;
    ops::NsaInputs in{rnd({k.B, k.T, k.Hq, k.D}, -2, 2),
                      rnd({k.B, k.T, k.Hkv, k.D}),
                      rnd({k.B, k.T, k.Hkv, k.Dv}),
                      rnd({k.B, k.T, k.Hq, 3}, -2, 2),
                      rnd({l, k.D}),
                      rnd({k.D, l * k.D}, -0.3, 0.3),
                      rnd({l, k.Dv}),
                      rnd({k.Dv, l * k.Dv}, -0.3, 0.3)};
    if (k.name.rfind("ties", 0) == 0) in.k_weight = Tensor::zeros(in.k_weight.shape(), DType::f64);
    const DType lo = getenv("BF16") ? DType::bf16 : DType::f32;
    ops::NsaInputs in32{in.q.to(lo),     in.k.to(lo),        in.v.to(lo),     in.gates.to(lo),
                        in.k_pos.to(lo), in.k_weight.to(lo), in.v_pos.to(lo), in.v_weight.to(lo)};
    in = {in32.q.to(DType::f64),     in32.k.to(DType::f64),       in32.v.to(DType::f64),
          in32.gates.to(DType::f64), in32.k_pos.to(DType::f64),   in32.k_weight.to(DType::f64),
          in32.v_pos.to(DType::f64), in32.v_weight.to(DType::f64)};
    auto poison = [](Shape s, DType d) { return Tensor::full(std::move(s), d == DType::i32 ? -7.0 : NAN, d); };
    ops::NsaOutput g = ops::nsa_allocate_output(in32, k.c, poison);
    if (lo == DType::bf16)
      kernels::emu::nsa_forward(ops::nsa_forward_args<bf16>(in32, g, k.c), Stream{});
    else
      kernels::emu::nsa_forward(ops::nsa_forward_args<float>(in32, g, k.c), Stream{});
    ops::NsaOutput own = ops::nsa_allocate_output(in, k.c, poison);
    kernels::cpu::nsa_reference_forward(ops::nsa_forward_args<double>(in, own, k.c));
    auto gs = g.selected.to_vector<int32_t>(), os = own.selected.to_vector<int32_t>();
    int diff = 0;
    for (size_t i = 0; i < gs.size(); ++i) diff += gs[i] != os[i];
    std::printf("%s: %d of %zu kept-block slots differ from the f64 choice\n", k.name.c_str(), diff, gs.size());
    ops::NsaOutput ref = ops::nsa_allocate_output(in, k.c, poison);
    auto fa = ops::nsa_forward_args<double>(in, ref, k.c);
    fa.given_selected = g.selected.data<int32_t>();
    kernels::cpu::nsa_reference_forward(fa);
    worst = std::max(worst, err(g.out, ref.out, "out", k.name));
    worst = std::max(worst, err(g.branch_out, ref.branch_out, "branch_out", k.name));
    worst = std::max(worst, err(g.compressed_k, ref.compressed_k, "compressed_k", k.name));
    worst = std::max(worst, err(g.compressed_v, ref.compressed_v, "compressed_v", k.name));
    worst = std::max(worst, err(g.row_max, ref.row_max, "row_max", k.name));
    worst = std::max(worst, err(g.row_sum, ref.row_sum, "row_sum", k.name));
    Tensor dout = rnd({k.B, k.T, k.Hq, k.Dv}).to(lo);
    ops::NsaGrads gg = ops::nsa_allocate_grads(in32, poison);
    if (lo == DType::bf16)
      kernels::emu::nsa_backward(ops::nsa_backward_args<bf16>(dout, in32, g, gg, k.c), Stream{});
    else
      kernels::emu::nsa_backward(ops::nsa_backward_args<float>(dout, in32, g, gg, k.c), Stream{});
    ops::NsaGrads rg = ops::nsa_allocate_grads(in, poison);
    kernels::cpu::nsa_reference_backward(ops::nsa_backward_args<double>(dout.to(DType::f64), in, ref, rg, k.c));
    const char* names[] = {"dq", "dk", "dv", "dgates", "dk_pos", "dk_weight", "dv_pos", "dv_weight"};
    auto a = gg.list(), b = rg.list();
    for (size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, err(a[i], b[i], names[i], k.name, i == 4 ? std::max(1.0, largest_abs(b[5])) : 1.0));
    if (getenv("CPU32")) {  // the f32 reference on the same choice, for scale
      ops::NsaOutput f = ops::nsa_allocate_output(in32, k.c, poison);
      auto fa32 = ops::nsa_forward_args<float>(in32, f, k.c);
      fa32.given_selected = g.selected.data<int32_t>();
      kernels::cpu::nsa_reference_forward(fa32);
      ops::NsaGrads cg = ops::nsa_allocate_grads(in32, poison);
      kernels::cpu::nsa_reference_backward(ops::nsa_backward_args<float>(dout, in32, f, cg, k.c));
      auto c = cg.list();
      for (size_t i = 0; i < c.size(); ++i)
        err(c[i], b[i], names[i], k.name + " cpu-f32", i == 4 ? std::max(1.0, largest_abs(b[5])) : 1.0);
    }
  }
  std::printf("worst %.3g\n", worst);
  return worst < 1e-4 ? 0 : 1;
}
