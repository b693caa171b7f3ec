#pragma once
// Static placement: which unit hosts each replica when a run starts. Pure.

#include <vector>

#include "config/pipeline_spec.hpp"

namespace swarmflow::placement {

/// The unit index of every replica: `result[stage][replica]`, stages in the
/// order of `spec.stages`.
///
/// Replicas go, stage by stage, to the unit with the lowest load after taking
/// one more, where a unit's capacity is threads x speed (threads 0 counts as
/// 1). A stage's `placement.units` restricts it to those units (a camera to the
/// host that has it); `placement.spread` prefers units that hold no replica of
/// the stage yet. Ties go to the lower unit index, so every process computes
/// the same plan from the same file.
std::vector<std::vector<int>> place_static(const config::PipelineSpec& spec);

}  // namespace swarmflow::placement
