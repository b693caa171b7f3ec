#pragma once
// Placement that follows the load, in the process that hosts the units: it
// samples the replicas' figures every `placement.interval_ms` into the
// policy's view (placement/rebalance.hpp), and carries out the moves the
// policy returns, or those asked for (Runtime::move_replica), one at a time:
// drain the replica (its producers send it nothing new, it does everything
// it was sent and hands its state over), then publish the placement that
// puts its successor on the new unit or its keys on other replicas
// (docs/placement.md, "What a move guarantees").

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <caf/actor.hpp>

#include "placement/rebalance.hpp"
#include "runtime/replica_snapshot.hpp"
#include "runtime/routing_table.hpp"

namespace swarmflow::metrics {
class LatencyHistogram;
}

namespace swarmflow::runtime {

struct RunState;

/// What the placer needs of the runtime that hosts the units.
struct PlacerHooks {
  /// Spawns the host of replica (node, replica) on `unit` (not started),
  /// routing by `placed`, starting from `restore` (null: a fresh stage).
  std::function<caf::actor(int unit, std::shared_ptr<const RoutingTable> placed, int node, int replica,
                           std::shared_ptr<const ReplicaSnapshot> restore)>
      spawn;
  /// The units' transports take up placement `epoch`.
  std::function<void(std::uint32_t epoch)> set_epoch;
  /// Worker threads of a unit.
  std::function<int(int unit)> threads;
  // A run with unit processes (null: every unit is in this process):
  /// Whether `unit` is in another process.
  std::function<bool(int unit)> remote;
  /// How often unit processes send their figures (sinks' latency there), ms:
  /// a move's latency windows reach that much further.
  int figures_lag_ms = 0;
  /// Sends a placement to every unit process (after it is published here).
  std::function<void(const RoutingTable& table)> send_plan;
  /// Sends the state a replica placed on unit process `unit` starts from,
  /// ahead of the plan of `epoch` that places it there.
  std::function<void(int unit, std::uint32_t epoch, int node, int replica, const ReplicaSnapshot& state)> send_restore;
  /// Sends keys with their state to replica (node, replica) on unit process
  /// `unit`, ahead of the plan of `epoch` that routes them there.
  std::function<void(int unit, std::uint32_t epoch, int node, int replica, const KeyStates& keys)> send_keys;
};

/// One sample of a replica's cumulative figures.
struct ReplicaSample {
  std::int64_t busy_ns = 0;
  std::uint64_t arrivals = 0;
  std::vector<std::pair<std::uint64_t, std::int64_t>> key_busy_ns;  ///< sorted by key
  bool key_overflow = false;
};

/// The policy's view from two samples `dt_ns` apart (pure; tested alone).
/// `unit_of` and `speed` are the placement and units' speeds now,
/// `threads` each unit's worker threads; `queued` and `service_ns` each
/// replica's now.
placement::LoadView load_view(const std::vector<std::vector<ReplicaSample>>& before,
                              const std::vector<std::vector<ReplicaSample>>& after, std::int64_t dt_ns,
                              const std::vector<std::vector<int>>& unit_of, const std::vector<double>& speed,
                              const std::vector<int>& threads, const std::vector<std::vector<double>>& queued,
                              const std::vector<std::vector<double>>& service_ns);

class Placer {
 public:
  /// `adaptive`: the policy decides moves itself; otherwise only moves
  /// asked for are made.
  Placer(std::shared_ptr<RunState> run, PlacerHooks hooks, placement::PolicySettings settings, bool adaptive);
  ~Placer();
  Placer(const Placer&) = delete;
  Placer& operator=(const Placer&) = delete;

  void start();
  /// Stops deciding; a move under way is left as it is (the run is ending).
  void stop();
  /// Replica (node, replica) drained and handed `handover` over. Any thread.
  void drained(int node, int replica, std::shared_ptr<const ReplicaSnapshot> handover);
  /// Queues a move (move_replica or reassign_keys); refused (false, with
  /// the reason in `why`) when it cannot be made.
  bool request(placement::Move move, std::string* why);
  /// Moves done so far: made, or given up because their replica had
  /// finished meanwhile.
  std::uint64_t completed() const;

