// The dashboard's HTTP server (`alpha dashboard`, `alpha train --dashboard`), over cpp-httplib.
//   GET /                               the page (embedded assets, nothing from the network)
//   GET /assets/NAME                    its script and styles
//   GET /api/runs                       {"runs": [{name, status, last_step, total_steps, ...}]}
//   GET /api/runs/NAME/metrics?since=S  {"run": summary, "records": [steps > S], "skipped_lines", "warnings"}
//   GET /api/runs/NAME/config           the run's config.json
// Files are read only when a request asks, so a server beside a training run costs the run nothing. Run
// names are validated (runs.h): nothing outside the runs directory is ever read. Binds to 127.0.0.1
// unless another host is given. In a build without cpp-httplib the constructor raises ConfigError.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

namespace alpha::dashboard {

struct ServerOptions {
  std::filesystem::path runs_dir = "runs";
  std::string host = "127.0.0.1";
  int port = 8765;  // 0: any free port (the one bound is in port())
};

// Whether this build has the server (cpp-httplib was found at configure time).
bool server_available();

class DashboardServer {
 public:
  // Binds the socket (IOError naming host and port when it cannot), serves nothing yet.
  explicit DashboardServer(ServerOptions options);
  ~DashboardServer();  // stops serving and joins the background thread, if any
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  int port() const;
  std::string url() const;  // http://HOST:PORT/
  void serve();             // serves on this thread until stop()
  void start();             // serves on a background thread
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace alpha::dashboard
