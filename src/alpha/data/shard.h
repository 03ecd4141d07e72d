// Token shards in llm.c's format: a header of 256 int32 (magic 20240520, version 1, token count, the
// rest zero), then the tokens as uint16, little-endian.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "alpha/core/file_io.h"

namespace alpha::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 256 * sizeof(int32_t);

// Writes a shard atomically (a crash leaves either the old file or the complete new one).
void write_shard(const std::string& path, std::span<const uint16_t> tokens);

// Checks a whole shard held in memory (`path` names it in errors) and returns its tokens, a view into
// `bytes`; the errors are ShardReader's below. `bytes` must be aligned for uint16 (ValueError).
std::span<const uint16_t> parse_shard(std::span<const std::byte> bytes, int vocab_size, const std::string& path);

// A shard memory-mapped for reading. The constructor checks everything and throws IOError naming the
// file and the byte offset of the problem: wrong magic (0), wrong version (4), a negative count (8),
// a file shorter or longer than the header declares (where the data ends, or where the excess
// starts), a token id not below vocab_size (that token's offset).
class ShardReader {
 public:
  ShardReader(const std::string& path, int vocab_size);
  std::span<const uint16_t> tokens() const { return tokens_; }
  size_t size() const { return tokens_.size(); }
  const std::filesystem::path& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::span<const uint16_t> tokens_;
};

}  // namespace alpha::data
