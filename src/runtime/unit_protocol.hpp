#pragma once
// The unit process's side of the control protocol: what it hears from the
// coordinator (plans, Go, StopSources, Shutdown, SnapshotStored, Restore,
// heartbeats that tell a new coordinator, keys with state for a replica), and the plan and simple messages
// both sides exchange.

#include <condition_variable>
#include <deque>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/pipeline_spec.hpp"
#include "metrics/clock_offset.hpp"
#include "placement/failure_detector.hpp"
#include "runtime/replica_snapshot.hpp"
#include "runtime/routing_table.hpp"
#include "transport/control.hpp"

namespace swarmflow::graph {
struct Graph;
}

namespace swarmflow::runtime {

struct RunState;

/// What a unit process hears from the coordinator.
struct UnitSide {
  std::mutex mutex;
  std::condition_variable cv;
  bool has_plan = false;
  std::uint32_t epoch = 0;
  /// The placement of `epoch` (no actors).
  RoutingTable plan;
  /// Plans that came during the run, not yet taken up, oldest first.
  std::deque<RoutingTable> plans;
  /// Units hosted here, each with its own socket to the coordinator. A plan
  /// comes on each; what was sent ahead of it to one unit (its Restore, its
  /// KeyStates) is in only once the plan came on that unit's socket too, so
  /// a plan is taken once it came on every one (`plan_from`: by epoch, the
  /// units it came from).
  int local_units = 0;
  std::map<std::uint32_t, std::set<int>> plan_from;
  /// Called when such a plan comes (with `mutex` held): wakes whoever takes
  /// plans up.
  std::function<void()> on_plan;
  bool go = false;
  bool replan = false;  ///< a newer plan arrived during the run
  bool shutdown = false;
  /// Every message from the coordinator is a heartbeat for this detector.
  std::unique_ptr<placement::FailureDetector> coordinator;
  bool coordinator_lost = false;  ///< declared dead, and nothing heard since
  std::int64_t coordinator_pid = 0;  ///< of the coordinator heard last
  bool new_coordinator = false;      ///< one not heard before: tell it the run's state
  bool leaving = false;           ///< Runtime::leave: this unit hands its replicas over and leaves
  std::uint32_t leave_epoch = 0;  ///< the epoch when it asked; the handover is a newer one
  /// Snapshots to start replicas placed here from, by (node, replica), as
  /// the coordinator sent them before a plan.
  std::map<std::pair<int, int>, std::shared_ptr<const ReplicaSnapshot>> restores;
  /// This process's clock against the coordinator's, from the times its
  /// heartbeats echo.
  metrics::ClockOffsetEstimator clock;
};

/// Takes a verified message from the coordinator into `side` (a unit
/// process's transport thread calls it), as unit `unit` of this process
/// received it. `heartbeat`: it counts for the coordinator's detector (one
/// unit of the process is enough).
void on_coordinator_message(RunState& run, UnitSide& side, const schema::Control& c, bool heartbeat, int unit = 0);

/// The index of unit `id` in the pipeline, or -1.
int unit_index(const config::PipelineSpec& spec, const std::string& id);

/// Asks the sources of this process to end their streams now.
void stop_local_sources(RunState& run);

/// A replica lost with its unit, as a PlacementPlan says it.
constexpr std::uint32_t kLostInPlan = 0xffffffffu;

/// `table`'s placement as a PlacementPlan.
flatbuffers::Offset<schema::PlacementPlan> build_plan(flatbuffers::FlatBufferBuilder& fbb, const RoutingTable& table);

/// The placement in force as a control message.
transport::ControlBuffer plan_message(const RunState& run);
transport::ControlBuffer plan_message(const RoutingTable& table);

/// The unit of every replica in a verified plan; false when it is not this
/// pipeline's (another file's, or units out of range).
bool decode_plan(const RunState& run, const schema::PlacementPlan& p, std::vector<std::vector<int>>* out);
/// The same for `graph` placed on `units` units.
bool decode_plan(const graph::Graph& graph, std::size_t units, const schema::PlacementPlan& p,
                 std::vector<std::vector<int>>* out);
/// The whole placement in a verified plan (without actors): units, the
/// replica draining for a move, hand-overs, replicas taking work, key maps.
/// false when it is not this pipeline's or out of range.
bool decode_placement(const graph::Graph& graph, std::size_t units, const schema::PlacementPlan& p, RoutingTable* out);

/// Go, Shutdown or StopSources for placement `epoch`.
transport::ControlBuffer simple_message(schema::ControlBody type, std::uint32_t epoch);

/// Ready: unit `unit_id` has taken up placement `epoch`.
transport::ControlBuffer ready_message(const std::string& unit_id, std::uint32_t epoch);
/// Leaving: unit `unit_id` asks to hand its replicas over.
transport::ControlBuffer leaving_message(const std::string& unit_id, std::uint32_t epoch);
/// UnitState: the placement unit `unit_id` runs by, for a new coordinator.
transport::ControlBuffer unit_state_message(const std::string& unit_id, const RoutingTable& table, bool running);

}  // namespace swarmflow::runtime
