// The tape itself: needs-grad propagation, in-place accumulation (a leaf's whole pass at once), release of saved
// tensors, no_grad.
#include <gtest/gtest.h>

#include <cmath>

#include "alpha/autograd/functions.h"
#include "alpha/ops/elementwise.h"
#include "support/checks.h"

namespace alpha::autograd {
namespace {

TEST(Tape, RecordsOnlyWhenAnInputNeedsAGradient) {
  clear_tape();
  Variable a(test::random({3})), b(test::random({3}));
  Variable c = add(a, b);
  EXPECT_FALSE(c.requires_grad());
  EXPECT_EQ(tape_size(), 0u);
  Variable w(test::random({3}), true);
  Variable d = mul(c, w);
  EXPECT_TRUE(d.requires_grad());
  EXPECT_EQ(tape_size(), 1u);
  {
    NoGradGuard no_grad;
    Variable e = mul(d, w);
    EXPECT_FALSE(e.requires_grad());
    EXPECT_EQ(tape_size(), 1u);
  }
  clear_tape();
}

TEST(Tape, BackwardComputesOnlyNeededGradientsAndReleasesTheTape) {
  Variable x(test::random({4}, DType::f64), true);
  Variable y(test::random({4}, DType::f64));  // no gradient wanted
  Variable loss = sum(mul(x, y));
  backward(loss);
  EXPECT_EQ(tape_size(), 0u);
  EXPECT_TRUE(test::all_close(x.grad(), y.value(), "elementwise"));
  EXPECT_FALSE(y.grad().defined());
}

TEST(Tape, GradientsAccumulateInPlaceIntoTheSameBuffer) {
  Variable x(test::random({5}, DType::f64), true);
  backward(sum(scale(x, 2.0)));
  const void* buffer = x.grad().raw_data();
  backward(sum(scale(x, 3.0)));
  EXPECT_EQ(x.grad().raw_data(), buffer);
  EXPECT_TRUE(test::all_close(x.grad(), Tensor::full({5}, 5.0, DType::f64), "elementwise"));
  x.zero_grad();
  EXPECT_EQ(x.grad().raw_data(), buffer);
  EXPECT_EQ(x.grad().at({2}), 0.0);
}

TEST(Tape, AVariableUsedTwiceGetsBothContributions) {
  Variable x(test::random({6}, DType::f64), true);
  backward(sum(add(x, x)));
  EXPECT_TRUE(test::all_close(x.grad(), Tensor::full({6}, 2.0, DType::f64), "elementwise"));
}

// A leaf fed by two nodes (a tied embedding) gets this pass's two contributions summed first and added to its
// gradient once: g + (c + b), not (g + c) + b. With g = 1 and b = c = 2^-24 (half an f32 ulp of 1) the first
// gives 1 + 2^-23, the second rounds back to 1 twice. Gradient accumulation relies on it (micro-batches add
// whole gradients, as data-parallel ranks do).
TEST(Tape, ALeafFedTwiceAddsItsWholePassGradientOnce) {
  Variable x(test::random({4}), true);
  backward(sum(mul(x, Variable(Tensor::full({4}, 1.0, DType::f32)))));
  Variable half_ulp(Tensor::full({4}, std::ldexp(1.0, -24), DType::f32));
  backward(sum(add(mul(x, half_ulp), mul(x, half_ulp))));
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(x.grad().at({i}), 1.0 + std::ldexp(1.0, -23)) << i;
}

TEST(Tape, SavedTensorsAreReleasedWhenBackwardPassesTheirNode) {
  Variable x(test::random({8}, DType::f64), true);
  std::weak_ptr<Storage> saved;
  Variable loss;
  {
    Variable t(test::random({8}, DType::f64));
    saved = t.value().storage();
    loss = sum(mul(x, t));  // mul saves t
  }
  EXPECT_FALSE(saved.expired());
  backward(loss);
  EXPECT_TRUE(saved.expired());
}

TEST(Tape, ViewGradientsFlowIntoTheViewedRegion) {
  EXPECT_TRUE(test::gradcheck(
      [](const auto& v) { return reshape(slice(v[0], 1, 2, 5), {3, 3}); }, {test::random({3, 6}, DType::f64)}));
}

TEST(Tape, BackwardOnANonScalarNeedsASeed) {
  Variable x(test::random({3}, DType::f64), true);
  Variable y = scale(x, 2.0);
  EXPECT_ALPHA_ERROR(backward(y), ShapeError, "[backward]", "grad_output");
  clear_tape();
  EXPECT_ALPHA_ERROR(backward(Variable(test::random({1}))), ValueError, "[backward]", "root");
}

// Mixed precision: a parameter's bf16 conversion is made once and held until its value may change.
TEST(Tape, ACastParameterHoldsItsComputeCopyUntilItsValueMayChange) {
  Variable w(test::random({5, 3}), true);
  Variable first = cast(w, DType::bf16), second = cast(w, DType::bf16);
  EXPECT_EQ(first.value().raw_data(), second.value().raw_data());  // the held copy, not a second conversion
  EXPECT_TRUE(test::bit_equal(first.value(), w.value().to(DType::bf16)));
  EXPECT_NE(cast(w, DType::f16).value().dtype(), first.value().dtype());  // another dtype converts anew
  clear_tape();

  w.mutable_value().fill_(0.25);  // any write through mutable_value drops the copy
  EXPECT_FALSE(w.compute_copy().defined());
  Variable third = cast(w, DType::bf16);
  EXPECT_NE(third.value().raw_data(), first.value().raw_data());
  EXPECT_TRUE(test::bit_equal(third.value(), Tensor::full({5, 3}, 0.25, DType::bf16)));
  clear_tape();

  Variable input(test::random({4}));  // not a parameter: its tensor may be refilled, so nothing is held
  cast(input, DType::bf16);
  EXPECT_FALSE(input.compute_copy().defined());

  EXPECT_ALPHA_ERROR(w.keep_compute_copy(Tensor::zeros({3, 5}, DType::bf16)), ShapeError, "[Variable::keep_compute_copy]",
                     "copy");
  EXPECT_ALPHA_ERROR(third.keep_compute_copy(Tensor::zeros({5, 3}, DType::bf16)), ValueError,
                     "[Variable::keep_compute_copy]", "self");
  clear_tape();
}

// A parameter set to convert at each use holds nothing: every cast converts anew (the same bits), the gradient
// flows as through a held copy, and a copy cannot be handed to it; set back, it holds again.
TEST(Tape, AParameterSetNotToHoldConvertsAtEachUse) {
  Variable held(test::random({5, 3}), true), per_use(held.value().clone(), true);
  cast(held, DType::bf16);
  per_use.set_holds_compute_copy(false);
  EXPECT_FALSE(per_use.holds_compute_copy());
  Variable first = cast(per_use, DType::bf16), second = cast(per_use, DType::bf16);
  EXPECT_NE(first.value().raw_data(), second.value().raw_data());
  EXPECT_FALSE(per_use.compute_copy().defined());
  EXPECT_TRUE(test::bit_equal(first.value(), held.compute_copy()));
  EXPECT_ALPHA_ERROR(first.set_holds_compute_copy(false), ValueError, "[Variable::set_holds_compute_copy]", "leaf");
  clear_tape();
  const Tensor seed = test::random({5, 3}).to(DType::bf16);
  backward(cast(held, DType::bf16), seed);
  backward(cast(per_use, DType::bf16), seed);
  EXPECT_TRUE(test::bit_equal(per_use.grad(), held.grad()));
  EXPECT_ALPHA_ERROR(per_use.keep_compute_copy(first.value()), ValueError, "[Variable::keep_compute_copy]",
                     "convert at each use");
  held.set_holds_compute_copy(false);
  EXPECT_FALSE(held.compute_copy().defined()) << "setting it drops the held copy";
  per_use.set_holds_compute_copy(true);
  cast(per_use, DType::bf16);
  EXPECT_TRUE(per_use.compute_copy().defined());
  clear_tape();
}

TEST(Tape, SetGradKeepsTheGivenTensorAndBackwardAddsIntoIt) {
  Variable w(test::random({2, 3}), true, "w");
  Tensor bucket = test::random({10});
  w.set_grad(bucket.slice(0, 4, 10).view({2, 3}));
  EXPECT_TRUE(w.grad().shares_storage(bucket));
  std::vector<float> before = bucket.to_vector<float>();
  Tensor seed = test::random({2, 3});
  backward(w, seed);  // a leaf root: its gradient is added to what the buffer holds
  std::vector<float> after = bucket.to_vector<float>(), s = seed.to_vector<float>();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(after[i], before[i]) << "outside the view";
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(after[4 + i], before[4 + i] + s[i]);

  EXPECT_ALPHA_ERROR(w.set_grad(Tensor::zeros({3, 2}, DType::f32)), ShapeError, "[Variable::set_grad]", "grad");
  Variable input(test::random({4}));
  EXPECT_ALPHA_ERROR(input.set_grad(Tensor::zeros({4}, DType::f32)), ValueError, "[Variable::set_grad]", "self");
}

// identity(x) whose backward adds its gradient into x's slot when backward offers one (gradient_accumulator),
// and records whether it was offered.
Variable adding_identity(const Variable& x, bool& offered) {
  return record("adding_identity", x.value().clone(), {x}, [&] {
    return BackwardFn([&offered](const Tensor& g, const std::vector<bool>&) {
      Tensor slot = gradient_accumulator(0, g);
      offered = slot.defined();
      if (!offered) return std::vector<Tensor>{g};
      ops::add_(slot, g);
      return std::vector<Tensor>{slot};
    });
  });
}

TEST(Tape, BackwardOffersAnUnsharedSlotToAddInto) {
  // a = 2·x; y = a + 3·identity(a), summed: x's gradient is 2·(1 + 3) per element. The residual add hands a's
  // slot and its branch the same tensor; by the time the identity runs, the branch's scale has released its
  // share, so a's slot (holding the residual's contribution) is offered and the identity adds into it.
  clear_tape();
  Variable x(test::random({5}), true);
  Variable a = scale(x, 2.0);
  bool offered = false;
  backward(sum(add(a, scale(adding_identity(a, offered), 3.0))));
  EXPECT_TRUE(offered);
  for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 8.0f);

