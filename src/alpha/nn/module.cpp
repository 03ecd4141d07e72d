#include "alpha/nn/module.h"

#include "alpha/core/error.h"
#include "alpha/ops/optim.h"

namespace alpha::nn {

std::vector<NamedParameter> Module::named_parameters() const {
  std::vector<NamedParameter> out;
  collect(out);
  return out;
}

void Module::collect(std::vector<NamedParameter>& out) const {
  for (const Entry& e : entries_) {
    if (e.parameter)
      out.push_back({e.parameter->name, e.parameter->variable, e.parameter->decay});
    else
      e.child->collect(out);
  }
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : named_parameters()) n += p.variable.value().numel();
  return n;
}

autograd::Variable& Module::parameter(std::string_view name) {
  for (Entry& e : entries_) {
    if (e.parameter && e.parameter->name == name) return e.parameter->variable;
    if (e.child && name.starts_with(e.child->prefix_ + ".")) return e.child->parameter(name);
  }
  std::string got = "'";  // appended rather than "'" + name, which trips GCC 12's -Wrestrict false positive
  got.append(name).append("'");
  raise<ValueError>("Module::parameter", "name", "the name of a parameter of '" + prefix_ + "'", got);
}

void Module::zero_grad() {
  for (auto& p : named_parameters()) p.variable.zero_grad();
}

autograd::Variable& Module::add_parameter(std::string_view local_name, Tensor value, bool decay) {
  std::string name = child_prefix(local_name);
  Parameter& p = parameters_.emplace_back(Parameter{name, autograd::Variable(std::move(value), true, name), decay});
  entries_.push_back({&p, nullptr});
  return p.variable;
}

void Module::add_child(Module& child) { entries_.push_back({nullptr, &child}); }

std::string Module::child_prefix(std::string_view local_name) const {
  return prefix_.empty() ? std::string(local_name) : prefix_ + "." + std::string(local_name);
}

namespace {
uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t derive_seed(uint64_t seed, uint64_t stream) { return splitmix64(splitmix64(seed) ^ stream); }

uint64_t parameter_seed(uint64_t model_seed, std::string_view name) {
  uint64_t fnv1a = 0xcbf29ce484222325ull;
  for (char ch : name) fnv1a = (fnv1a ^ uint8_t(ch)) * 0x100000001b3ull;
  return derive_seed(model_seed, fnv1a);
}

void keep_stochastic_compute_copies(const std::vector<NamedParameter>& parameters, std::vector<Tensor>& copies,
                                    uint64_t seed, int64_t step) {
  std::vector<Tensor> values;
  std::vector<ops::StochasticRounding> roundings;
  for (size_t k = 0; k < parameters.size(); ++k) {
    values.push_back(parameters[k].variable.value());
    roundings.push_back({seed, uint32_t(k), 0});
  }
  ops::stochastic_round(values, copies, step, roundings);
  for (size_t k = 0; k < parameters.size(); ++k)
    if (copies[k].defined()) autograd::Variable(parameters[k].variable).keep_compute_copy(copies[k]);
}

}  // namespace alpha::nn
