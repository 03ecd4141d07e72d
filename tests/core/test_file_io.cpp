// File helpers: the UTF-8 checker on every kind of ill-formed sequence, atomic writes (streamed, abandoned,
// failing mid-file, failing at the rename), checked reads, memory maps, and errors naming op, file and offset.
#include <filesystem>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <unistd.h>

#include "alpha/core/file_io.h"
#include "core/file_test_util.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::list_dir;
using test::read_raw;
using test::TempDir;
using test::write_raw;

using Names = std::vector<std::string>;

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

TEST(AtomicFile, WritesNewFileAndReplacesOldOneLeavingNoTemporary) {
  TempDir dir;
  write_file_atomic(dir / "a.bin", std::string("first\0version", 13), "test");
  EXPECT_EQ(read_raw(dir / "a.bin"), std::string("first\0version", 13));
  write_file_atomic(dir / "a.bin", "second", "test");
  EXPECT_EQ(read_raw(dir / "a.bin"), "second");
  write_file_atomic(dir / "empty", "", "test");
  EXPECT_EQ(read_raw(dir / "empty"), "");
  EXPECT_EQ(list_dir(dir.path()), (Names{"a.bin", "empty"}));
}

TEST(AtomicFile, StreamedBytesAppearOnlyAtCommit) {
  TempDir dir;
  write_raw(dir / "t", "old");
  AtomicFileWriter writer(dir / "t", "test");
  EXPECT_EQ(writer.temporary().parent_path(), dir.path());  // same directory, so the rename is atomic
  writer.write("new ");
  writer.write(std::string(10000, 'x'));
  EXPECT_EQ(writer.bytes_written(), 10004u);
  EXPECT_EQ(read_raw(dir / "t"), "old");
  EXPECT_EQ(list_dir(dir.path()).size(), 2u);  // the target and the hidden temporary
  writer.commit();
  EXPECT_EQ(read_raw(dir / "t"), "new " + std::string(10000, 'x'));
  EXPECT_EQ(list_dir(dir.path()), (Names{"t"}));
  EXPECT_ALPHA_ERROR(writer.write("more"), IOError, "write after commit");
}

TEST(AtomicFile, AbandonedWriterRemovesTemporaryAndKeepsTarget) {
  TempDir dir;
  write_raw(dir / "t", "old");
  {
    AtomicFileWriter writer(dir / "t", "test");
    writer.write("half of the new con");
  }  // destroyed without commit, as when an exception unwinds past it
  EXPECT_EQ(read_raw(dir / "t"), "old");
  EXPECT_EQ(list_dir(dir.path()), (Names{"t"}));
}

// A failing write() mid-file (here: the file-size limit, which also binds root) must leave the old target
// intact and remove the partial temporary.
TEST(AtomicFile, FailedWriteKeepsTargetAndRemovesTemporary) {
  TempDir dir;
  write_raw(dir / "t", "old");
  bool threw = false;
  try {
    test::FileSizeLimit limit(4096);
    write_file_atomic(dir / "t", std::string(100000, 'y'), "writer");
  } catch (const IOError& e) {
    threw = true;
    std::string what = e.what();
    EXPECT_NE(what.find("[writer]"), std::string::npos) << what;
    EXPECT_NE(what.find((dir / "t").string() + "' at byte offset 4096: cannot write"), std::string::npos) << what;
    EXPECT_NE(what.find("File too large"), std::string::npos) << what;
  }
  EXPECT_TRUE(threw);
  EXPECT_EQ(read_raw(dir / "t"), "old");
  EXPECT_EQ(list_dir(dir.path()), (Names{"t"}));
}

TEST(AtomicFile, FailedRenameKeepsTargetAndRemovesTemporary) {
  TempDir dir;
  std::filesystem::create_directory(dir / "target");
  write_raw(dir / "target" / "inside", "kept");
  EXPECT_ALPHA_ERROR(write_file_atomic(dir / "target", "file contents", "test"), IOError, "target'",
                     "cannot rename the temporary file over the target", "Is a directory");
  EXPECT_EQ(read_raw(dir / "target" / "inside"), "kept");
  EXPECT_EQ(list_dir(dir.path()), (Names{"target"}));
}

