// Modules own parameters: leaf Variables that require a gradient, named hierarchically
// ("blocks.3.attn.qkv.weight") and listed in registration order, which is the order checkpoints and the
// optimiser see. Each parameter carries whether weight decay applies to it. Modules are neither
// copyable nor movable, because a parent keeps pointers to its children.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "alpha/autograd/variable.h"
#include "alpha/tensor/tensor.h"

namespace alpha::nn {

struct NamedParameter {
  std::string name;             // full hierarchical name
  autograd::Variable variable;  // shares state with the module's parameter
  bool decay = false;           // whether weight decay applies
};

class Module {
 public:
  // prefix: this module's full name ("blocks.0.attn"), empty for the root.
  explicit Module(std::string prefix) : prefix_(std::move(prefix)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& prefix() const { return prefix_; }

  // Every parameter of this module and its children, depth first in registration order.
  std::vector<NamedParameter> named_parameters() const;
  int64_t num_parameters() const;  // total element count

  // The slot holding the parameter of that full name (ValueError when there is none). Assigning to the
  // slot swaps the Variable the module computes with (tests substitute inputs of a gradient check).
  autograd::Variable& parameter(std::string_view name);

  void zero_grad();

 protected:
  // Registers a parameter named <prefix>.<local_name> holding `value`; returns its slot, stable for the
  // module's lifetime.
  autograd::Variable& add_parameter(std::string_view local_name, Tensor value, bool decay);
  void add_child(Module& child);
  // The full name of a child called `local_name`.
  std::string child_prefix(std::string_view local_name) const;

 private:
  struct Parameter {
    std::string name;
    autograd::Variable variable;
    bool decay;
  };
  // One entry per registration, so parameters and children interleave in the order they were added.
  struct Entry {
    Parameter* parameter = nullptr;
    Module* child = nullptr;
  };
  void collect(std::vector<NamedParameter>& out) const;

  std::string prefix_;
  std::deque<Parameter> parameters_;  // a deque keeps slots at fixed addresses
  std::vector<Entry> entries_;
};

// Mixed precision with stochastic rounding (ops::stochastic_round): each defined copies[k] becomes parameter k's
// (f32) value rounded stochastically to the copy's dtype as the AdamW step `step` under `seed` rounds it,
// parameter k drawing tensor k's bits (the numbering of train::AdamW and distributed::DataParallel), and is
// handed to the parameter as its held compute copy. Undefined entries are left alone.
void keep_stochastic_compute_copies(const std::vector<NamedParameter>& parameters, std::vector<Tensor>& copies,
                                    uint64_t seed, int64_t step);

// A well-mixed seed for sub-stream `stream` of `seed` (SplitMix64 finaliser over both): parameter
// initialisation, per-step dropout masks and sampling each draw from their own stream.
uint64_t derive_seed(uint64_t seed, uint64_t stream);

// Seed for a parameter's initialisation, derived from the model seed and the parameter's name, so that
// a tensor's initial values do not depend on which other parameters exist (with or without biases).
uint64_t parameter_seed(uint64_t model_seed, std::string_view name);

}  // namespace alpha::nn