  // y = a + identity(a): the identity's own gradient is the residual's shared tensor, still held by the identity's
  // node when it runs, so nothing is offered (adding into it would change the identity's own gradient).
  Variable x2(test::random({5}), true);
  Variable a2 = scale(x2, 2.0);
  backward(sum(add(a2, adding_identity(a2, offered))));
  EXPECT_FALSE(offered);
  for (float v : x2.grad().to_vector<float>()) EXPECT_EQ(v, 4.0f);
  EXPECT_FALSE(gradient_accumulator(0, x.value()).defined());  // outside a backward function
}

TEST(Tape, BackwardOffersALeafFedTwiceItsPassSum) {
  // y = 3·w + identity(w) for a leaf w that already holds a gradient: the identity runs second and is offered
  // this pass's sum (holding the scale's 3), never w's gradient itself, which gets the pass's 4 added once.
  clear_tape();
  Variable w(test::random({5}), true);
  w.set_grad(Tensor::full({5}, 10.0, DType::f32));
  bool offered = false;
  Variable same = adding_identity(w, offered);  // recorded first, so backward runs it after the scale
  Variable tripled = scale(w, 3.0);
  backward(sum(add(tripled, same)));
  EXPECT_TRUE(offered);
  for (float v : w.grad().to_vector<float>()) EXPECT_EQ(v, 14.0f);
  // Fed once, a leaf is offered nothing.
  Variable once(test::random({5}), true);
  backward(sum(adding_identity(once, offered)));
  EXPECT_FALSE(offered);
  for (float v : once.grad().to_vector<float>()) EXPECT_EQ(v, 1.0f);
}

// identity(x) that records, when its backward runs, whether backward says its gradient is the seed 1.
Variable seed_probe(const Variable& x, bool& is_one) {
  return record("seed_probe", x.value().clone(), {x}, [&] {
    return BackwardFn([&is_one](const Tensor& g, const std::vector<bool>&) {
      is_one = gradient_is_one();
      return std::vector<Tensor>{g};
    });
  });
}

// identity(x) whose backward adds 1 into its gradient when the tape hands that over (own_gradient) and returns it,
// recording whether it was handed over.
Variable overwriting_identity(const Variable& x, bool& owned) {
  return record("overwriting_identity", x.value().clone(), {x}, [&] {
    return BackwardFn([&owned](const Tensor& g, const std::vector<bool>&) {
      Tensor own = own_gradient();
      owned = own.defined();
      if (!owned) return std::vector<Tensor>{g};
      EXPECT_EQ(own.storage(), g.storage());
      ops::add_(own, Tensor::full(own.shape(), 1.0, own.dtype()));
      return std::vector<Tensor>{own};
    });
  });
}

TEST(Tape, BackwardHandsANodeItsGradientWhenNoOneElseHoldsIt) {
  clear_tape();
  bool owned = false;
  Variable x(test::random({5}), true);
  backward(sum(scale(overwriting_identity(x, owned), 2.0)));  // g = 2, the scale's alone
  EXPECT_TRUE(owned);
  for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 3.0f);
  // The residual add hands its gradient to both its inputs: the identity's is shared while its node runs.
  Variable y(test::random({5}), true);
  Variable a = scale(y, 1.0);
  backward(sum(add(a, overwriting_identity(a, owned))));
  EXPECT_FALSE(owned);
  for (float v : y.grad().to_vector<float>()) EXPECT_EQ(v, 2.0f);
  // A given grad_output stays the caller's.
  Variable z(test::random({5}), true);
  backward(overwriting_identity(z, owned), Tensor::full({5}, 1.0, DType::f32));
  EXPECT_FALSE(owned);
  EXPECT_FALSE(own_gradient().defined());  // outside a backward function
}

TEST(Tape, GradientIsOneOnlyAtTheRootBackwardSeeded) {
  clear_tape();
  Variable x(test::random({1}), true);
  bool root = false, inner = true;
  backward(seed_probe(sum(seed_probe(x, inner)), root));
  EXPECT_TRUE(root);
  EXPECT_FALSE(inner);  // below the root: its gradient is whatever reached it
  backward(seed_probe(sum(x), root), Tensor::full({}, 1.0, DType::f32));
  EXPECT_FALSE(root);  // a given grad_output, even of 1
  backward(seed_probe(scale(x, 2.0), root));
  EXPECT_TRUE(root);
  EXPECT_FALSE(gradient_is_one());  // outside a backward function
}

}  // namespace
}  // namespace alpha::autograd
