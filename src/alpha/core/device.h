// Where a tensor lives: the CPU, or a CUDA device by ordinal.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace alpha {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const;
  // Parses "cpu", "cuda" or "cuda:N"; throws ConfigError naming `what` otherwise.
  static Device parse(std::string_view text, std::string_view what);
};

}  // namespace alpha
