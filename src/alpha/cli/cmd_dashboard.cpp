// `alpha dashboard` (a live page of the runs in a folder) and `alpha report` (one run as a
// self-contained HTML file); `alpha train --dashboard` starts the same server beside a run.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "alpha/cli/commands.h"
#include "alpha/core/file_io.h"
#include "alpha/dashboard/report.h"
#include "alpha/dashboard/server.h"

namespace alpha::cli {
namespace {

struct DashboardArgs {
  std::string runs_dir = "runs";
  std::string host = "127.0.0.1";
  int port = 8765;
};

void run_dashboard(const DashboardArgs& args) {
  dashboard::DashboardServer server({args.runs_dir, args.host, args.port});
  std::cout << "dashboard: " << server.url() << " (runs in " << args.runs_dir << "; Ctrl-C stops it)" << std::endl;
  server.serve();
}

struct ReportArgs {
  std::string run_dir, out;
};

void run_report(const ReportArgs& args) {
  dashboard::Report report = dashboard::build_report(args.run_dir);
  for (const std::string& warning : report.warnings) std::cerr << "alpha report: warning: " << warning << "\n";
  namespace fs = std::filesystem;
  fs::path out = args.out.empty() ? fs::path(args.run_dir) / "report.html" : fs::path(args.out);
  write_file_atomic(out, report.html, "report");
  std::cout << "wrote " << out.string() << "\n";
}

}  // namespace

void add_dashboard_commands(CLI::App& app) {
  auto* dashboard_cmd = app.add_subcommand("dashboard", "Serve a live page charting the runs in a folder");
  auto dargs = std::make_shared<DashboardArgs>();
  dashboard_cmd->add_option("RUNS_DIR", dargs->runs_dir, "Folder of run directories")->capture_default_str();
  dashboard_cmd->add_option("--port", dargs->port, "TCP port; 0 = any free one")->capture_default_str();
  dashboard_cmd->add_option("--host", dargs->host, "Address to listen on (another than loopback exposes your runs)")
      ->capture_default_str();
  dashboard_cmd->callback([dargs] { run_dashboard(*dargs); });

  auto* report_cmd =
      app.add_subcommand("report", "Write a run's charts, config, final numbers and sample as one HTML file");
  auto rargs = std::make_shared<ReportArgs>();
  report_cmd->add_option("RUN_DIR", rargs->run_dir, "Run directory")->required();
  report_cmd->add_option("--out", rargs->out, "HTML file to write (default: RUN_DIR/report.html)");
  report_cmd->callback([rargs] { run_report(*rargs); });
}

}  // namespace alpha::cli
