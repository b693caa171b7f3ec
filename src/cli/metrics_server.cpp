// `--metrics HOST:PORT` (see metrics_server.hpp), with cpp-httplib.

#include "cli/metrics_server.hpp"

#include <thread>

#include <httplib.h>

namespace swarmflow::cli {

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
};

MetricsServer::MetricsServer() : impl_(std::make_unique<Impl>()) {}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsServer::port() const { return impl_->port; }

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& address, std::function<std::string()> text,
                                                    std::string* error) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    *error = "--metrics: expected HOST:PORT, got '" + address + "'";
    return nullptr;
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(address.substr(colon + 1), &used);
    if (used != address.size() - colon - 1) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    *error = "--metrics: the port in '" + address + "' must be a number from 0 to 65535";
    return nullptr;
  }
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->impl_->server.Get("/metrics", [text = std::move(text)](const httplib::Request&, httplib::Response& res) {
    res.set_content(text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s->impl_->server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("swarmflow: the figures are at /metrics\n", "text/plain");
  });
  if (port == 0) {
    s->impl_->port = s->impl_->server.bind_to_any_port(host);
    if (s->impl_->port <= 0) {
      *error = "--metrics: cannot listen on " + address;
      return nullptr;
    }
  } else {
    if (!s->impl_->server.bind_to_port(host, port)) {
      *error = "--metrics: cannot listen on " + address + " (in use, or not an address of this host)";
      return nullptr;
    }
    s->impl_->port = port;
  }
  Impl* impl = s->impl_.get();
  impl->thread = std::thread([impl] { impl->server.listen_after_bind(); });
  return s;
}

}  // namespace swarmflow::cli
