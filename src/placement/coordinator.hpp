#pragma once
// The coordinator: an actor of its own that keeps the cluster view of the
// unit processes (joined, ready, done, dead, rejoining, leaving, left), their
// failure detectors and the snapshots of their stateful replicas. All of it is
// soft state, rebuilt from what the units send. What it decides and what acts
// on this process (placing replicas, sending to units, ending the run,
// recording failovers) goes through CoordinatorEffects, which the Runtime
// implements.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/fwd.hpp>

#include <swarmflow/runtime.hpp>

#include "runtime/replica_snapshot.hpp"
#include "runtime/routing_table.hpp"
#include "transport/control.hpp"

namespace swarmflow::config {
struct PipelineSpec;
}
namespace swarmflow::graph {
struct Graph;
}

namespace swarmflow::placement {

/// The latest snapshot of each stateful replica on a unit process, by
/// (node, replica): what a failover restores.
using Snapshots = std::map<std::pair<int, int>, std::shared_ptr<const runtime::ReplicaSnapshot>>;

/// What the coordinator does to this process and to the units. Called on the
/// coordinator actor's thread, one call at a time.
struct CoordinatorEffects {
  virtual ~CoordinatorEffects() = default;
  /// The placement in force.
  virtual std::shared_ptr<const runtime::RoutingTable> table() const = 0;
  /// When the run started (steady clock), 0 before.
  virtual std::int64_t run_started_ns() const = 0;
  virtual bool run_finished() const = 0;
  /// Sends a control message to unit process `unit`.
  virtual void send(int unit, transport::ControlBuffer message) = 0;
  /// Takes up a placement of a newer epoch in this process (a failover):
  /// stateful replicas placed here start from `snapshots`.
  virtual void apply_placement(std::vector<std::vector<int>> unit_of, std::uint32_t epoch,
                               const Snapshots& snapshots) = 0;
  /// Publishes the placement the units run by (this coordinator takes a
  /// running pipeline over).
  virtual void take_over(std::vector<std::vector<int>> unit_of, std::uint32_t epoch) = 0;
  /// The same with the whole placement (replicas taking work, key maps).
  virtual void take_over_placement(const runtime::RoutingTable& placed) { take_over(placed.unit_of, placed.epoch); }
  virtual void record_load(int unit, double utilisation) = 0;
  /// A unit process's load report (every placement interval): its
  /// utilisation, and its replicas' figures for the placement policy.
  virtual void record_load_report(int unit, const schema::LoadReport& report) {
    record_load(unit, static_cast<double>(report.utilisation()) < 0 ? 0.0
                      : static_cast<double>(report.utilisation()) > 1 ? 1.0
                                                                       : static_cast<double>(report.utilisation()));
  }
  /// Unit process `unit` has taken up placement `epoch` (Ready).
  virtual void unit_ready(int /*unit*/, std::uint32_t /*epoch*/) {}
  /// Unit process `unit` was declared dead, or left: nothing moves to it.
  virtual void unit_lost(int /*unit*/) {}
  /// Unit process `unit`, declared dead before, runs again (without replicas).
  virtual void unit_back(int /*unit*/) {}
  /// Replica (node, replica) on a unit process drained for a move and
  /// handed `handover` over (its state, counters and keys given away).
  virtual void drained(int /*node*/, int /*replica*/, std::shared_ptr<const runtime::ReplicaSnapshot> /*handover*/) {}
  /// Adds a unit's final figures to the run's.
  virtual void merge_unit_done(int unit, const schema::UnitDone& done) = 0;
  /// Takes a unit's figures so far (they replace what it said before).
  virtual void merge_unit_figures(int /*unit*/, const schema::UnitFigures& /*figures*/) {}
  /// Replica (node, replica) placed on unit process `unit` starts from a
  /// snapshot: its counters carry those of its earlier hosts.
  virtual void carried_over(int /*node*/, int /*replica*/, int /*unit*/) {}
  /// Unit process `unit` measured its clock: the coordinator's minus its
  /// own is `offset_ns`, within +- `delay_ns` / 2.
  virtual void record_clock(int /*unit*/, std::int64_t /*offset_ns*/, std::int64_t /*delay_ns*/) {}
  /// `count` replicas have finished (their unit's UnitDone), or were lost.
  virtual void replicas_finished(int count) = 0;
  virtual void record_failover(FailoverReport failover, std::int64_t detected_ns, std::int64_t planned_ns) = 0;
  /// A replica placed by the failover of `epoch` made its first output
  /// `after_ns` after its unit took the plan up.
  virtual void record_first_output(std::uint32_t epoch, std::int64_t after_ns) = 0;
  /// Ends the run with an error.
  virtual void abort(const std::string& message) = 0;
};

/// Counters the coordinator keeps, read by the report while it runs.
struct CoordinatorFigures {
  /// From units declared dead, other than a new heartbeat, and snapshots
  /// from a unit that does not host their replica.
  std::atomic<std::uint64_t> stale_messages{0};
  /// From unit ids that are not unit processes of this run.
  std::atomic<std::uint64_t> unknown_units{0};
};

/// What the coordinator is made with. `spec` and `graph` are the run's
/// (fixed while it lasts) and, with `effects`, outlive the actor.
struct CoordinatorSetup {
  const config::PipelineSpec* spec = nullptr;
  const graph::Graph* graph = nullptr;
  std::vector<bool> remote;  ///< by unit: a unit process (not hosted here)
  CoordinatorEffects* effects = nullptr;
  std::shared_ptr<CoordinatorFigures> figures = std::make_shared<CoordinatorFigures>();
  /// The clock the detectors run on (steady, ns).
  std::function<std::int64_t()> clock;
  /// Limits the control messages were verified with.
  transport::WireLimits limits;
  /// Checks the detectors this often, by a message to itself.
  std::int64_t check_period_us = 0;
  /// false: only when told (`check_now`), as tests do.
  bool checks_itself = true;
};

/// Conditions the Runtime waits for.
enum class Await : std::uint8_t {
  joined,       ///< every unit process has sent a heartbeat (or one is lost)
  unit_states,  ///< every unit process has said by which placement it runs
  ready,        ///< every unit process is Ready for the epoch in force (or one is lost)
  done,         ///< every unit process has sent UnitDone or is dead
};

/// Where a wait stands: `lost` (why the first unit declared dead was; empty
/// while none is) and the units it still waits for.
struct AwaitStatus {
  bool met = false;
  std::string lost;
  std::string missing;
};

/// The check period of the failure watch: max(1 ms, heartbeat_ms / 5).
std::int64_t check_period_us(int heartbeat_ms);

/// Spawns the coordinator on its own thread in `system` (a busy unit cannot
/// delay its failure checks), checking its detectors from now on.
caf::actor spawn_coordinator(caf::actor_system& system, CoordinatorSetup setup);

/// Hands a control message from unit `unit_id`, verified by the control
/// server, to the coordinator (a copy of its bytes). Any thread.
void forward_control(const caf::actor& coordinator, const std::string& unit_id, const std::uint8_t* data,
                     std::size_t size);

/// Waits at most `timeout_ms` for `what`; the status then (met or not).
AwaitStatus await(caf::actor_system& system, const caf::actor& coordinator, Await what, std::int64_t timeout_ms);

/// Where `what` stands now.
AwaitStatus status(caf::actor_system& system, const caf::actor& coordinator, Await what);

/// Whether the units are in a run already (their heartbeats carry a
/// placement epoch): this coordinator was started again and takes it over.
bool units_in_a_run(caf::actor_system& system, const caf::actor& coordinator);

/// Takes the run over with the newest placement the units reported
/// (UnitState): an error when some unit did not say, or when the placement
/// has replicas on units of this process (they died with the coordinator
/// before).
Status take_over(caf::actor_system& system, const caf::actor& coordinator);

/// Runs a failure check now (tests; the actor also checks by itself).
/// `scheduled`: as one due every `check_period_us` (a late one is skipped).
void check_now(caf::actor_system& system, const caf::actor& coordinator, bool scheduled = false);

/// Stops the coordinator and returns once it has stopped: no effect happens
/// after this.
void stop_coordinator(caf::actor_system& system, const caf::actor& coordinator);

}  // namespace swarmflow::placement
