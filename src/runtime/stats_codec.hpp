#pragma once
// A unit's figures as control messages: UnitFigures while the run lasts and
// UnitDone at the end, and their merge into the coordinator's view of the
// run through its LiveFigures store.

#include <cstdint>
#include <string>

#include <swarmflow/schema/control_generated.h>

#include "runtime/live_figures.hpp"
#include "runtime/run_state.hpp"
#include "transport/control.hpp"

namespace swarmflow::runtime {

/// UnitDone for unit `unit`: the stats of its replicas and of their edge
/// sides, and its transport counters.
transport::ControlBuffer encode_unit_done(const RunState& run, int unit);

/// UnitFigures for unit `unit` of unit process `incarnation`: the same
/// figures as UnitDone, so far.
transport::ControlBuffer encode_unit_figures(const RunState& run, int unit, std::uint64_t incarnation);

/// A UnitDone's or UnitFigures' replicas and edge sides as the store takes them.
UnitFigures decode_figures(int unit, std::uint64_t incarnation,
                           const flatbuffers::Vector<flatbuffers::Offset<schema::ReplicaStats>>* replicas,
                           const flatbuffers::Vector<flatbuffers::Offset<schema::EdgeSide>>* edges);

/// Takes a UnitDone's figures into `live` and `run` (whose own counters for
/// that unit's replicas count only work done in this process): they replace
/// what the unit said before. Ignores out-of-range indices.
void merge_unit_done(RunState& run, LiveFigures& live, int unit, const schema::UnitDone& done);
/// The same for UnitFigures.
void merge_unit_figures(RunState& run, LiveFigures& live, int unit, const schema::UnitFigures& figures);

}  // namespace swarmflow::runtime
