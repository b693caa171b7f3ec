#pragma once
// A unit's final figures as a control message (UnitDone), and their merge
// into the coordinator's view of the run.

#include <string>

#include <swarmflow/schema/control_generated.h>

#include "runtime/run_state.hpp"
#include "transport/control.hpp"

namespace swarmflow::runtime {

/// UnitDone for unit `unit`: the stats of its replicas and of their edge
/// sides, and its transport counters.
transport::ControlBuffer encode_unit_done(const RunState& run, int unit);

/// Adds a UnitDone's figures to `run` (whose own figures for that unit's
/// replicas are zero, as they ran elsewhere). Ignores out-of-range indices.
void merge_unit_done(RunState& run, int unit, const schema::UnitDone& done);

}  // namespace swarmflow::runtime