 private:
  /// One step of a move: drain `replica` of `node`, then place it on
  /// `to_unit` and/or give `keys` their new replicas.
  struct Step {
    placement::Move move;  ///< what it is part of (for the report)
    int node = 0;
    int replica = 0;
    int to_unit = -1;
    std::vector<std::pair<std::uint64_t, int>> keys;
    /// +1: the replica (standing by) takes work from then on; -1: it is
    /// removed (stands by from then on, its keys handed over).
    int serving = 0;
  };
  struct Pending {
    Step step;
    std::int64_t started_ns = 0;
    int from_unit = -1;
    std::vector<std::uint64_t> sink_buckets_before;  ///< sinks' latency at the start
  };

  void loop();
  /// Every replica's cumulative figures at `now` (steady ns).
  std::vector<std::vector<ReplicaSample>> sample(std::int64_t now) const;
  /// Splits a move into steps (a key reassignment drains each replica that gives keys away).
  std::vector<Step> steps_of(const placement::Move& move) const;
  /// Why the runtime cannot make this move (empty: it can).
  std::string refusal(const placement::Move& move) const;
  /// Begins `move`'s first step (what remains of it goes back to the
  /// front of the queue), or drops it with a log line when it cannot be
  /// made any more.
  void begin(placement::Move move, std::int64_t now);
  void complete(std::shared_ptr<const ReplicaSnapshot> handover, std::int64_t now);
  /// A replica added where it stands by: it takes work from the next
  /// placement on, with nothing to drain.
  void add_in_place(const Step& step, std::int64_t now);
  /// Applies an add's or a removal's change of the replicas that take work
  /// to `table`; returns each key's replica after it (for a removal's keys).
  void change_serving(const Step& step, RoutingTable& table) const;
  /// Logs and reports a move made (the run's moves).
  void record(const Step& step, int from, int to, std::uint32_t epoch, std::int64_t started_ns, std::int64_t now,
              const std::vector<std::uint64_t>& sink_buckets_before);
  /// Publishes `table` (epoch: the one in force + 1) here and to the unit
  /// processes, then starts `fresh`; false, and `fresh` stopped, when
  /// another placement took that epoch first (a failover).
  bool publish(std::shared_ptr<RoutingTable> table, const std::vector<caf::actor>& fresh);
  /// Every host here, and every unit process with replicas, has taken up
  /// the placement in force.
  bool hosts_caught_up() const;
  /// Whether `unit` is in another process.
  bool remote(int unit) const { return hooks_.remote && unit >= 0 && hooks_.remote(unit); }
  /// Whether a move may go to or come from `unit`: in this process, or a
  /// unit process neither gone nor done.
  bool usable(int unit) const;
  /// Whether replica (node, replica) runs (here, or on a usable unit process).
  bool runs(const RoutingTable& table, int node, int replica) const;
  /// Envelopes sent to `node` that none of its replicas has taken yet.
  std::uint64_t in_flight_to(int node) const;
  /// Envelopes replica (node, replica) has taken from its inputs so far,
  /// over all its hosts (placer thread).
  std::uint64_t taken_by(int node, int replica) const;
  /// The sinks' latency histogram, merged.
  metrics::LatencyHistogram sink_latency() const;

  std::shared_ptr<RunState> run_;
  PlacerHooks hooks_;
  placement::Rebalancer policy_;
  placement::PolicySettings settings_;
  bool adaptive_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  /// Moves asked for, in order; each is split into steps when it begins,
  /// from the placement then in force.
  std::deque<placement::Move> queued_;
  struct Drained {
    int node;
    int replica;
    std::shared_ptr<const ReplicaSnapshot> handover;
  };
  std::vector<Drained> drained_;
  std::uint64_t completed_ = 0;
  std::thread thread_;

  // The placer thread's own.
  std::unique_ptr<Pending> pending_;
  bool remote_units_ = false;  ///< some unit is in another process
  /// taken_by's count of a replica: the host it comes from (a unit process,
  /// or kLocalSource: this process's figures; kNoSource: its unit process
  /// has not reported yet), the last count seen from each, and what to add.
  static constexpr int kLocalSource = -1;
  static constexpr int kNoSource = -2;
  struct Taken {
    int source = kLocalSource;
    std::int64_t offset = 0;
    std::map<int, std::int64_t> last;
  };
  mutable std::vector<std::vector<Taken>> taken_;
  std::vector<std::vector<std::uint64_t>> latency_before_;  ///< sinks' buckets at the last intervals
  /// Moves whose latency around them is measured one interval after they completed.
  struct LatencyDue {
    std::size_t index;                ///< in the run's moves
    std::vector<std::uint64_t> since;  ///< sinks' buckets at its start
    std::int64_t due_ns;
  };
  std::vector<LatencyDue> latency_due_;
};

}  // namespace swarmflow::runtime
