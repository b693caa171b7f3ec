#include "placement/failover.hpp"

#include <algorithm>

namespace swarmflow::placement {

FailoverPlan place_after_failure(const config::PipelineSpec& spec, const std::vector<bool>& is_source,
                                 const std::vector<std::vector<int>>& unit_of, const std::vector<bool>& usable,
                                 const std::vector<std::vector<bool>>& restartable) {
  FailoverPlan plan;
  plan.unit_of = unit_of;
  const std::size_t units = spec.units.size();
  auto alive = [&](int u) { return u >= 0 && static_cast<std::size_t>(u) < units && usable[static_cast<std::size_t>(u)]; };
  std::vector<double> capacity(units, 1.0);
  std::vector<double> load(units, 0.0);
  for (std::size_t u = 0; u < units; ++u) {
    capacity[u] = std::max(1, spec.units[u].threads) * std::max(spec.units[u].speed, 1e-6);
  }
  for (const auto& replicas : unit_of) {
    for (int u : replicas) {
      if (alive(u)) load[static_cast<std::size_t>(u)] += 1.0;
    }
  }
  for (std::size_t s = 0; s < unit_of.size() && s < spec.stages.size(); ++s) {
    const config::StageDecl& stage = spec.stages[s];
    std::vector<int> candidates;
    for (std::size_t u = 0; u < units; ++u) {
      const bool allowed = stage.pin_units.empty() ||
                           std::find(stage.pin_units.begin(), stage.pin_units.end(), spec.units[u].id) !=
                               stage.pin_units.end();
      if (allowed && usable[u]) candidates.push_back(static_cast<int>(u));
    }
    for (std::size_t r = 0; r < unit_of[s].size(); ++r) {
      const int u = unit_of[s][r];
      if (u == kLost || alive(u)) continue;
      const std::pair<int, int> id{static_cast<int>(s), static_cast<int>(r)};
      const bool source = s < is_source.size() && is_source[s];
      const bool restarts = source && s < restartable.size() && r < restartable[s].size() && restartable[s][r];
      if (source && !restarts) {
        plan.unit_of[s][r] = kLost;
        plan.lost.push_back(id);
        continue;
      }
      int best = -1;
      double best_cost = 0;
      for (int c : candidates) {
        const double cost = (load[static_cast<std::size_t>(c)] + 1.0) / capacity[static_cast<std::size_t>(c)];
        if (best < 0 || cost < best_cost) {
          best = c;
          best_cost = cost;
        }
      }
      if (best < 0) {
        plan.unit_of[s][r] = kLost;
        plan.lost.push_back(id);
        if (plan.refused.empty() && !source) {
          plan.refused = "replica " + std::to_string(r) + " of stage '" + stage.id +
                         "' has no unit left that its placement allows";
        }
        continue;
      }
      load[static_cast<std::size_t>(best)] += 1.0;
      plan.unit_of[s][r] = best;
      plan.moved.push_back(id);
    }
  }
  return plan;
}

}  // namespace swarmflow::placement
