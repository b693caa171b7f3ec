#pragma once
// Where every replica lives, as of one placement epoch. Immutable: a new
// placement is a new table, published to the run and handed to every host,
// so nothing reads a placement while it changes.

#include <cstdint>
#include <vector>

#include <caf/actor.hpp>

namespace swarmflow::runtime {

/// The unit of a replica that was lost with its unit and not placed again
/// (a source on a dead unit).
constexpr int kLostUnit = -1;

struct RoutingTable {
  std::uint32_t epoch = 1;
  /// The unit hosting each replica: unit_of[node][replica] (kLostUnit: none).
  std::vector<std::vector<int>> unit_of;
  /// The host actor of each replica hosted in this process; null elsewhere.
  std::vector<std::vector<caf::actor>> actors;

  int unit(int node, int replica) const {
    return unit_of[static_cast<std::size_t>(node)][static_cast<std::size_t>(replica)];
  }
  /// The local host of a replica, or null when it is not hosted in this process.
  caf::actor actor(int node, int replica) const {
    const auto n = static_cast<std::size_t>(node);
    const auto r = static_cast<std::size_t>(replica);
    if (n >= actors.size() || r >= actors[n].size()) return {};
    return actors[n][r];
  }
  /// Replicas on `unit`.
  int replicas_on(int unit) const {
    int n = 0;
    for (const auto& replicas : unit_of) {
      for (int owner : replicas) n += owner == unit ? 1 : 0;
    }
    return n;
  }
};

}  // namespace swarmflow::runtime
