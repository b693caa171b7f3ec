#pragma once
// `--metrics HOST:PORT` and `--web HOST:PORT`: serve the run's figures over
// HTTP on a thread of their own, for as long as they live: /metrics in the
// Prometheus text format, /api/v1/state (the run report as JSON, as it
// stands), /api/v1/events (the same as Server-Sent Events, once a second),
// and, for `--web`, the live web view at /. docs/observability.md documents
// the API.

#include <functional>
#include <memory>
#include <string>

namespace swarmflow::cli {

/// What a server serves.
struct HttpViews {
  std::function<std::string()> metrics;  ///< /metrics: Prometheus text
  std::function<std::string()> state;    ///< /api/v1/state and /api/v1/events: JSON; null: neither
  /// POST /api/v1/units/<unit>/speed?value=S: sets a unit's speed (an
  /// error's message, empty on success); null: not served.
  std::function<std::string(const std::string& unit, double speed)> set_speed;
  /// POST /api/v1/stages/<stage>/replicas?add[=UNIT] or ?remove: a replica
  /// of a stage with `replicas: {min, max}` added or removed; returns an
  /// error message, empty when the change was queued.
  std::function<std::string(const std::string& stage, bool add, const std::string& unit)> scale;
  /// POST /api/v1/stages/<stage>/replicas/<r>?to=UNIT: moves replica r to
  /// unit UNIT (Runtime::move_replica); returns an error message, empty
  /// when the move was queued.
  std::function<std::string(const std::string& stage, int replica, const std::string& unit)> move;
  bool web = false;                      ///< / serves the web view (web_view.cpp)
  int events_ms = 1000;                  ///< /api/v1/events sends the state this often
};

class MetricsServer {
 public:
  /// Binds HOST:PORT (port 0: any free one) and serves `text()` at /metrics.
  /// Null with `error` set when the address is malformed or cannot be bound.
  static std::unique_ptr<MetricsServer> start(const std::string& address, std::function<std::string()> text,
                                              std::string* error);
  /// The same with every view of `views`; `flag` names the option in errors.
  static std::unique_ptr<MetricsServer> start(const std::string& flag, const std::string& address, HttpViews views,
                                              std::string* error);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;

 private:
  MetricsServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The web view's page: HTML and JavaScript, nothing fetched from elsewhere.
const char* web_view_page();

}  // namespace swarmflow::cli
