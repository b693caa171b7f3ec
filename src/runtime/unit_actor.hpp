#pragma once
// The unit actor: one per unit hosted in this process. It measures its
// unit's load and reports it to the coordinator.

#include <cstdint>
#include <memory>
#include <vector>

#include <caf/fwd.hpp>

#include "transport/control.hpp"

namespace swarmflow::schema {
struct LoadReport;
}

namespace swarmflow::runtime {

struct RunState;

/// ReplicaLoad.flags.
constexpr std::uint8_t kLoadStateful = 1;
constexpr std::uint8_t kLoadStatePerKey = 2;
constexpr std::uint8_t kLoadListsKeys = 4;
constexpr std::uint8_t kLoadFinished = 8;
constexpr std::uint8_t kLoadKeyOverflow = 16;

/// Spawns the unit actor of unit `unit` in `system`. Every
/// `placement.interval_ms`, it sends the utilisation of the unit's `threads`
/// worker threads and per replica queue depth, service time, arrival rate and
/// progress as a LoadReport to the coordinator (`remote_coordinator`: this is
/// a unit process) or records it straight into the run's view (a unit in the
/// coordinator's process). A unit process also sends its figures so far
/// (UnitFigures) every `figures_ms` (0: never; UnitDone carries them at the
/// end). It quits when the run has ended.
caf::actor spawn_unit_actor(caf::actor_system& system, std::shared_ptr<RunState> run, int unit, int threads,
                            bool remote_coordinator, int figures_ms = 0);

/// This unit process, as the coordinator tells it from one started again
/// with the same unit id: its pid and start time.
std::uint64_t process_incarnation();

/// Makes a unit's LoadReport: the utilisation of its worker threads since
/// the last one, and per replica queue depth, service time, arrival rate,
/// progress, busy time, inputs taken, flags and a keyed stage's time per key.
class LoadReporter {
 public:
  LoadReporter(int unit, int threads);
  transport::ControlBuffer report(RunState& run, double* utilisation);

 private:
  int unit_;
  int threads_;
  std::int64_t last_ns_;
  std::int64_t last_busy_ = 0;
  std::vector<std::uint64_t> last_arrivals_;
};

/// In the coordinator's process: takes a unit process's LoadReport into the
/// figures of its replicas there (busy time, queue, service time, inputs
/// taken, flags, a keyed stage's time per key), for the placement policy.
/// Only replicas that `unit` hosts by the placement in force are taken.
void take_remote_load(RunState& run, int unit, const schema::LoadReport& report);

}  // namespace swarmflow::runtime
