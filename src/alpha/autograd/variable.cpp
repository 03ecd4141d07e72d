#include "alpha/autograd/variable.h"

#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "alpha/ops/elementwise.h"

namespace alpha::autograd {

namespace {

// Where an input's gradient goes: a leaf's buffer, or the output gradient of the node that made it.
struct Edge {
  std::shared_ptr<VariableState> leaf;  // set for leaves
  int64_t node = -1;                    // set for non-leaves
  bool needs_grad() const { return node >= 0 || (leaf && leaf->requires_grad); }
};

struct Node {
  const char* op;
  std::vector<Edge> inputs;
  Shape output_shape;
  Tensor grad_out;  // accumulated gradient of this node's output
  BackwardFn backward;
};

// Epochs are unique across every tape of every thread, so a variable recorded on one tape is never taken
// for a live one on another (a TapeScope's nested tape, say).
uint64_t next_epoch() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

struct Tape {
  std::vector<Node> nodes;
  uint64_t epoch = next_epoch();  // renewed whenever the tape is cleared, so stale producer indices are detected
  bool grad_enabled = true;
  // A TapeScope's tape: each listed outer variable's stand-in, and the stand-ins themselves.
  bool scoped = false;
  std::unordered_map<const VariableState*, std::shared_ptr<VariableState>> stand_in_of;
  std::unordered_set<const VariableState*> stand_ins;
};

// The thread's current tape: its own, or the innermost TapeScope's.
Tape*& current_tape() {
  thread_local Tape own;
  thread_local Tape* current = &own;
  return current;
}

Tape& tape() { return *current_tape(); }

// Where an edge to the leaf `leaf` goes: the leaf itself, or on a TapeScope's tape its stand-in.
std::shared_ptr<VariableState> edge_leaf(const Variable& leaf, const char* op) {
  const Tape& t = tape();
  if (!t.scoped || t.stand_ins.contains(leaf.state().get())) return leaf.state();
  auto it = t.stand_in_of.find(leaf.state().get());
  if (it == t.stand_in_of.end())
    raise<ValueError>(op, "input", "a leaf the enclosing TapeScope stands in for",
                      "the unlisted leaf '" + leaf.name() + "'");
  return it->second;
}

// Whose a gradient slot is. A leaf's gradient is the caller's, clipped and stepped in place, so backward adds
// to it in place: its storage may hold other leaves' gradients (data parallel's views of one bucket), never
// the same elements. A node's output gradient and a leaf's sum over one pass are backward's own, never written in place
// by anyone but accumulate, so they may share storage (a residual add hands its two inputs the same tensor).
enum class Slot { leaf, backward_owned };

// Adds g into a gradient slot, allocating the slot on first use; every slot is contiguous. A leaf's slot
// copies a shared or strided g and adds later contributions in place (the buffer stays the caller's). A
// backward-owned slot takes g as it is (a strided g made contiguous), and a later contribution replaces a slot
// that is still shared by a fresh sum instead of adding into it.
void accumulate(Tensor& slot, const Shape& shape, const Tensor& g, const char* op, Slot kind) {
  if (g.shape() != shape)
    raise<ShapeError>(op, "gradient", "shape " + shape_str(shape) + " (the input's)", shape_str(g.shape()));
  const bool unshared = g.storage().use_count() == 1;
  if (!slot.defined()) {
    slot = g.is_contiguous() && (unshared || kind == Slot::backward_owned) ? g : g.clone();
    return;
  }
  if (kind == Slot::leaf || slot.storage().use_count() == 1) ops::add_(slot, g);
  else slot = ops::add(slot, g);
}

// What backward tells the node it is running, on this thread: the slots it offers (gradient_accumulator), one per
// input, whether the node's gradient is the 1 backward seeded itself (gradient_is_one), and that gradient when the
// tape alone holds it (own_gradient). A nested backward (activation recomputation) sets its own and gives the outer
// ones back when it returns.
struct RunningNode {
  const std::vector<Tensor>* offered = nullptr;
  bool gradient_is_one = false;
  const Tensor* owned = nullptr;
};
thread_local RunningNode running_node;

class RunningNodeScope {
 public:
  explicit RunningNodeScope(RunningNode now) : outer_(running_node) { running_node = now; }
  ~RunningNodeScope() { running_node = outer_; }
  RunningNodeScope(const RunningNodeScope&) = delete;
  RunningNodeScope& operator=(const RunningNodeScope&) = delete;

