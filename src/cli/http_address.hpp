#pragma once
// HOST:PORT of the command's HTTP listeners (--metrics, --http).

#include <string>

namespace swarmflow::cli {

/// Splits `address` (HOST:PORT, HOST may be [v6]) into `host` and `port`
/// (0..65535); false with `error` (naming `flag`) when it is not one.
bool parse_host_port(const std::string& address, const std::string& flag, std::string& host, int& port,
                     std::string* error);

/// Whether something already accepts connections at `host`:`port` (port
/// > 0). cpp-httplib binds with SO_REUSEPORT, so a second swarmflow server
/// would otherwise share a port another one holds instead of being refused.
bool port_in_use(const std::string& host, int port);

}  // namespace swarmflow::cli
