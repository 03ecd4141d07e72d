// The checkpoint's state.json reader (alpha/train/checkpoint.h, parse_checkpoint_state, which
// load_checkpoint reads through) on arbitrary text: bad JSON, a wrong format_version, a bad step, deep
// nesting must raise IOError; accepted state has a step in [0, 2^63).
#include "alpha/train/checkpoint.h"

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace alpha;
  fuzz::expect_typed_errors([&] {
    nlohmann::json state = train::parse_checkpoint_state(fuzz::as_text(data, size), "state.json");
    fuzz::require(state.is_object() && state.contains("step") && state.at("step").get<int64_t>() >= 0,
                  "accepted state has a non-negative int64 step");
    // What load_checkpoint does next with it: the step directory's name, the metadata's step.
    int64_t step = state.at("step").get<int64_t>();
    fuzz::require(!train::checkpoint_dir("run", step).empty(), "a step names a directory");
    (void)state.dump();
  });
  return 0;
}
