// `--metrics HOST:PORT` and `--web HOST:PORT` (see metrics_server.hpp), with cpp-httplib.

#include "cli/metrics_server.hpp"

#include "cli/http_address.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace swarmflow::cli {

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopping{false};
};

MetricsServer::MetricsServer() : impl_(std::make_unique<Impl>()) {}

MetricsServer::~MetricsServer() {
  impl_->stopping.store(true);
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsServer::port() const { return impl_->port; }

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& address, std::function<std::string()> text,
                                                    std::string* error) {
  HttpViews views;
  views.metrics = std::move(text);
  return start("--metrics", address, std::move(views), error);
}

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& flag, const std::string& address,
                                                    HttpViews views, std::string* error) {
  std::string host;
  int port = -1;
  if (!parse_host_port(address, flag, host, port, error)) return nullptr;
  if (port_in_use(host, port)) {
    *error = flag + ": cannot listen on " + address + " (in use)";
    return nullptr;
  }
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  Impl* impl = s->impl_.get();
  if (views.metrics) {
    impl->server.Get("/metrics", [text = views.metrics](const httplib::Request&, httplib::Response& res) {
      res.set_content(text(), "text/plain; version=0.0.4; charset=utf-8");
    });
  }
  if (views.state) {
    impl->server.Get("/api/v1/state", [state = views.state](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-store");
      res.set_content(state(), "application/json");
    });
    const auto period = std::chrono::milliseconds(std::max(50, views.events_ms));
    impl->server.Get("/api/v1/events", [state = views.state, period, impl](const httplib::Request&,
                                                                            httplib::Response& res) {
      res.set_header("Cache-Control", "no-store");
      res.set_chunked_content_provider(
          "text/event-stream", [state, period, impl, first = true](std::size_t, httplib::DataSink& sink) mutable {
            // One event per call: the first at once, then one a period.
            if (!first) {
              const auto due = std::chrono::steady_clock::now() + period;
              while (std::chrono::steady_clock::now() < due) {
                if (impl->stopping.load()) return false;
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
              }
            }
            first = false;
            if (impl->stopping.load()) return false;
            const std::string event = "event: state\ndata: " + state() + "\n\n";
            return sink.write(event.data(), event.size());
          });
    });
  }
  if (views.set_speed) {
    impl->server.Post(R"(/api/v1/units/([^/]+)/speed)", [set = views.set_speed](const httplib::Request& req,
                                                                               httplib::Response& res) {
      const std::string unit = req.matches[1];
      double speed = 0;
      std::string error;
      if (!req.has_param("value")) {
        error = "give the speed as ?value=S (for example 0.25)";
      } else {
        const std::string text = req.get_param_value("value");
        char* end = nullptr;
        speed = std::strtod(text.c_str(), &end);
        if (text.empty() || end == nullptr || *end != '\0') error = "the speed '" + text + "' is not a number";
      }
      if (error.empty()) error = set(unit, speed);
      if (!error.empty()) {
        res.status = 400;
        res.set_content("{\"error\": " + nlohmann::json(error).dump() + "}\n", "application/json");
        return;
      }
      res.set_content("{\"unit\": " + nlohmann::json(unit).dump() + ", \"speed\": " + nlohmann::json(speed).dump() +
                          "}\n",
                      "application/json");
    });
  }
  if (views.scale) {
    impl->server.Post(R"(/api/v1/stages/([^/]+)/replicas)", [scale = views.scale](const httplib::Request& req,
                                                                                httplib::Response& res) {
      const std::string stage = req.matches[1];
      const bool add = req.has_param("add");
      std::string error;
      if (add == req.has_param("remove")) {
        error = "say ?add (or ?add=UNIT) or ?remove";
      } else {
        error = scale(stage, add, add ? req.get_param_value("add") : std::string());
      }
      if (!error.empty()) {
        res.status = 400;
        res.set_content("{\"error\": " + nlohmann::json(error).dump() + "}\n", "application/json");
        return;
      }
      res.set_content("{\"stage\": " + nlohmann::json(stage).dump() + ", \"queued\": " +
                          nlohmann::json(add ? "add" : "remove").dump() + "}\n",
                      "application/json");
    });
  }
  if (views.move) {
    impl->server.Post(R"(/api/v1/stages/([^/]+)/replicas/([0-9]+))", [move = views.move](const httplib::Request& req,
                                                                                         httplib::Response& res) {
      const std::string stage = req.matches[1];
      const std::string replica = req.matches[2];
      std::string error;
      if (!req.has_param("to") || req.get_param_value("to").empty()) {
        error = "say where to as ?to=UNIT";
      } else if (replica.size() > 6) {
        error = "stage '" + stage + "' has no replica " + replica;
      } else {
        error = move(stage, std::stoi(replica), req.get_param_value("to"));
      }
      if (!error.empty()) {
        res.status = 400;
        res.set_content("{\"error\": " + nlohmann::json(error).dump() + "}\n", "application/json");
        return;
      }
      res.set_content("{\"stage\": " + nlohmann::json(stage).dump() + ", \"replica\": " + replica +
                          ", \"queued\": \"move\", \"to\": " + nlohmann::json(req.get_param_value("to")).dump() + "}\n",
                      "application/json");
    });
  }
  if (views.web) {
    impl->server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(web_view_page(), "text/html; charset=utf-8");
    });
  } else {
    const bool api = static_cast<bool>(views.state);
    impl->server.Get("/", [api](const httplib::Request&, httplib::Response& res) {
      res.set_content(api ? "swarmflow: the figures are at /metrics and /api/v1/state\n"
                          : "swarmflow: the figures are at /metrics\n",
                      "text/plain");
    });
  }
  if (port == 0) {
    impl->port = impl->server.bind_to_any_port(host);
    if (impl->port <= 0) {
      *error = flag + ": cannot listen on " + address;
      return nullptr;
    }
  } else {
    if (!impl->server.bind_to_port(host, port)) {
      *error = flag + ": cannot listen on " + address + " (in use, or not an address of this host)";
      return nullptr;
    }
    impl->port = port;
  }
  impl->thread = std::thread([impl] { impl->server.listen_after_bind(); });
  return s;
}

}  // namespace swarmflow::cli
