#pragma once
// Asking a swarmflow process's HTTP server until it answers, for the tests
// that run the command as a real process.

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <httplib.h>

namespace swarmflow::testing {

/// GET http://127.0.0.1:PORT/PATH until it answers 200 and `until` holds
/// (the server may not be up yet), or `patience` runs out; the body, or ""
/// then.
inline std::string http_get_until(int port, const std::string& path, std::chrono::seconds patience,
                                  const std::function<bool(const std::string&)>& until = nullptr) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1, 0);
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto res = client.Get(path.c_str()); res && res->status == 200 && (!until || until(res->body))) {
      return res->body;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {};
}

}  // namespace swarmflow::testing
