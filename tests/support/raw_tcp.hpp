#pragma once
// A peer that speaks no ZeroMQ at all: it opens a TCP connection, writes some
// bytes and hangs up. For tests of what a server socket does with garbage.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

namespace swarmflow::testing {

/// Bytes that are no ZMTP greeting: text, then noise from `seed`.
inline std::string garbage_bytes(unsigned seed, std::size_t noise = 256) {
  std::string out = "GET / HTTP/1.1\r\nHost: swarmflow\r\n\r\n";
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < noise; ++i) out.push_back(static_cast<char>(rng()));
  return out;
}

/// Connects to `tcp://HOST:PORT` (an IPv4 address), writes `bytes` and
/// closes. False when the connection failed; the write is best effort, as
/// the server may hang up as soon as it has read the first bytes.
inline bool send_raw_tcp(const std::string& endpoint, const std::string& bytes) {
  const std::string prefix = "tcp://";
  const auto colon = endpoint.rfind(':');
  if (endpoint.rfind(prefix, 0) != 0 || colon == std::string::npos || colon < prefix.size()) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  if (::inet_pton(AF_INET, endpoint.substr(prefix.size(), colon - prefix.size()).c_str(), &addr.sin_addr) != 1) {
    return false;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  std::size_t sent = 0;
  while (connected && sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return connected;
}

}  // namespace swarmflow::testing
