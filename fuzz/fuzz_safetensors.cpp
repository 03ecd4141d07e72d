// The safetensors reader (alpha/train/safetensors.h) on arbitrary bytes: hostile headers (sizes, offsets,
// dtypes, JSON) must raise IOError; a file it accepts must hold exactly the bytes its tensors cover.
#include "alpha/train/safetensors.h"

#include <cstring>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace alpha;
  fuzz::expect_typed_errors([&] {
    train::SafetensorsContents contents = train::read_safetensors_bytes(fuzz::as_bytes(data, size), "fuzz.safetensors");
    uint64_t covered = 0, checksum = 0;
    for (const auto& [name, tensor] : contents.tensors) {
      fuzz::require(tensor.is_contiguous(), "tensors are contiguous");
      const auto* bytes = static_cast<const uint8_t*>(tensor.raw_data());
      for (size_t i = 0; i < tensor.nbytes(); ++i) checksum += bytes[i];  // every byte readable (ASan)
      covered += tensor.nbytes();
    }
    uint64_t header = 0;
    if (size >= 8) std::memcpy(&header, data, 8);
    fuzz::require(size >= 8 && covered == size - 8 - header, "the tensors cover the data exactly");
    (void)checksum;
  });
  return 0;
}
