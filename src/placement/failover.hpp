#pragma once
// Where the replicas of dead units go. Pure: the coordinator's failure
// handling feeds it the placement in force and which units may take work.

#include <string>
#include <utility>
#include <vector>

#include "config/pipeline_spec.hpp"

namespace swarmflow::placement {

/// A replica placed nowhere: lost with its unit.
constexpr int kLost = -1;

/// The placement after some units died.
struct FailoverPlan {
  std::vector<std::vector<int>> unit_of;   ///< [stage][replica]: unit, or kLost
  std::vector<std::pair<int, int>> moved;  ///< (stage, replica) placed on a survivor
  std::vector<std::pair<int, int>> lost;   ///< (stage, replica) lost with their unit
  /// Why the pipeline cannot go on (a replica that is not a source has no
  /// unit its placement allows); empty when it can.
  std::string refused;
};

/// Places every replica of a unit that is not `usable` (dead) on the usable
/// unit its `placement.units` allows with the lowest load after taking it,
/// where load is replicas hosted over threads x speed, stage by stage in
/// file order, ties to the lower unit index (as place_static).
/// `is_source[stage]` says which stages are sources. A source's replica is
/// moved the same way only if `restartable[stage][replica]` (a snapshot of
/// its position is kept off its unit, so it goes on from there); otherwise,
/// or when its placement allows no unit left, it is lost (what it had not
/// sent died with it), which does not refuse the failover. A replica
/// already lost stays lost.
FailoverPlan place_after_failure(const config::PipelineSpec& spec, const std::vector<bool>& is_source,
                                 const std::vector<std::vector<int>>& unit_of, const std::vector<bool>& usable,
                                 const std::vector<std::vector<bool>>& restartable = {});

}  // namespace swarmflow::placement
