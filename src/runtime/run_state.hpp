#pragma once
// State shared by the runtime and the stage hosts of one run in one process:
// the graph, the actors of every replica, and live statistics (atomics, read
// by the progress line and the report without stopping anything).

#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <array>
#include <map>
#include <set>
#include <tuple>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include <swarmflow/registry.hpp>
#include <swarmflow/runtime.hpp>

#include "config/pipeline_spec.hpp"
#include "graph/graph.hpp"
#include "runtime/replica_snapshot.hpp"
#include "runtime/replica_stats.hpp"
#include "runtime/routing_table.hpp"
#include "transport/transport.hpp"

namespace swarmflow::runtime {

/// The latest load report of a unit: what placement decides on.
struct UnitLoad {
  std::uint64_t reports = 0;
  double utilisation = 0;  ///< busy fraction of the unit's worker threads, 0..1
  std::int64_t at_ns = 0;
};

/// A unit's transport counters as reported from another process.
struct RemoteTransportStats {
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  std::array<std::uint64_t, 8> rejected{};
  std::uint64_t unknown_peer = 0;
  std::uint64_t send_failed = 0;
  std::uint64_t refused_handshakes = 0;
};

/// Everything about a run that outlives any one actor.
struct RunState {
  config::PipelineSpec spec;
  graph::Graph graph;
  const Registry* registry = nullptr;

  /// By unit: its speed factor now (`scenario:` changes it during the run;
  /// stages read it at every step).
  std::vector<std::unique_ptr<std::atomic<double>>> unit_speed;
  /// By unit, in the coordinator's process, what it knows of unit
  /// processes for moves: the newest placement epoch each said it has taken
  /// up (Ready; a move begins once every unit process with replicas has
  /// taken up the placement before it), whether it has sent its figures
  /// for the end (done) or was declared dead or left (gone): no move goes
  /// to those.
  struct RemoteUnit {
    std::atomic<std::uint32_t> epoch{0};
    std::atomic<bool> done{false};
    std::atomic<bool> gone{false};
  };
  std::vector<std::unique_ptr<RemoteUnit>> remote_units;
  /// By unit: the coordinator's steady clock minus that of the unit's
  /// process (0 in the coordinator's own), and the round trip of the
  /// exchange it was measured with (-1: not known yet). Sized with the units
  /// before the run starts; set from heartbeats and ClockOffsets.
  std::vector<std::unique_ptr<std::atomic<std::int64_t>>> clock_offset_ns;
  std::vector<std::unique_ptr<std::atomic<std::int64_t>>> clock_delay_ns;
  void set_clock_offset(int unit, std::int64_t offset_ns, std::int64_t delay_ns);
  /// What to add to a time read on unit `from`'s clock to read it on unit
  /// `to`'s; 0 while either offset is unknown.
  std::int64_t clock_shift_ns(int from, int to) const;
  /// Data plane of each unit hosted in this process (null for the others).
  std::vector<std::unique_ptr<transport::Transport>> transports;
  /// By unit: non-zero when it is hosted in this process and the other units
  /// here hand it their messages straight to its replicas' actors, not
  /// through the transport (`transport: {in_process: direct}`). Set before
  /// any replica is spawned, read only after.
  std::vector<char> direct_units;
  /// The placement in force: every reader takes it once per step and keeps
  /// that copy; a new placement is published whole.
  std::shared_ptr<const RoutingTable> table() const { return std::atomic_load(&table_); }
  void publish(std::shared_ptr<const RoutingTable> table) {
    const std::uint32_t epoch = table->epoch;
    {
      std::lock_guard<std::mutex> lock(history_mutex_);
      history_.push_back(table);
      if (history_.size() > kHistory) history_.erase(history_.begin());
    }
    std::atomic_store(&table_, std::move(table));
    epoch_.store(epoch, std::memory_order_release);
  }
  /// The published table of `epoch`, if it is among the last ones kept
  /// (a host takes placements up one epoch at a time: a move spans two).
  std::shared_ptr<const RoutingTable> table_at(std::uint32_t epoch) const {
    std::lock_guard<std::mutex> lock(history_mutex_);
    for (const auto& t : history_) {
      if (t->epoch == epoch) return t;
    }
    return nullptr;
  }
  /// Held while a placement is made from the one in force and published
  /// (the placer's moves and the coordinator's failovers): one placement an
  /// epoch, sent to the unit processes in the order of their epochs.
  std::mutex publish_mutex;
  /// The epoch of the published table: a host checks it at every message,
  /// and takes a newer table up before anything else.
  std::uint32_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  /// A replica drained for a move (on its host's thread): placement goes on
  /// with it (set before the run starts; null: no moves in this process).
  std::function<void(int node, int replica, std::shared_ptr<const ReplicaSnapshot> handover)> on_drained;
  std::vector<std::vector<std::unique_ptr<ReplicaStats>>> replica_stats;
  /// `--trace`: the sampled steps of this process's replicas; null: none.
  std::shared_ptr<TraceBuffer> trace;
  bool hop_figures = true;  ///< RuntimeOptions::hop_figures
  /// producer side: edge_out[edge][producer replica]; consumer side: edge_in[edge][consumer replica]
  std::vector<std::vector<std::unique_ptr<EdgeSideStats>>> edge_out;
  std::vector<std::vector<std::unique_ptr<EdgeSideStats>>> edge_in;
  /// subscribers[node][output port]
  std::vector<std::vector<std::vector<Runtime::Subscriber>>> subscribers;

