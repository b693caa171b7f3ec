#pragma once
// The run report, made from what a RunState holds: stages, edges, units
// (their own transports, or figures from their UnitDone) and failovers.

#include <swarmflow/runtime.hpp>

namespace swarmflow::runtime {

struct RunState;

/// The report of `run` as it stands (final once the run has finished).
RunReport build_report(const RunState& run);

}  // namespace swarmflow::runtime