TEST(AtomicFile, ReadOnlyDirectoryRaisesAndKeepsTarget) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions (FailedWrite/FailedRename cover failures)";
  TempDir dir;
  std::filesystem::create_directory(dir / "ro");
  write_raw(dir / "ro" / "t", "old");
  std::filesystem::permissions(dir / "ro", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  EXPECT_ALPHA_ERROR(write_file_atomic(dir / "ro" / "t", "new", "test"), IOError, "ro/t'",
                     "cannot create a temporary file in its directory", "Permission denied");
  EXPECT_EQ(read_raw(dir / "ro" / "t"), "old");
  EXPECT_EQ(list_dir(dir / "ro"), (Names{"t"}));
}

TEST(AtomicFile, MissingDirectoryRaises) {
  TempDir dir;
  EXPECT_ALPHA_ERROR(write_file_atomic(dir / "no" / "t", "x", "test"), IOError, "no/t'", "No such file or directory");
  EXPECT_ALPHA_ERROR(write_file_atomic(dir.file("no/such/dir/f"), "x", "writer"), IOError, "[writer]", "cannot create");
  EXPECT_ALPHA_ERROR(write_file_atomic(dir.path() / "", "x", "test"), IOError, "names no file");
}

TEST(AtomicFile, FsyncDirectoryNamesAMissingDirectory) {
  TempDir dir;
  fsync_directory(dir.path(), "test");
  EXPECT_ALPHA_ERROR(fsync_directory(dir / "gone", "syncer"), IOError, "[syncer]", "gone'",
                     "cannot open the directory");
}

TEST(FileIo, ReadFileReturnsBytesAndNamesFailures) {
  TempDir dir;
  std::string bytes("\0\1\2binary\n", 10);
  write_raw(dir / "f", bytes);
  EXPECT_EQ(read_file(dir / "f", "test"), bytes);
  EXPECT_ALPHA_ERROR(read_file(dir / "missing", "test"), IOError, "missing'", "No such file or directory");
  EXPECT_ALPHA_ERROR(read_file(dir.file("none"), "reader"), IOError, "[reader]", "none", "cannot open");
  EXPECT_ALPHA_ERROR(read_file(dir.path(), "test"), IOError, "not a regular file");
  InputFile file(dir / "f", "test");
  EXPECT_EQ(file.size(), 10u);
  char buf[8];
  file.read_at(2, buf, 8, "test");
  EXPECT_EQ(std::string(buf, 8), bytes.substr(2));
  EXPECT_ALPHA_ERROR(file.read_at(4, buf, 8, "test_op"), IOError, "[test_op]", "f' at byte offset 10",
                     "2 more bytes were expected");
}

TEST(FileIo, AtomicWriteReadsBackThroughReadFileAndMap) {
  TempDir dir;
  std::string path = dir.file("f.bin");
  write_file_atomic(path, "first version", "test");
  write_file_atomic(path, std::string_view("second\0version", 14), "test");
  EXPECT_EQ(read_file(path, "test"), std::string("second\0version", 14));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
  MappedFile map(path, "test");
  EXPECT_EQ(map.bytes().size(), 14u);
  EXPECT_EQ(char(map.bytes()[6]), '\0');
}

TEST(FileIo, MappedFileNamesTheOperationAndFile) {
  TempDir dir;
  EXPECT_ALPHA_ERROR(MappedFile(dir.file("none"), "mapper"), IOError, "[mapper]", "none");
  EXPECT_ALPHA_ERROR(MappedFile(dir.path(), "mapper"), IOError, "[mapper]", "not a regular file");
  write_file_atomic(dir.file("empty"), "", "test");
  EXPECT_TRUE(MappedFile(dir.file("empty"), "test").bytes().empty());
}

}  // namespace
}  // namespace alpha
