#pragma once
// Where every replica lives, as of one placement epoch. Immutable: a new
// placement is a new table, published to the run and handed to every host,
// so nothing reads a placement while it changes.

#include <algorithm>
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
  /// By node, for a stage with `replicas: {min, max}` (max replicas in
  /// unit_of): replicas [0, active) take work, the others stand by; a keyed
  /// stage's keys hash over replicas [0, ring) where `keys` does not place
  /// them (ring <= active: an added replica gets keys by the key map). Empty,
  /// or 0 for a node: all of its replicas.
  std::vector<int> active;
  std::vector<int> ring;
  /// The draining replica gives away every key it holds state for (it is
  /// removed), not only `draining_keys`.
  bool draining_all_keys = false;

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

  int active_of(int node) const { return of(active, node); }
  int ring_of(int node) const { return of(ring, node); }

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
  /// Of `counts` (active or ring) for `node`; all of its replicas when unset.
  int of(const std::vector<int>& counts, int node) const {
    const auto n = static_cast<std::size_t>(node);
    const int all = n < unit_of.size() ? static_cast<int>(unit_of[n].size()) : 0;
    return n < counts.size() && counts[n] > 0 ? std::min(counts[n], all) : all;
  }
  /// Replicas on `unit`; with `working`, only those that take work (not
  /// those standing by).
  int replicas_on(int unit, bool working = false) const {
    int n = 0;
    for (std::size_t node = 0; node < unit_of.size(); ++node) {
      const int limit = working ? active_of(static_cast<int>(node)) : static_cast<int>(unit_of[node].size());
      for (int r = 0; r < limit; ++r) n += unit_of[node][static_cast<std::size_t>(r)] == unit ? 1 : 0;
    }
    return n;
  }
};

}  // namespace swarmflow::runtime
