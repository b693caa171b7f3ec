#pragma once
// `--metrics HOST:PORT`: serves the run's figures at /metrics in the
// Prometheus text format, on a thread of its own, for as long as it lives.

#include <functional>
#include <memory>
#include <string>

namespace swarmflow::cli {

class MetricsServer {
 public:
  /// Binds HOST:PORT (port 0: any free one) and serves `text()` at /metrics.
  /// Null with `error` set when the address is malformed or cannot be bound.
  static std::unique_ptr<MetricsServer> start(const std::string& address, std::function<std::string()> text,
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

}  // namespace swarmflow::cli
