// `alpha report`: one self-contained HTML file (no reference to anything outside it) holding the run's
// name, config, final numbers, sample and metrics; a bad run directory is one clear line.
#include <gtest/gtest.h>

#include <regex>

#include "alpha/core/error.h"
#include "alpha/dashboard/report.h"
#include "alpha/dashboard/server.h"
#include "core/file_test_util.h"
#include "dashboard/run_fixture.h"

namespace alpha::dashboard {
namespace {

TEST(DashboardReport, IsSelfContainedAndHoldsTheRunsNumbers) {
  test::TempDir dir;
  test::write_fixture_run(dir / "my-run", 20, 20);
  test::write_raw(dir / "my-run" / "sample.txt", "Once upon a </script><b>time</b>");
  Report report = build_report(dir / "my-run");
  const std::string& html = report.html;
  EXPECT_EQ(report.skipped_lines, 0);
  EXPECT_NE(html.find("Alpha run my-run"), std::string::npos);
  EXPECT_NE(html.find("&quot;n_layer&quot;: 2"), std::string::npos) << "the config";
  EXPECT_NE(html.find("<th>final loss</th><td>3.0000</td>"), std::string::npos) << "loss at step 20 is 5 - 2";
  EXPECT_NE(html.find("<th>steps</th><td>20 of 20</td>"), std::string::npos);
  EXPECT_NE(html.find("Once upon a &lt;/script&gt;&lt;b&gt;time&lt;/b&gt;"), std::string::npos) << "the sample, escaped";
  EXPECT_NE(html.find("\"step\":20"), std::string::npos) << "the metrics, embedded";
  EXPECT_NE(html.find("const AlphaCharts"), std::string::npos) << "the chart script, inlined";
  // Nothing fetched from elsewhere: no URLs, no src= or href= at all.
  EXPECT_FALSE(std::regex_search(html, std::regex("https?://", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)\s*=)", std::regex::icase)));
  // Exactly three <script> blocks close: data, charts, report; no data can close one early.
  size_t closes = 0;
  for (size_t at = html.find("</script"); at != std::string::npos; at = html.find("</script", at + 1)) ++closes;
  EXPECT_EQ(closes, 3u);
}

TEST(DashboardReport, SkipsBadMetricsLinesWithWarnings) {
  test::TempDir dir;
  test::write_fixture_run(dir / "r", 3, 10);
  test::write_raw(dir / "r" / "metrics.jsonl", test::metrics_line(1) + "garbage\n" + test::metrics_line(2) + "{\"st");
  Report report = build_report(dir / "r");
  EXPECT_EQ(report.skipped_lines, 2);
  EXPECT_EQ(report.warnings.size(), 2u);
  EXPECT_NE(report.html.find("<th>steps</th><td>2 of 10</td>"), std::string::npos);
}

TEST(DashboardReport, ARunDirectoryIsRequired) {
  test::TempDir dir;
  EXPECT_THROW(build_report(dir / "nothing"), IOError);
}

TEST(CliReport, WritesTheFileAndRefusesANonRunInOneLine) {
  test::TempDir dir;
  test::write_fixture_run(dir / "run", 4, 4);
  std::string out, err;
  ASSERT_EQ(test::run_alpha("report " + dir.file("run"), dir, out, err), 0) << err;
  EXPECT_NE(test::read_raw(dir / "run" / "report.html").find("Alpha run run"), std::string::npos);
  ASSERT_EQ(test::run_alpha("report " + dir.file("run") + " --out " + dir.file("shared.html"), dir, out, err), 0) << err;
  EXPECT_NE(out.find("shared.html"), std::string::npos) << out;
  EXPECT_EQ(test::run_alpha("report " + dir.file("nothing"), dir, out, err), 1);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("nothing"), std::string::npos) << err;
}

TEST(CliDashboard, FailsInOneLineWhenItCannotServe) {
  test::TempDir dir;
  std::string out, err;
  // Without the server built, any start is refused; with it, an address that is not local is.
  EXPECT_EQ(test::run_alpha("dashboard " + dir.file("runs") + " --host 203.0.113.7 --port 0", dir, out, err), 1);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find(server_available() ? "203.0.113.7" : "built without the dashboard"), std::string::npos) << err;
  EXPECT_EQ(test::run_alpha("train --dashboard --steps 1 --out " + dir.file("runs/x") + " --dashboard-port 70000", dir,
                            out, err), 1);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("--dashboard-port"), std::string::npos) << err;
}

}  // namespace
}  // namespace alpha::dashboard
