#include "alpha/data/shard.h"

#include <array>
#include <cstring>
#include <limits>

#include "alpha/core/error.h"

namespace alpha::data {
namespace {

constexpr std::string_view kReadOp = "ShardReader";

int32_t header_field(std::span<const std::byte> bytes, size_t index) {
  int32_t value;
  std::memcpy(&value, bytes.data() + index * sizeof(int32_t), sizeof value);
  return value;
}

[[noreturn]] void raise_truncated(const std::string& path, size_t size, size_t expected, std::string_view what) {
  raise_io(kReadOp, path, (long long)size,
           "truncated: the file ends here but " + std::string(what) + " needs " + std::to_string(expected) + " bytes");
}

}  // namespace

void write_shard(const std::string& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > size_t(std::numeric_limits<int32_t>::max()))
    raise<ValueError>("write_shard", "tokens", "at most 2147483647 tokens (the header stores an int32 count)",
                      std::to_string(tokens.size()));
  std::array<int32_t, kShardHeaderBytes / sizeof(int32_t)> header{};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = int32_t(tokens.size());
  AtomicFileWriter file(path, "write_shard");
  file.write(std::as_bytes(std::span(header)));
  file.write(std::as_bytes(tokens));
  file.commit();
}

std::span<const uint16_t> parse_shard(std::span<const std::byte> bytes, int vocab_size, const std::string& path) {
  size_t size = bytes.size();
  if (size < 4) raise_truncated(path, size, kShardHeaderBytes, "the header");
  if (int32_t magic = header_field(bytes, 0); magic != kShardMagic)
    raise_io(kReadOp, path, 0, "not a token shard: magic number " + std::to_string(magic) + ", expected " +
                                   std::to_string(kShardMagic));
  if (size < 8) raise_truncated(path, size, kShardHeaderBytes, "the header");
  if (int32_t version = header_field(bytes, 1); version != kShardVersion)
    raise_io(kReadOp, path, 4, "unsupported shard version " + std::to_string(version) + ", expected " +
                                   std::to_string(kShardVersion));
  if (size < kShardHeaderBytes) raise_truncated(path, size, kShardHeaderBytes, "the header");
  int32_t count = header_field(bytes, 2);
  if (count < 0) raise_io(kReadOp, path, 8, "negative token count " + std::to_string(count));
  size_t expected = kShardHeaderBytes + size_t(count) * sizeof(uint16_t);
  if (size < expected) raise_truncated(path, size, expected, "a header declaring " + std::to_string(count) + " tokens");
  if (size > expected)
    raise_io(kReadOp, path, (long long)expected,
             std::to_string(size - expected) + " bytes past the " + std::to_string(count) +
                 " tokens the header declares");
  // A map is page-aligned and the header is 1024 bytes, so a mapped file's tokens are aligned for uint16;
  // bytes from elsewhere must be too.
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint16_t) != 0)
    raise<ValueError>(kReadOp, "bytes", "a buffer aligned for uint16", "an odd address");
  std::span<const uint16_t> tokens{reinterpret_cast<const uint16_t*>(bytes.data() + kShardHeaderBytes), size_t(count)};
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= vocab_size)
      raise_io(kReadOp, path, (long long)(kShardHeaderBytes + i * sizeof(uint16_t)),
               "token id " + std::to_string(tokens[i]) + " is not below the vocabulary size " +
                   std::to_string(vocab_size));
  return tokens;
}

ShardReader::ShardReader(const std::string& path, int vocab_size)
    : file_(path, kReadOp), tokens_(parse_shard(file_.bytes(), vocab_size, path)) {}

}  // namespace alpha::data
