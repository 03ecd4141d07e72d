#include "alpha/dashboard/server.h"

#include "alpha/core/error.h"

#if ALPHA_WITH_DASHBOARD
#include <httplib.h>

#include <charconv>
#include <chrono>
#include <fstream>
#include <iterator>
#include <optional>
#include <thread>

#include "alpha/core/json.h"
#include "alpha/dashboard/assets.h"
#include "alpha/dashboard/metrics_log.h"
#include "alpha/dashboard/runs.h"
#endif

namespace alpha::dashboard {

#if ALPHA_WITH_DASHBOARD

namespace {

using nlohmann::json;

void send_json(httplib::Response& res, const json& body, int status = 200) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, {{"error", message}}, status);
}

void send_asset(httplib::Response& res, std::string_view name) {
  const Asset* asset = find_asset(name);
  if (!asset) return send_error(res, 404, "no such asset");
  res.set_content(asset->body.data(), asset->body.size(), std::string(asset->content_type).c_str());
}

// The run a request names, or an answer: 400 for a name that is not one, 404 for an unknown run, 410
// for a run whose directory has vanished.
std::optional<std::filesystem::path> requested_run(RunCatalog& catalog, const std::string& name,
                                                   httplib::Response& res) {
  std::optional<std::filesystem::path> dir = resolve_run_dir(catalog.runs_dir(), name);
  if (!dir) {
    send_error(res, 400, "not a run name");
    return std::nullopt;
  }
  std::optional<RunSummary> run = catalog.find(name);
  if (!run) {
    send_error(res, 404, "no such run");
    return std::nullopt;
  }
  if (run->status == RunStatus::gone) {
    send_json(res, {{"error", "run directory is gone"}, {"run", run->to_json()}}, 410);
    return std::nullopt;
  }
  return dir;
}

}  // namespace

struct DashboardServer::Impl {
  ServerOptions options;
  RunCatalog catalog;
  httplib::Server http;
  int port = 0;
  std::thread thread;

  explicit Impl(ServerOptions o) : options(std::move(o)), catalog(options.runs_dir) {}

  void route() {
    http.Get("/", [](const httplib::Request&, httplib::Response& res) { send_asset(res, "index.html"); });
    http.Get(R"(/assets/([A-Za-z0-9_.\-]+))",
             [](const httplib::Request& req, httplib::Response& res) { send_asset(res, req.matches[1].str()); });
    http.Get("/api/runs", [this](const httplib::Request&, httplib::Response& res) {
      json runs = json::array();
      for (const RunSummary& run : catalog.list()) runs.push_back(run.to_json());
      send_json(res, {{"runs_dir", options.runs_dir.string()}, {"runs", runs}});
    });
    http.Get(R"(/api/runs/([^/]+)/metrics)", [this](const httplib::Request& req, httplib::Response& res) {
      std::string name = req.matches[1].str();
      std::optional<std::filesystem::path> dir = requested_run(catalog, name, res);
      if (!dir) return;
      int64_t since = 0;
      if (req.has_param("since")) {
        std::string text = req.get_param_value("since");
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), since);
        if (ec != std::errc() || end != text.data() + text.size()) return send_error(res, 400, "since: not an integer");
      }
      MetricsLog log = read_metrics(*dir / "metrics.jsonl", since);
      send_json(res, {{"run", catalog.find(name).value_or(RunSummary::gone(name)).to_json()},
                      {"records", log.records},
                      {"skipped_lines", log.skipped_lines},
                      {"warnings", log.warnings}});
    });
    http.Get(R"(/api/runs/([^/]+)/config)", [this](const httplib::Request& req, httplib::Response& res) {
      std::optional<std::filesystem::path> dir = requested_run(catalog, req.matches[1].str(), res);
      if (!dir) return;
      json config = json::object();
      if (std::ifstream in(*dir / "config.json", std::ios::binary); in)
        config = parse_json(std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()}, nullptr,
                            /*allow_exceptions=*/false);
      send_json(res, config.is_discarded() ? json::object() : config);
    });
    http.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-store");
      res.set_header("X-Content-Type-Options", "nosniff");
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, 500, what);
    });
  }
};

bool server_available() { return true; }

DashboardServer::DashboardServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  const ServerOptions& o = impl_->options;
  if (o.port < 0 || o.port > 65535) raise<ConfigError>("dashboard", "--port", "0 to 65535", std::to_string(o.port));
  impl_->route();
  // httplib's default sets SO_REUSEPORT, which lets a second server share a port in use and take half
  // its requests; SO_REUSEADDR alone still allows a quick restart while refusing a port that is taken.
  impl_->http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  bool bound = o.port == 0 ? (impl_->port = impl_->http.bind_to_any_port(o.host)) > 0
                           : impl_->http.bind_to_port(o.host, impl_->port = o.port);
  if (!bound)
    raise<IOError>("dashboard", "--host/--port", "an address this machine can listen on",
                   o.host + ":" + std::to_string(o.port) + " (in use, or not a local address)");
}

DashboardServer::~DashboardServer() { stop(); }

int DashboardServer::port() const { return impl_->port; }

std::string DashboardServer::url() const {
  return "http://" + impl_->options.host + ":" + std::to_string(impl_->port) + "/";
}

void DashboardServer::serve() { impl_->http.listen_after_bind(); }

void DashboardServer::start() {
  impl_->thread = std::thread([this] { impl_->http.listen_after_bind(); });
  // httplib's stop() does nothing before the loop runs: wait (a bounded while) so stop() always ends it.
  for (int waited_ms = 0; !impl_->http.is_running() && waited_ms < 5000; ++waited_ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void DashboardServer::stop() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

#else  // built without cpp-httplib

struct DashboardServer::Impl {};

bool server_available() { return false; }

DashboardServer::DashboardServer(ServerOptions) {
  throw ConfigError(
      "[dashboard] this alpha was built without the dashboard server: install libcpp-httplib-dev and "
      "reconfigure (cmake -DALPHA_DASHBOARD=ON)");
}
DashboardServer::~DashboardServer() = default;
int DashboardServer::port() const { return 0; }
std::string DashboardServer::url() const { return ""; }
void DashboardServer::serve() {}
void DashboardServer::start() {}
void DashboardServer::stop() {}

#endif

}  // namespace alpha::dashboard
