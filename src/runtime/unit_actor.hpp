#pragma once
// The unit actor: one per unit hosted in this process. It measures its
// unit's load and reports it to the coordinator.

#include <memory>

#include <caf/fwd.hpp>

namespace swarmflow::runtime {

struct RunState;

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

}  // namespace swarmflow::runtime
