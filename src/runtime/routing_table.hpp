#pragma once
// Where every replica lives, as of one placement epoch. Immutable: a new
// placement is a new table, published to the run and handed to every host,
// so nothing reads a placement while it changes.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <caf/actor.hpp>

#include "runtime/routing.hpp"

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
  /// A replica draining for a move (node, replica), or (-1, -1): its
  /// producers send it nothing new, and it hands over once it has done
  /// everything it was sent (docs/placement.md "What a move guarantees").
  std::pair<int, int> draining{-1, -1};
  /// The keys the draining replica gives to other replicas (a key move):
  /// it hands over their state when its stage keeps state per key.
  std::vector<std::uint64_t> draining_keys;
  /// Replicas that drained and were placed anew (a clean hand-over, not a
  /// failover: nothing to replay, no duplicates to expect), with the unit
  /// they drained on, whose last acks and marks for them still count. Kept
  /// until a failover (which fences instead).
  struct Handover {
    int node = 0;
    int replica = 0;
    int from_unit = -1;
    std::uint32_t epoch = 0;  ///< the placement that took it up
  };
  std::vector<Handover> handovers;
  /// By node: keys of a keyed stage placed by measured load (null: the hash
  /// ring alone). Empty: none anywhere.
  std::vector<std::shared_ptr<const KeyMap>> keys;

  bool is_draining(int node, int replica) const { return draining.first == node && draining.second == replica; }
  /// Whether this placement took up replica (node, replica) after it drained.
  bool was_handed_over(int node, int replica) const {
    for (const auto& h : handovers) {
      if (h.node == node && h.replica == replica && h.epoch == epoch) return true;
    }
    return false;
  }
  /// Whether `unit` hosted replica (node, replica) until it drained there.
  bool drained_on(int node, int replica, int unit) const {
    for (const auto& h : handovers) {
      if (h.node == node && h.replica == replica && h.from_unit == unit) return true;
    }
    return false;
  }
  std::shared_ptr<const KeyMap> key_map(int node) const {
    const auto n = static_cast<std::size_t>(node);
    return n < keys.size() ? keys[n] : nullptr;
  }

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