 private:
  RunningNode outer_;
};

int64_t live_producer(const VariableState& state, const char* op) {
  if (state.epoch != tape().epoch || state.producer < 0 || state.producer >= int64_t(tape().nodes.size()))
    raise<ValueError>(op, "input", "a variable whose graph is still on the tape",
                      "one whose graph was already consumed by backward or cleared");
  return state.producer;
}

// Raises ShapeError or DeviceError naming `arg` unless `t` has the value's shape and sits on its device.
void require_like_value(const char* op, const char* arg, const Tensor& t, const Tensor& value) {
  if (t.shape() != value.shape())
    raise<ShapeError>(op, arg, "the value's shape " + shape_str(value.shape()), shape_str(t.shape()));
  if (t.device() != value.device())
    raise<DeviceError>(op, arg, "a tensor on the value's device " + value.device().str(), t.device().str());
}

}  // namespace

Variable::Variable(Tensor value, bool requires_grad, std::string name)
    : state_(std::make_shared<VariableState>()) {
  state_->value = std::move(value);
  state_->requires_grad = requires_grad;
  state_->name = std::move(name);
}

const Tensor& Variable::value() const {
  if (!state_) raise<ValueError>("Variable::value", "self", "a defined variable", "an undefined variable");
  return state_->value;
}

Tensor& Variable::mutable_value() {
  if (!state_) raise<ValueError>("Variable::mutable_value", "self", "a defined variable", "an undefined variable");
  state_->compute_copy = Tensor();
  return state_->value;
}

const Tensor& Variable::compute_copy() const {
  if (!state_) raise<ValueError>("Variable::compute_copy", "self", "a defined variable", "an undefined variable");
  return state_->compute_copy;
}

void Variable::keep_compute_copy(Tensor copy) {
  constexpr const char* op = "Variable::keep_compute_copy";
  if (!state_) raise<ValueError>(op, "self", "a defined variable", "an undefined variable");
  if (!state_->is_leaf) raise<ValueError>(op, "self", "a leaf variable", "an op's output");
  if (!state_->holds_compute_copy)
    raise<ValueError>(op, "self", "a leaf that holds its compute copy", "one set to convert at each use");
  require_like_value(op, "copy", copy, state_->value);
  state_->compute_copy = std::move(copy);
}

void Variable::set_holds_compute_copy(bool holds) {
  constexpr const char* op = "Variable::set_holds_compute_copy";
  if (!state_) raise<ValueError>(op, "self", "a defined variable", "an undefined variable");
  if (!state_->is_leaf) raise<ValueError>(op, "self", "a leaf variable", "an op's output");
  state_->holds_compute_copy = holds;
  if (!holds) state_->compute_copy = Tensor();
}

const Tensor& Variable::grad() const {
  if (!state_) raise<ValueError>("Variable::grad", "self", "a defined variable", "an undefined variable");
  return state_->grad;
}

const std::string& Variable::name() const {
  static const std::string empty;
  return state_ ? state_->name : empty;
}

void Variable::zero_grad() {
  if (state_ && state_->grad.defined()) state_->grad.zero_();
}

void Variable::clear_grad() {
  if (state_) state_->grad = Tensor();
}

void Variable::set_grad(Tensor grad) {
  constexpr const char* op = "Variable::set_grad";
  if (!state_) raise<ValueError>(op, "self", "a defined variable", "an undefined variable");
  if (!state_->is_leaf || !state_->requires_grad)
    raise<ValueError>(op, "self", "a leaf that requires a gradient", state_->is_leaf ? "a leaf without" : "an op's output");
  require_like_value(op, "grad", grad, state_->value);
  state_->grad = std::move(grad);
}

bool grad_enabled() { return tape().grad_enabled; }

bool needs_recording(const std::vector<Variable>& inputs) {
  if (!grad_enabled()) return false;
  for (const auto& v : inputs)
    if (v.requires_grad()) return true;
  return false;
}

Variable record(const char* op, Tensor output, const std::vector<Variable>& inputs,
                const std::function<BackwardFn()>& backward_factory) {
  if (!needs_recording(inputs)) return Variable(std::move(output));
  Node node{op, {}, output.shape(), Tensor(), nullptr};
  node.inputs.reserve(inputs.size());
  for (const auto& v : inputs) {
    Edge e;
    if (v.defined() && v.requires_grad()) {
      if (v.is_leaf()) e.leaf = edge_leaf(v, op);
      else e.node = live_producer(*v.state(), op);
    }
    node.inputs.push_back(std::move(e));
  }
  node.backward = backward_factory();
  Variable result(std::move(output), true);
  result.state()->is_leaf = false;
  result.state()->producer = int64_t(tape().nodes.size());
  result.state()->epoch = tape().epoch;
  tape().nodes.push_back(std::move(node));
  return result;
}

void backward(const Variable& root, const Tensor& grad_output, const LeafReadyFn& on_leaf_ready) {
  if (!root.requires_grad())
    raise<ValueError>("backward", "root", "a variable that requires a gradient", "one that does not");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    if (root.value().numel() != 1)
      raise<ShapeError>("backward", "grad_output", "given for a non-scalar root",
                        "none for shape " + shape_str(root.shape()));
    seed = Tensor::full(root.shape(), 1.0, root.dtype(), root.value().device());
  }
  if (root.is_leaf()) {
    accumulate(root.state()->grad, root.shape(), seed, "backward", Slot::leaf);
    if (on_leaf_ready) on_leaf_ready(*root.state());
    return;
  }
  auto& nodes = tape().nodes;
  int64_t start = live_producer(*root.state(), "backward");
  accumulate(nodes[size_t(start)].grad_out, root.shape(), seed, "backward", Slot::backward_owned);
  // Per leaf: the lowest node index feeding it (backward runs from high to low indices) and how many edges
  // feed it. A leaf fed more than once (a tied embedding) sums this pass's contributions apart and adds
  // them to its gradient once, complete, as PyTorch's AccumulateGrad does: accumulating micro-batches then
  // adds whole micro-batch gradients, in the order a data-parallel all-reduce adds the ranks' (bit for bit).
  struct LeafFeed {
    int64_t last_feeder;
    int64_t edges = 0;
    Tensor pass_grad;
  };
  std::unordered_map<const VariableState*, LeafFeed> feeds;
  for (int64_t i = 0; i <= start; ++i)
    for (const Edge& e : nodes[size_t(i)].inputs)
      if (e.leaf && e.needs_grad()) ++feeds.try_emplace(e.leaf.get(), LeafFeed{i, 0, Tensor()}).first->second.edges;