  std::atomic<bool> stop_requested{false};
  /// Stateful replicas here keep snapshots with the coordinator (this is a
  /// unit process: a failover may move them elsewhere).
  bool snapshots_with_coordinator = false;
  /// The coordinator is gone: snapshots count as stored at once (no
  /// failover can happen without it, and inputs must not wait).
  std::atomic<bool> snapshots_local{false};
  /// Envelopes and marks refused because their sender no longer hosts the
  /// producer they name (a unit fenced after a failover).
  std::atomic<std::uint64_t> stale_refused{0};

  /// Records a unit's load report (its own, or one received from it).
  void record_load(int unit, double utilisation);
  UnitLoad load(int unit) const;

  /// Failovers so far, for the report. `detected_ns` and `planned_ns`
  /// (steady clock): when the unit was declared dead and the plan sent.
  void record_failover(FailoverReport failover, std::int64_t detected_ns = 0, std::int64_t planned_ns = 0);
  /// A replica placed by the failover of `epoch` finished its first step:
  /// at `at_ns` on this process's clock, or (`after_plan`) that long after
  /// its unit took the plan up.
  void record_first_output(std::uint32_t epoch, std::int64_t ns, bool after_plan);
  std::vector<FailoverReport> failovers() const;
  /// Moves made during the run (placement that follows the load).
  void record_move(MoveReport move);
  std::vector<MoveReport> moves() const;
  std::size_t move_count() const;
  /// The latency p99 around move `index` (measured after it completed).
  void set_move_latency(std::size_t index, double p99_ms);

  /// Transport counters of units hosted elsewhere, from their UnitDone.
  void set_remote_transport(int unit, const RemoteTransportStats& stats);
  std::optional<RemoteTransportStats> remote_transport(int unit) const;

  // -- completion ---------------------------------------------------------
  void replica_finished(int count = 1);
  /// Replicas placed here after the start (failover): the run also waits for them.
  void adopt_replicas(int count);
  /// Replicas that drained here and moved to another process: the run no
  /// longer waits for them here.
  void release_replicas(int count);
  /// Replica (node, replica) drained on `unit` and moved on: what it did
  /// there still counts (its unit's figures keep it; the coordinator takes it).
  void record_drained_on(int node, int replica, int unit);
  bool drained_on(int node, int replica, int unit) const;
  std::vector<std::tuple<int, int, int>> drained_hosts() const;
  int replicas_total() const;
  /// This unit's replicas were fenced (placed elsewhere while it was paused):
  /// the run now waits for `total` replicas, none finished.
  void reset_replicas(int total);
  /// Ends the run now with an error (a unit died, the coordinator is gone):
  /// waiters wake although replicas have not finished.
  void abort(const std::string& message);
  bool aborted() const;
  void fail(const std::string& message);
  bool wait_finished(std::int64_t timeout_ms);  ///< true when all replicas finished
  int total_replicas = 0;
  std::atomic<std::int64_t> start_ns{0};  ///< set when the run starts; read by the failure watch
  std::atomic<std::int64_t> end_ns{0};

  bool ok() const;
  std::string error() const;
  bool finished() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int finished_ = 0;
  bool aborted_ = false;
  std::string error_;
  std::map<int, RemoteTransportStats> remote_transport_;
  std::set<std::tuple<int, int, int>> drained_on_;
  std::map<int, UnitLoad> loads_;
  std::vector<FailoverReport> failovers_;
  std::vector<MoveReport> moves_;
  struct FailoverTimes {
    std::int64_t detected_ns;
    std::int64_t planned_ns;
  };
  std::vector<FailoverTimes> failover_times_;  ///< parallel to failovers_
  std::shared_ptr<const RoutingTable> table_;
  std::atomic<std::uint32_t> epoch_{0};
  static constexpr std::size_t kHistory = 64;
  mutable std::mutex history_mutex_;
  std::vector<std::shared_ptr<const RoutingTable>> history_;
};

/// Spawns the host actor of one replica in `system`. It waits for `send_start`.
/// `table` places the replica (its actor may not be in it yet: the host
/// takes the run's published table when it starts).
/// `restore`: the snapshot a replica placed anew starts from, or null.
/// `replacement`: it was placed by a failover (its first step is reported).
caf::actor spawn_stage_host(caf::actor_system& system, std::shared_ptr<RunState> run,
                             std::shared_ptr<const RoutingTable> table, int node, int replica,
                             std::shared_ptr<const ReplicaSnapshot> restore = nullptr, bool replacement = false,
                             bool successor = false);
/// Tells a host that snapshot `id` of its replica is stored (or, with
/// UINT64_MAX, that snapshots now count as stored at once).
void send_snapshot_stored(const caf::actor& host, std::uint64_t id);
/// Starts a host: its stage is made and started, and a source begins producing.
void send_start(const caf::actor& host);
/// Tells a source host to end its stream now.
void send_stop(const caf::actor& host);

}  // namespace swarmflow::runtime
