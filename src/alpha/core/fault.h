// Test-only fault injection (docs/CHECKPOINTS.md, "Fault injection"). Environment variables that no
// user sets switch it on; without them every hook here is a no-op costing one branch. They exist so
// that the tests in tests/train/test_fault_injection.cpp can crash a real `alpha train` process at a
// chosen point and poison a chosen step's gradients, deterministically.
//
//   ALPHA_FAULT_KILL_AT=N         the process raises SIGKILL on itself right before the N-th file-system
//                                 step (counted from 1 over the whole process) taken while a checkpoint
//                                 is being saved. A step is one of: mkdir, creating a file, chmod, one
//                                 write() call, fsync of a file, close, rename, exchange (renameat2),
//                                 fsync of a directory, removal. It first prints one line to stderr:
//                                 "alpha: fault injection: SIGKILL before checkpoint I/O step N: <what> '<path>'".
//   ALPHA_FAULT_NAN_STEPS=3,7-9   the trainer writes NaN into a gradient at those steps (1-based step
//                                 numbers, as in metrics.jsonl), after the backward pass and before the
//                                 non-finite check and the optimizer.
//   ALPHA_FAULT_INF_STEPS=5       the same with +Inf.
//
// A malformed value raises ConfigError naming the variable.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace alpha::fault {

// While one is alive on a thread, that thread is saving a checkpoint: its file-system steps count
// toward ALPHA_FAULT_KILL_AT. Scopes nest.
class CheckpointSaveScope {
 public:
  CheckpointSaveScope();
  ~CheckpointSaveScope();
  CheckpointSaveScope(const CheckpointSaveScope&) = delete;
  CheckpointSaveScope& operator=(const CheckpointSaveScope&) = delete;
};

// Called right before each file-system step of the file and checkpoint writers; `what` names the step
// ("write", "fsync", "rename", ...) and `path` what it acts on.
void before_io(std::string_view what, const std::filesystem::path& path);

// The value (NaN or +Inf) to write into the gradients of `step` (1-based), or nullopt.
std::optional<double> gradient_poison(int64_t step);

}  // namespace alpha::fault
