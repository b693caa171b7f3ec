#pragma once
// The coordinator's store of the figures units in other processes stream to
// it (UnitFigures, every RuntimeOptions::figures_ms, and UnitDone at the
// end). Each message is cumulative: the store keeps the latest one per
// (replica, unit, unit process) and replaces it, so a message lost or sent
// twice never counts twice. A replica that moved keeps what each of its hosts
// said; one restored from a snapshot carries its predecessors' `processed`
// and named counters, which then are not added again. What changed since the
// last look comes out as differences, added to the coordinator's counters,
// which also count the work of its own units. Pure code: no actors, no
// sockets.

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace swarmflow::runtime {

/// What one unit process said about one replica, cumulative.
struct ReplicaFigures {
  int node = 0;
  int replica = 0;
  std::uint64_t processed = 0;
  std::uint64_t errors = 0;
  std::uint64_t restarts = 0;
  std::uint64_t dead_letters = 0;
  std::uint64_t queue_peak = 0;
  std::uint64_t queued = 0;  ///< a gauge: waiting now
  std::map<std::string, std::int64_t> counters;
  std::map<int, std::uint64_t> latency;  ///< LatencyHistogram bucket -> count
  std::int64_t latency_max_ns = 0;
  std::vector<std::uint64_t> service_buckets;
  std::int64_t service_sum_ns = 0;
  std::map<int, std::uint64_t> residence;  ///< LatencyHistogram bucket -> count
  std::int64_t residence_max_ns = 0;
};

/// What one unit process said about one side of an edge at one replica.
struct EdgeSideFigures {
  int edge = 0;
  int replica = 0;
  bool producer = true;
  std::uint64_t sent = 0;
  std::uint64_t dropped = 0;
  std::uint64_t too_large = 0;
  std::uint64_t delivered = 0;
  std::uint64_t refused = 0;
  std::uint64_t peak_in_flight = 0;
  std::uint64_t peak_retained = 0;
  std::uint64_t replayed = 0;
  std::map<int, std::uint64_t> hops;  ///< consumer side: LatencyHistogram bucket -> count
  std::int64_t hop_max_ns = 0;
  std::map<int, std::uint64_t> held;  ///< consumer side: the producer's hold, as `hops`
  std::int64_t held_max_ns = 0;
};

/// One message's figures.
struct UnitFigures {
  int unit = 0;
  /// The unit process (a restarted one starts from zero); 0: the last one
  /// heard from `unit` (UnitDone carries none).
  std::uint64_t incarnation = 0;
  std::vector<ReplicaFigures> replicas;
  std::vector<EdgeSideFigures> edges;
};

/// Differences to add to the coordinator's counters (unsigned ones wrap: a
/// total that fell, as when a restored replica's carried count replaces its
/// predecessor's, is added as its two's complement). Gauges and peaks are
/// values to set, not add.
struct FigureChanges {
  std::vector<ReplicaFigures> replicas;
  std::vector<EdgeSideFigures> edges;
};

class LiveFigures {
 public:
  /// Takes a unit's cumulative figures. Only replicas and edge sides that
  /// `f.unit` hosts by the placement in force (`unit_of[node][replica]`)
  /// are taken: a unit fenced after a failover speaks of work that is no
  /// longer its own. `edge_ends[edge]` = (producer node, consumer node).
  /// `drained_on`: (node, replica, unit) of replicas that drained on a unit
  /// for a move and went on elsewhere: what that unit says of them counts.
  void take(const UnitFigures& f, const std::vector<std::vector<int>>& unit_of,
            const std::vector<std::pair<int, int>>& edge_ends,
            const std::vector<std::tuple<int, int, int>>& drained_on = {});
  /// Replica (node, replica) placed on `unit` starts from a snapshot: its
  /// `processed` and named counters include those of its earlier hosts.
  void carried_over(int node, int replica, int unit);

  /// The replica's figures summed over its hosts (`queued`: its latest
  /// host's; peaks: the largest).
  ReplicaFigures replica_total(int node, int replica) const;
  EdgeSideFigures edge_total(int edge, int replica, bool producer) const;
  /// What changed since the last call (first call: everything).
  FigureChanges changes();

 private:
  struct Host {
    int unit = 0;
    std::uint64_t incarnation = 0;
    bool carried = false;
  };
  template <class F>
  struct Hosted {
    std::vector<std::pair<Host, F>> hosts;  ///< in the order first heard
    std::size_t latest = 0;                 ///< the host heard last
  };
  using ReplicaKey = std::pair<int, int>;
  using EdgeKey = std::tuple<int, int, bool>;

  std::map<ReplicaKey, Hosted<ReplicaFigures>> replicas_;
  std::map<EdgeKey, Hosted<EdgeSideFigures>> edges_;
  std::map<ReplicaKey, ReplicaFigures> applied_replicas_;
  std::map<EdgeKey, EdgeSideFigures> applied_edges_;
  std::map<ReplicaKey, bool> dirty_replicas_;
  std::map<EdgeKey, bool> dirty_edges_;
  std::map<std::tuple<int, int, int>, bool> carried_;  ///< (node, replica, unit)
  std::map<int, std::uint64_t> incarnation_;           ///< by unit: the last heard
};

}  // namespace swarmflow::runtime
