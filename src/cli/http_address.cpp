#include "cli/http_address.hpp"

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

}  // namespace swarmflow::cli
