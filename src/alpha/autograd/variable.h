// Reverse-mode autograd on a tape. A Variable is a tensor value plus, for a leaf that requires a
// gradient (a parameter), a dedicated gradient buffer that backward accumulates into in place.
// Every differentiable op run while gradients are enabled and with at least one input that requires a
// gradient appends a node to the thread's tape; ops whose inputs need no gradient record nothing
// (needs-grad propagation). A node points at its inputs' producing nodes, not at their values, so an
// intermediate activation lives only as long as some node saved it for its backward.
// backward() walks the tape in reverse, asks each node only for the gradients its inputs need, and
// destroys each node (releasing the tensors it saved and its output gradient) as soon as it has run.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "alpha/tensor/tensor.h"

namespace alpha::autograd {

struct VariableState {
  Tensor value;
  Tensor grad;              // undefined until a gradient arrives
  bool requires_grad = false;
  bool is_leaf = true;      // created by the user (parameters, inputs), not by an op
  int64_t producer = -1;    // non-leaf: index of the node that made it, on the tape of `epoch`
  uint64_t epoch = 0;
  std::string name;
  // A leaf's value converted to another dtype (mixed precision: the bf16 copy of an f32 parameter), kept
  // from one step to the next so the forward does not convert every weight again; undefined when none is
  // held. cast() fills it; mutable_value() drops it, since the value may change through the reference.
  Tensor compute_copy;
  // false: cast() converts the value at each use and keeps no copy (a bf16 copy of an f32 weight is 2 bytes a
  // weight held between steps; a model at the edge of memory gives them up for a conversion per use).
  bool holds_compute_copy = true;
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor value, bool requires_grad = false, std::string name = {});

  bool defined() const { return state_ != nullptr; }
  const Tensor& value() const;
  Tensor& mutable_value();  // for in-place parameter updates by optimisers; drops the compute copy
  // The leaf's held compute copy (undefined when none), and handing one back: an optimiser that writes
  // the updated value's conversion in the same pass (ops::adamw_step's compute_copy) keeps it valid. The
  // copy must be the value converted to the copy's dtype (round to nearest even), bit for bit, or its
  // stochastic rounding by the optimiser's step (train::AdamWOptions::stochastic_rounding_seed).
  const Tensor& compute_copy() const;
  void keep_compute_copy(Tensor copy);  // ValueError for a leaf that holds none (set_holds_compute_copy(false))
  // Whether cast() keeps the leaf's conversion for later uses (true by default); false drops a held copy.
  void set_holds_compute_copy(bool holds);
  bool holds_compute_copy() const { return state_ && state_->holds_compute_copy; }
  const Tensor& grad() const;  // leaves only; undefined until a gradient arrives
  bool requires_grad() const { return state_ && state_->requires_grad; }
  bool is_leaf() const { return !state_ || state_->is_leaf; }
  const std::string& name() const;
  void zero_grad();  // zeros the buffer in place (keeps it allocated)
  void clear_grad();  // releases the buffer
  // Replaces a leaf's gradient with `grad` (the value's shape, on its device), kept as given, not copied:
  // data-parallel training hands back each averaged gradient as a view of its bucket.
  void set_grad(Tensor grad);
  const std::shared_ptr<VariableState>& state() const { return state_; }

  // Shorthands for the value's metadata.
  const Shape& shape() const { return value().shape(); }
  int64_t size(int64_t d) const { return value().size(d); }
  DType dtype() const { return value().dtype(); }

 private:
  std::shared_ptr<VariableState> state_;
};

// Computes input gradients from the output gradient. needs[i] says whether input i wants one;
// entries for inputs that do not may be left undefined.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out, const std::vector<bool>& needs)>;

// Records an op's output. inputs are the op's differentiable inputs, in the order backward returns
// their gradients. When no input requires a gradient (or gradients are disabled) nothing is recorded
// and the result is a plain Variable; backward_factory is then never called, so ops save nothing.
Variable record(const char* op, Tensor output, const std::vector<Variable>& inputs,
                const std::function<BackwardFn()>& backward_factory);

// True when an op with these inputs would be recorded.
bool needs_recording(const std::vector<Variable>& inputs);

// Called during backward with a leaf whose gradient is complete: the last node feeding it has run (data
// parallel training starts reducing that gradient while backward goes on).
using LeafReadyFn = std::function<void(const VariableState& leaf)>;

// Backpropagates from a scalar (seed gradient 1) or from `grad_output` of the root's shape, then clears
// the tape. Gradients of leaves that require them are accumulated into their grad buffers; with
// `on_leaf_ready`, each such leaf is passed to it as soon as its gradient is complete.
void backward(const Variable& root, const Tensor& grad_output = {}, const LeafReadyFn& on_leaf_ready = {});

// While backward runs a node's backward function: the gradient slot of the node's input `index` when the
// function may add its gradient for that input into it in place, else an undefined tensor. The engine offers a
// slot already holding another consumer's contribution, contiguous and held by no one else (the residual
// stream's gradient where a LayerNorm's dx joins it), of the shape and dtype of `input` (the input's value). A
// function that adds into it returns that same tensor as the input's gradient and the engine adds nothing
// more: one pass over the slot instead of a store and an add. Anywhere else, undefined.
Tensor gradient_accumulator(size_t index, const Tensor& input);

// While backward runs the node of its root with the gradient it seeded itself (a scalar root, no grad_output):
// true, that gradient being exactly 1, so that a function may skip multiplying by it. False anywhere else.
bool gradient_is_one();

// While backward runs a node: the node's gradient g itself, contiguous, when the tape alone holds it, for the
// function to write into once it has last read g and return as an input's gradient (x's of x + f(x): g plus f's
// x-gradient, with no new tensor and no add pass). No other gradient it returns may be a view of g. Undefined when
// someone else holds g, and anywhere else.
Tensor own_gradient();

// Drops every recorded node without running it (e.g. after an evaluation under gradients).
void clear_tape();
size_t tape_size();

bool grad_enabled();

// Gives this thread a fresh tape (recording enabled) for the scope's lifetime, then restores the previous
// tape untouched: a backward function can record a graph and backpropagate it (activation recomputation)
// while the backward running it is still walking the outer tape, which backward() would otherwise clear.
// stand_ins pairs each outer Variable the nested graph may reach with a fresh leaf over the same storage:
// an edge recorded to an outer leaf goes to its stand-in, so the nested backward accumulates into the
// stand-in and the outer leaf's gradient is left to the outer tape. A recorded leaf that requires a
// gradient and is neither listed nor a stand-in raises ValueError naming it: the nested backward would
// add straight into its gradient, out of the outer backward's order.
class TapeScope {
 public:
  using StandIns = std::vector<std::pair<Variable, Variable>>;  // (outer variable, its stand-in)
  explicit TapeScope(StandIns stand_ins = {});
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  struct Nested;
  std::unique_ptr<Nested> nested_;
};

// Disables recording in its scope.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace alpha::autograd