  NoGradGuard no_grad;  // backward functions run ops; they must not record
  for (int64_t i = start; i >= 0; --i) {
    Node& node = nodes[size_t(i)];
    if (node.grad_out.defined()) {
      std::vector<bool> needs(node.inputs.size());
      for (size_t j = 0; j < needs.size(); ++j) needs[j] = node.inputs[j].needs_grad();
      // A node input's slot that already holds a contribution, contiguous and no one else's (its storage held by
      // the slot alone: a residual add's shared gradient is offered only once the other holder is gone), offered
      // at the first of the node's edges to it. For a leaf fed more than once (a tied embedding) that is this
      // pass's sum (pass_grad), never the leaf's gradient itself.
      std::vector<Tensor> accumulators(needs.size());
      for (size_t j = 0; j < needs.size(); ++j) {
        const Edge& e = node.inputs[j];
        if (!needs[j]) continue;
        bool first_edge = true;
        for (size_t k = 0; k < j; ++k)
          first_edge &= e.leaf ? node.inputs[k].leaf != e.leaf : node.inputs[k].leaf || node.inputs[k].node != e.node;
        const Tensor& slot = e.leaf ? feeds.at(e.leaf.get()).pass_grad : nodes[size_t(e.node)].grad_out;
        if (first_edge && slot.defined() && slot.is_contiguous() && slot.storage().use_count() == 1)
          accumulators[j] = slot;
      }
      std::vector<Tensor> grads;
      {
        const bool owned = node.grad_out.is_contiguous() && node.grad_out.storage().use_count() == 1;
        RunningNodeScope running(
            {&accumulators, i == start && !grad_output.defined(), owned ? &node.grad_out : nullptr});
        grads = node.backward(node.grad_out, needs);
      }
      std::vector<bool> added(needs.size());  // the function added into the slot it was offered
      for (size_t j = 0; j < needs.size() && j < grads.size(); ++j)
        added[j] = accumulators[j].defined() && grads[j].defined() && grads[j].storage() == accumulators[j].storage();
      accumulators.clear();  // the slots are their own again, so that accumulate may add in place
      for (size_t j = 0; j < needs.size() && j < grads.size(); ++j) {
        if (!needs[j] || !grads[j].defined() || added[j]) continue;
        const Edge& e = node.inputs[j];
        if (!e.leaf) {
          accumulate(nodes[size_t(e.node)].grad_out, nodes[size_t(e.node)].output_shape, grads[j], node.op,
                     Slot::backward_owned);
          continue;
        }
        LeafFeed& feed = feeds.at(e.leaf.get());
        if (feed.edges > 1) accumulate(feed.pass_grad, e.leaf->value.shape(), grads[j], node.op, Slot::backward_owned);
        else accumulate(e.leaf->grad, e.leaf->value.shape(), grads[j], node.op, Slot::leaf);
      }
    }
    for (const Edge& e : node.inputs) {
      auto feed = e.leaf ? feeds.find(e.leaf.get()) : feeds.end();
      if (feed == feeds.end() || feed->second.last_feeder != i) continue;
      if (feed->second.pass_grad.defined())
        accumulate(e.leaf->grad, e.leaf->value.shape(), feed->second.pass_grad, node.op, Slot::leaf);
      feeds.erase(feed);  // a leaf fed twice by this node is completed once
      if (on_leaf_ready) on_leaf_ready(*e.leaf);
    }
    // Destroy what the node holds (saved tensors, output gradient) as soon as backward is past it.
    node.backward = nullptr;
    node.grad_out = Tensor();
    node.inputs.clear();
  }
  clear_tape();
}

