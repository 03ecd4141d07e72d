// The dashboard's HTTP server on an ephemeral loopback port, through httplib's client: the page and its
// assets, the run list, incremental metrics, a run that vanishes, and path traversal refused (400/404,
// never a file's content). Built only with the server (ALPHA_WITH_DASHBOARD).
#include <gtest/gtest.h>
#include <httplib.h>

#include <set>

#include <nlohmann/json.hpp>

#include "alpha/core/error.h"
#include "alpha/dashboard/server.h"
#include "core/file_test_util.h"
#include "dashboard/run_fixture.h"

namespace alpha::dashboard {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class DashboardServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_fixture_run(dir_ / "runs" / "alpha-1", 5, 10);
    test::write_fixture_run(dir_ / "runs" / "beta", 3, 3);
    test::write_raw(dir_ / "secret.txt", "TOP SECRET");
    fs::create_directory_symlink(dir_.path(), dir_ / "runs" / "escape");
    server_ = std::make_unique<DashboardServer>(ServerOptions{dir_ / "runs", "127.0.0.1", 0});
    server_->start();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_connection_timeout(5);
    client_->set_read_timeout(5);
  }

  json get_json(const std::string& path, int expected_status = 200) {
    httplib::Result res = client_->Get(path);
    EXPECT_TRUE(res) << path;
    if (!res) return json();
    EXPECT_EQ(res->status, expected_status) << path << ": " << res->body;
    return json::parse(res->body, nullptr, false);
  }

  test::TempDir dir_;
  std::unique_ptr<DashboardServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(DashboardServerTest, ServesThePageAndItsAssetsFromTheBinary) {
  EXPECT_TRUE(server_->url().starts_with("http://127.0.0.1:"));
  httplib::Result page = client_->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("assets/charts.js"), std::string::npos);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  httplib::Result script = client_->Get("/assets/charts.js");
  ASSERT_TRUE(script);
  EXPECT_EQ(script->status, 200);
  EXPECT_NE(script->body.find("const AlphaCharts"), std::string::npos);
  EXPECT_EQ(client_->Get("/assets/nothing.js")->status, 404);
}

TEST_F(DashboardServerTest, ListsRunsAndServesMetricsIncrementally) {
  json runs = get_json("/api/runs")["runs"];
  ASSERT_EQ(runs.size(), 2u) << runs.dump();  // "escape" leads outside: not a run
  std::set<std::string> names = {runs[0]["name"], runs[1]["name"]};
  EXPECT_EQ(names, (std::set<std::string>{"alpha-1", "beta"}));

  json all = get_json("/api/runs/alpha-1/metrics");
  EXPECT_EQ(all["records"].size(), 5u);
  EXPECT_EQ(all["run"]["status"], "live");
  json fresh = get_json("/api/runs/alpha-1/metrics?since=3");
  ASSERT_EQ(fresh["records"].size(), 2u);
  EXPECT_EQ(fresh["records"][0]["step"], 4);
  // A line being written is skipped and reported, the rest still served.
  test::write_raw(dir_ / "runs" / "alpha-1" / "metrics.jsonl", test::metrics_line(1) + "{\"step\": 2, \"lo");
  json partial = get_json("/api/runs/alpha-1/metrics");
  EXPECT_EQ(partial["records"].size(), 1u);
  EXPECT_EQ(partial["skipped_lines"], 1);
  EXPECT_EQ(get_json("/api/runs/beta/config")["train"]["steps"], 3);
  get_json("/api/runs/alpha-1/metrics?since=three", 400);
  get_json("/api/runs/nobody/metrics", 404);
}

TEST_F(DashboardServerTest, AVanishedRunIsGone) {
  get_json("/api/runs");
  fs::remove_all(dir_ / "runs" / "beta");
  json runs = get_json("/api/runs")["runs"];
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1]["name"], "beta");
  EXPECT_EQ(runs[1]["status"], "gone");
  EXPECT_EQ(get_json("/api/runs/beta/metrics", 410)["run"]["status"], "gone");
}

TEST_F(DashboardServerTest, RefusesPathTraversal) {
  for (const std::string path :
       {"/api/runs/..%2f..%2fsecret.txt/metrics", "/api/runs/..%2fsecret.txt/config", "/api/runs/../secret.txt",
        "/api/runs/%2e%2e/config", "/api/runs/..%5csecret.txt/config", "/api/runs/escape/config",
        "/api/runs/escape%2fsecret.txt/metrics", "/api/runs/alpha-1%00/config", "/assets/..%2f..%2fsecret.txt",
        "/assets/../../secret.txt", "/../secret.txt", "/..%2f..%2f..%2fetc%2fpasswd", "/assets/%2e%2e%2fsecret.txt"}) {
    httplib::Result res = client_->Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_TRUE(res->status == 400 || res->status == 404) << path << " answered " << res->status;
    EXPECT_EQ(res->body.find("TOP SECRET"), std::string::npos) << path;
    EXPECT_EQ(res->body.find("root:"), std::string::npos) << path;
  }
}

TEST_F(DashboardServerTest, StopsAndRefusesAPortInUse) {
  EXPECT_THROW(DashboardServer(ServerOptions{dir_ / "runs", "127.0.0.1", server_->port()}), IOError);
  server_->stop();
  EXPECT_FALSE(client_->Get("/api/runs"));
}

}  // namespace
}  // namespace alpha::dashboard
