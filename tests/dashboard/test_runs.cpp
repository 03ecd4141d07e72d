// Run listing (live, finished, stopped, gone) and the validation of run names that come from URLs:
// nothing may resolve outside the runs directory, through "..", separators, NUL or symbolic links.
#include <gtest/gtest.h>

#include <algorithm>

#include "alpha/dashboard/runs.h"
#include "core/file_test_util.h"
#include "dashboard/run_fixture.h"

namespace alpha::dashboard {
namespace {

namespace fs = std::filesystem;

const RunSummary* named(const std::vector<RunSummary>& runs, const std::string& name) {
  auto it = std::find_if(runs.begin(), runs.end(), [&](const RunSummary& r) { return r.name == name; });
  return it == runs.end() ? nullptr : &*it;
}

TEST(DashboardRuns, ListsLiveFinishedAndStoppedRuns) {
  test::TempDir dir;
  test::write_fixture_run(dir / "done", 5, 5);
  test::write_fixture_run(dir / "going", 3, 10);
  test::write_fixture_run(dir / "killed", 3, 10);
  fs::last_write_time(dir / "killed" / "metrics.jsonl", fs::file_time_type::clock::now() - std::chrono::hours(1));
  fs::create_directories(dir / "not_a_run");  // no metrics.jsonl, no config.json
  test::write_raw(dir / "stray.txt", "x");

  std::vector<RunSummary> runs = RunCatalog(dir.path()).list();
  ASSERT_EQ(runs.size(), 3u);
  ASSERT_TRUE(named(runs, "done") && named(runs, "going") && named(runs, "killed"));
  EXPECT_EQ(named(runs, "done")->status, RunStatus::finished);
  EXPECT_EQ(named(runs, "going")->status, RunStatus::live);
  EXPECT_EQ(named(runs, "going")->last_step, 3);
  EXPECT_EQ(named(runs, "going")->total_steps, 10);
  EXPECT_EQ(named(runs, "killed")->status, RunStatus::stopped);
  EXPECT_EQ(runs.back().name, "killed");  // least recently updated last
  EXPECT_EQ(named(runs, "done")->to_json()["status"], "finished");
}

TEST(DashboardRuns, ARunWhoseDirectoryVanishesIsGone) {
  test::TempDir dir;
  test::write_fixture_run(dir / "a", 2, 10);
  test::write_fixture_run(dir / "b", 2, 10);
  RunCatalog catalog(dir.path());
  ASSERT_EQ(catalog.list().size(), 2u);
  fs::remove_all(dir / "a");
  std::vector<RunSummary> runs = catalog.list();
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_TRUE(named(runs, "a"));
  EXPECT_EQ(named(runs, "a")->status, RunStatus::gone);
  EXPECT_EQ(catalog.find("a")->status, RunStatus::gone);
  EXPECT_EQ(catalog.find("never_there"), std::nullopt);
}

TEST(DashboardRuns, AMissingRunsDirectoryListsNothing) {
  test::TempDir dir;
  EXPECT_TRUE(RunCatalog(dir / "nowhere").list().empty());
}

TEST(DashboardRuns, RunNamesCannotLeaveTheRunsDirectory) {
  test::TempDir dir;
  test::write_fixture_run(dir / "runs" / "ok", 1, 1);
  fs::create_directories(dir / "secret");
  fs::create_directory_symlink(dir / "secret", dir / "runs" / "link_out");
  fs::path runs = dir / "runs";

  EXPECT_EQ(resolve_run_dir(runs, "ok"), fs::weakly_canonical(runs / "ok"));
  EXPECT_EQ(resolve_run_dir(runs.string() + "/", "ok"), fs::weakly_canonical(runs / "ok"));
  EXPECT_TRUE(resolve_run_dir(runs, "not_yet_there"));  // existence is the catalog's business
  using namespace std::string_view_literals;
  for (std::string_view bad : {""sv, "."sv, ".."sv, "../secret"sv, "ok/../../secret"sv, "/etc/passwd"sv,
                               "..\\secret"sv, "a/b"sv, "ok\0/../.."sv, "link_out"sv}) {
    EXPECT_FALSE(resolve_run_dir(runs, bad)) << "'" << bad << "'";
  }
  EXPECT_FALSE(is_valid_run_name(".."));
  EXPECT_TRUE(is_valid_run_name("..hidden-but-fine"));
}

}  // namespace
}  // namespace alpha::dashboard
