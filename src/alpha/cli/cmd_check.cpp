// `alpha check kernels`: the kernel correctness harness (alpha/check) from the command line. Prints one
// line per comparison (max_abs, mean_abs, max_rel against the CPU reference) and a summary; exits with 1
// when any comparison is outside the tolerance table.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "alpha/check/kernel_check.h"
#include "alpha/cli/commands.h"
#include "alpha/core/device.h"

namespace alpha::cli {

void add_check_command(CLI::App& app) {
  CLI::App* check = app.add_subcommand("check", "Correctness checks");
  check->require_subcommand(1);
  CLI::App* kernels = check->add_subcommand(
      "kernels", "Run every CUDA kernel on random inputs and compare it with the CPU reference");
  struct Options {
    std::string filter;
    std::string device = "cuda:0";
    uint64_t seed = 0;
    bool failures_only = false;
    bool small = false;
  };
  auto opts = std::make_shared<Options>();
  kernels->add_option("--filter", opts->filter, "Only the checks whose name contains this (e.g. layernorm)");
  kernels->add_option("--device", opts->device, "The GPU to check")->capture_default_str();
  kernels->add_option("--seed", opts->seed, "Seed of the random inputs (0: from the clock)");
  kernels->add_flag("--failures-only", opts->failures_only, "Print only the comparisons that fail");
  kernels->add_flag("--small", opts->small,
                    "Leave out the cases larger than 65536 elements (every kernel and path still runs): for "
                    "compute-sanitizer");
  kernels->callback([opts] {
    uint64_t seed = opts->seed ? opts->seed : uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    const auto start = std::chrono::steady_clock::now();
    bool header_printed = false;  // once the checks run: an error before that is the only output
    check::HarnessResult result =
        check::run_checks(opts->filter, Device::parse(opts->device, "--device"), seed, [&](const check::Comparison& c) {
          if (!header_printed) {
            std::printf("seed %llu\n%s\n", static_cast<unsigned long long>(seed), check::format_header().c_str());
            header_printed = true;
          }
          if (!opts->failures_only || !c.passed) std::printf("%s\n", check::format_comparison(c).c_str());
          std::fflush(stdout);
        },
        opts->small ? check::Scale::small : check::Scale::full);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%lld checks, %zu comparisons, %lld failed, %.1f s\n", static_cast<long long>(result.checks_run),
                result.comparisons.size(), static_cast<long long>(result.failures), seconds);
    if (result.failures > 0) throw CLI::RuntimeError(1);
  });
}

}  // namespace alpha::cli
