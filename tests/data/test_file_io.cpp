// File helpers: the UTF-8 checker on every kind of ill-formed sequence, atomic writes, memory maps.
#include <filesystem>

#include <gtest/gtest.h>

#include "alpha/data/file_io.h"
#include "data/temp_dir.h"
#include "support/checks.h"

namespace alpha::data {
namespace {

TEST(Utf8, AcceptsWellFormedText) {
  using namespace std::string_view_literals;
  for (std::string_view text : {""sv, "plain ascii\n\t"sv, "é ß ñ"sv, "漢字"sv, "😀 U+10FFFF: \xF4\x8F\xBF\xBF"sv,
                                "\xEF\xBB\xBF BOM"sv, "\0nul"sv})
    EXPECT_EQ(first_invalid_utf8(text), std::nullopt) << text;
}

TEST(Utf8, FindsTheStartOfTheFirstIllFormedSequence) {
  const std::vector<std::pair<std::string_view, size_t>> cases = {
      {"ab\x80", 2},                 // a stray continuation byte
      {"caf\xE9 au lait", 3},        // Latin-1
      {"x\xC3", 1},                  // cut short at the end
      {"x\xE2\x82", 1},              // cut short at the end
      {"ok\xE2(\xAC", 2},            // a bad continuation
      {"\xC0\xAF", 0},               // overlong '/'
      {"\xE0\x80\xAF", 0},           // overlong, three bytes
      {"\xF0\x80\x80\xAF", 0},       // overlong, four bytes
      {"abc\xED\xA0\x80", 3},        // a UTF-16 surrogate
      {"\xF4\x90\x80\x80", 0},       // above U+10FFFF
      {"\xF5\x80\x80\x80", 0},       // never a lead byte
      {"\xFF", 0},
      {"é\xFE", 2},
  };
  for (const auto& [text, offset] : cases) EXPECT_EQ(first_invalid_utf8(text), offset) << ::testing::PrintToString(text);
}

TEST(FileIo, AtomicWriteReplacesAndLeavesNoTemporary) {
  test::TempDir dir;
  std::string path = dir.file("f.bin");
  write_file_atomic(path, "first version", "test");
  write_file_atomic(path, std::string_view("second\0version", 14), "test");
  EXPECT_EQ(read_file(path, "test"), std::string("second\0version", 14));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
  MappedFile map(path, "test");
  EXPECT_EQ(map.bytes().size(), 14u);
  EXPECT_EQ(char(map.bytes()[6]), '\0');
}

TEST(FileIo, ErrorsNameTheOperationAndFile) {
  test::TempDir dir;
  EXPECT_ALPHA_ERROR(read_file(dir.file("none"), "reader"), IOError, "[reader]", "none", "cannot open");
  EXPECT_ALPHA_ERROR(MappedFile(dir.file("none"), "mapper"), IOError, "[mapper]", "none");
  EXPECT_ALPHA_ERROR(write_file_atomic(dir.file("no/such/dir/f"), "x", "writer"), IOError, "[writer]", "cannot create");
  write_file_atomic(dir.file("empty"), "", "test");
  EXPECT_TRUE(MappedFile(dir.file("empty"), "test").bytes().empty());
}

}  // namespace
}  // namespace alpha::data
