// The token shard reader (alpha/data/shard.h, parse_shard, which ShardReader reads a mapped file through)
// on arbitrary bytes: a wrong magic or version, a bad count, truncation or excess, token ids past the
// vocabulary must raise IOError; an accepted shard's tokens lie inside the bytes and below the vocabulary.
#include "alpha/data/shard.h"

#include <cstring>
#include <vector>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace alpha;
  // The reader needs uint16 alignment (a map is page-aligned); the copy is exactly `size` bytes, so
  // ASan still catches a read past the end.
  std::vector<std::byte> bytes(size);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  // The vocabulary size a loader passes comes from the tokenizer; vary it with the input.
  const int vocab_size = size >= 12 ? 1 + int(data[size - 1]) * 256 + data[size - 2] : 50257;
  fuzz::expect_typed_errors([&] {
    std::span<const uint16_t> tokens = data::parse_shard(bytes, vocab_size, "fuzz.bin");
    fuzz::require(data::kShardHeaderBytes + tokens.size_bytes() == size, "tokens fill the file after the header");
    for (uint16_t t : tokens) fuzz::require(t < vocab_size, "tokens are below the vocabulary size");
  });
  return 0;
}
