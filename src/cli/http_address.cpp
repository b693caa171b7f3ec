#include "cli/http_address.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>

namespace swarmflow::cli {

bool parse_host_port(const std::string& address, const std::string& flag, std::string& host, int& port,
                     std::string* error) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    *error = flag + ": expected HOST:PORT, got '" + address + "'";
    return false;
  }
  host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(address.substr(colon + 1), &used);
    if (used != address.size() - colon - 1) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    *error = flag + ": the port in '" + address + "' must be a number from 0 to 65535";
    return false;
  }
  return true;
}

bool port_in_use(const std::string& host, int port) {
  if (port <= 0) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  // A wildcard address is asked on loopback, where a local listener answers.
  const std::string where = host.empty() || host == "0.0.0.0" ? "127.0.0.1" : host == "::" ? "::1" : host;
  if (getaddrinfo(where.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool answered = false;
  for (addrinfo* a = found; a != nullptr && !answered; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    answered = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(found);
  return answered;
}

}  // namespace swarmflow::cli
