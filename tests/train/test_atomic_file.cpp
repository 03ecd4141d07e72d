#include <gtest/gtest.h>

#include <unistd.h>

#include "alpha/train/atomic_file.h"
#include "support/checks.h"
#include "train/train_test_util.h"

namespace alpha::train {
namespace {

using test::list_dir;
using test::read_raw;
using test::TempDir;
using test::write_raw;

using Names = std::vector<std::string>;

TEST(AtomicFile, WritesNewFileAndReplacesOldOneLeavingNoTemporary) {
  TempDir dir;
  write_file_atomic(dir / "a.bin", std::string("first\0version", 13));
  EXPECT_EQ(read_raw(dir / "a.bin"), std::string("first\0version", 13));
  write_file_atomic(dir / "a.bin", "second");
  EXPECT_EQ(read_raw(dir / "a.bin"), "second");
  write_file_atomic(dir / "empty", "");
  EXPECT_EQ(read_raw(dir / "empty"), "");
  EXPECT_EQ(list_dir(dir.path()), (Names{"a.bin", "empty"}));
}

TEST(AtomicFile, StreamedBytesAppearOnlyAtCommit) {
  TempDir dir;
  write_raw(dir / "t", "old");
  AtomicFileWriter writer(dir / "t");
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
    AtomicFileWriter writer(dir / "t");
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
    write_file_atomic(dir / "t", std::string(100000, 'y'));
  } catch (const IOError& e) {
    threw = true;
    std::string what = e.what();
    EXPECT_NE(what.find((dir / "t").string()), std::string::npos) << what;
    EXPECT_NE(what.find("writing at byte offset 4096"), std::string::npos) << what;
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
  EXPECT_ALPHA_ERROR(write_file_atomic(dir / "target", "file contents"), IOError, "target'",
                     "renaming the temporary file over the target", "Is a directory");
  EXPECT_EQ(read_raw(dir / "target" / "inside"), "kept");
  EXPECT_EQ(list_dir(dir.path()), (Names{"target"}));
}

TEST(AtomicFile, ReadOnlyDirectoryRaisesAndKeepsTarget) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions (FailedWrite/FailedRename cover failures)";
  TempDir dir;
  std::filesystem::create_directory(dir / "ro");
  write_raw(dir / "ro" / "t", "old");
  std::filesystem::permissions(dir / "ro", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  EXPECT_ALPHA_ERROR(write_file_atomic(dir / "ro" / "t", "new"), IOError, "ro/t'",
                     "creating a temporary file in its directory", "Permission denied");
  EXPECT_EQ(read_raw(dir / "ro" / "t"), "old");
  EXPECT_EQ(list_dir(dir / "ro"), (Names{"t"}));
}

TEST(AtomicFile, MissingDirectoryRaises) {
  TempDir dir;
  EXPECT_ALPHA_ERROR(write_file_atomic(dir / "no" / "t", "x"), IOError, "no/t'", "No such file or directory");
  EXPECT_ALPHA_ERROR(write_file_atomic(dir.path() / "", "x"), IOError, "names no file");
}

TEST(AtomicFile, ReadFileReturnsBytesAndNamesFailures) {
  TempDir dir;
  std::string bytes("\0\1\2binary\n", 10);
  write_raw(dir / "f", bytes);
  EXPECT_EQ(read_file(dir / "f"), bytes);
  EXPECT_ALPHA_ERROR(read_file(dir / "missing"), IOError, "missing'", "No such file or directory");
  EXPECT_ALPHA_ERROR(read_file(dir.path()), IOError, "not a regular file");
  InputFile file(dir / "f");
  EXPECT_EQ(file.size(), 10u);
  char buf[8];
  file.read_at(2, buf, 8, "test");
  EXPECT_EQ(std::string(buf, 8), bytes.substr(2));
  EXPECT_ALPHA_ERROR(file.read_at(4, buf, 8, "test_op"), IOError, "[test_op]", "f' at byte offset 10",
                     "2 more bytes were expected");
}

TEST(AtomicFile, FsyncDirectoryNamesAMissingDirectory) {
  TempDir dir;
  fsync_directory(dir.path());
  EXPECT_ALPHA_ERROR(fsync_directory(dir / "gone"), IOError, "gone'", "opening the directory");
}

}  // namespace
}  // namespace alpha::train
