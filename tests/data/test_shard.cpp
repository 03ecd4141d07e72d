// Token shards: round trips, and every corruption reported with its exact byte offset.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "alpha/core/file_io.h"
#include "alpha/data/shard.h"
#include "core/file_test_util.h"
#include "support/checks.h"

namespace alpha::data {
namespace {

std::vector<uint16_t> some_tokens(size_t n, uint16_t vocab) {
  std::vector<uint16_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = uint16_t((i * 7919 + 13) % vocab);
  return tokens;
}

// Overwrites 4 bytes of a file at offset with an int32.
void poke_int32(const std::string& path, size_t offset, int32_t value) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(std::streamoff(offset));
  file.write(reinterpret_cast<const char*>(&value), sizeof value);
}

TEST(Shard, RoundTripsTokensAndHeader) {
  test::TempDir dir;
  for (size_t n : {size_t(0), size_t(1), size_t(1000), size_t(70000)}) {
    auto tokens = some_tokens(n, 65535);
    tokens.push_back(65535);  // the largest id a uint16 holds
    std::string path = dir.file(std::to_string(n) + ".bin");
    write_shard(path, tokens);
    EXPECT_EQ(std::filesystem::file_size(path), 1024 + 2 * tokens.size());
    std::string bytes = read_file(path, "test");
    int32_t header[3];
    std::memcpy(header, bytes.data(), sizeof header);
    EXPECT_EQ(header[0], 20240520);
    EXPECT_EQ(header[1], 1);
    EXPECT_EQ(header[2], int32_t(tokens.size()));
    EXPECT_TRUE(std::all_of(bytes.begin() + 12, bytes.begin() + 1024, [](char c) { return c == 0; }));
    ShardReader reader(path, 65536);
    ASSERT_EQ(reader.size(), tokens.size());
    EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), reader.tokens().begin()));
  }
  // Only the final file remains: the temporary one was renamed into place.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().extension(), ".bin") << entry.path();
}

TEST(Shard, OverwritesAnExistingShard) {
  test::TempDir dir;
  std::string path = dir.file("s.bin");
  write_shard(path, some_tokens(500, 100));
  auto tokens = some_tokens(20, 100);
  write_shard(path, tokens);
  ShardReader reader(path, 100);
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), reader.tokens().begin(), reader.tokens().end()));
}

class ShardCorruption : public ::testing::Test {
 protected:
  void SetUp() override { write_shard(path, some_tokens(100, 50)); }  // 1024 + 200 bytes
  test::TempDir dir;
  std::string path = dir.file("bad.bin");
};

TEST_F(ShardCorruption, WrongMagicAtOffset0) {
  poke_int32(path, 0, 12345);
  EXPECT_ALPHA_ERROR(ShardReader(path, 50), IOError, "bad.bin", "at byte offset 0:", "12345", "20240520");
}

TEST_F(ShardCorruption, WrongVersionAtOffset4) {
  poke_int32(path, 4, 7);
  EXPECT_ALPHA_ERROR(ShardReader(path, 50), IOError, "bad.bin", "at byte offset 4:", "version 7");
}

TEST_F(ShardCorruption, NegativeCountAtOffset8) {
  poke_int32(path, 8, -5);
  EXPECT_ALPHA_ERROR(ShardReader(path, 50), IOError, "bad.bin", "at byte offset 8:", "-5");
}

TEST_F(ShardCorruption, TruncatedDataAtItsEnd) {
  std::filesystem::resize_file(path, 1024 + 2 * 50 + 1);
  EXPECT_ALPHA_ERROR(ShardReader(path, 50), IOError, "bad.bin", "at byte offset 1125:", "truncated", "100 tokens",
                     "1224 bytes");
}

TEST_F(ShardCorruption, TruncatedHeader) {
  std::filesystem::resize_file(path, 600);
  EXPECT_ALPHA_ERROR(ShardReader(path, 50), IOError, "at byte offset 600:", "truncated", "1024 bytes");
  std::filesystem::resize_file(path, 2);
  EXPECT_ALPHA_ERROR(ShardReader(path, 50), IOError, "at byte offset 2:", "truncated");
}

TEST_F(ShardCorruption, TrailingBytesWhereTheDataShouldEnd) {
  std::ofstream(path, std::ios::app | std::ios::binary) << "xyz";
  EXPECT_ALPHA_ERROR(ShardReader(path, 50), IOError, "at byte offset 1224:", "3 bytes past the 100 tokens");
}

TEST_F(ShardCorruption, TokenOutsideTheVocabularyAtItsOffset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(1024 + 2 * 37);
  uint16_t bad = 50;
  file.write(reinterpret_cast<const char*>(&bad), sizeof bad);
  file.close();
  EXPECT_ALPHA_ERROR(ShardReader(path, 50), IOError, "bad.bin", "at byte offset 1098:", "token id 50",
                     "vocabulary size 50");
  EXPECT_NO_THROW(ShardReader(path, 51));
}

// The in-memory reader (what ShardReader checks a mapped file with) needs uint16 alignment; a misaligned
// buffer is a ValueError, not a misaligned read (UBSan).
TEST(Shard, ParseShardFromMemory) {
  test::TempDir dir;
  write_shard(dir.file("a.bin"), some_tokens(10, 50));
  std::string bytes = test::read_raw(dir / "a.bin");
  std::vector<uint16_t> aligned((bytes.size() + 3) / 2);
  std::memcpy(aligned.data(), bytes.data(), bytes.size());
  auto view = std::as_bytes(std::span(aligned)).first(bytes.size());
  std::span<const uint16_t> tokens = parse_shard(view, 50, "memory");
  EXPECT_TRUE(std::ranges::equal(tokens, some_tokens(10, 50)));
  EXPECT_ALPHA_ERROR(parse_shard(view, 40, "memory"), IOError, "file 'memory' at byte offset", "not below the vocabulary");
  std::memmove(reinterpret_cast<char*>(aligned.data()) + 1, bytes.data(), bytes.size());
  auto odd = std::as_bytes(std::span(aligned)).subspan(1, bytes.size());
  EXPECT_ALPHA_ERROR(parse_shard(odd, 50, "memory"), ValueError, "aligned for uint16");
}

TEST_F(ShardCorruption, MissingFile) {
  EXPECT_ALPHA_ERROR(ShardReader(dir.file("none.bin"), 50), IOError, "ShardReader", "none.bin", "cannot open");
}

}  // namespace
}  // namespace alpha::data