bool gradient_is_one() { return running_node.gradient_is_one; }

Tensor own_gradient() { return running_node.owned ? *running_node.owned : Tensor(); }

Tensor gradient_accumulator(size_t index, const Tensor& input) {
  if (!running_node.offered || index >= running_node.offered->size()) return Tensor();
  const Tensor& slot = (*running_node.offered)[index];
  if (!slot.defined() || slot.shape() != input.shape() || slot.dtype() != input.dtype()) return Tensor();
  return slot;
}

void clear_tape() {
  tape().nodes.clear();
  tape().epoch = next_epoch();
}

size_t tape_size() { return tape().nodes.size(); }

struct TapeScope::Nested {
  Tape tape;
  Tape* outer = nullptr;
  StandIns stand_ins;  // keeps the listed variables alive while the tape maps their states
};

TapeScope::TapeScope(StandIns stand_ins) : nested_(std::make_unique<Nested>()) {
  Tape& t = nested_->tape;
  t.scoped = true;
  for (const auto& [outer, stand_in] : stand_ins) {
    t.stand_in_of[outer.state().get()] = stand_in.state();
    t.stand_ins.insert(stand_in.state().get());
  }
  nested_->stand_ins = std::move(stand_ins);
  nested_->outer = std::exchange(current_tape(), &t);
}

TapeScope::~TapeScope() { current_tape() = nested_->outer; }

NoGradGuard::NoGradGuard() : previous_(tape().grad_enabled) { tape().grad_enabled = false; }
NoGradGuard::~NoGradGuard() { tape().grad_enabled = previous_; }

}  // namespace alpha::autograd
