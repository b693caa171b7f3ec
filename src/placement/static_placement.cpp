#include "placement/static_placement.hpp"

#include <algorithm>

namespace swarmflow::placement {

std::vector<std::vector<int>> place_static(const config::PipelineSpec& spec) {
  const int units = std::max<int>(1, static_cast<int>(spec.units.size()));
  std::vector<double> capacity(static_cast<std::size_t>(units), 1.0);
  for (int u = 0; u < static_cast<int>(spec.units.size()); ++u) {
    const auto& decl = spec.units[static_cast<std::size_t>(u)];
    capacity[static_cast<std::size_t>(u)] = std::max(1, decl.threads) * std::max(decl.speed, 1e-6);
  }
  std::vector<double> load(static_cast<std::size_t>(units), 0.0);
  std::vector<std::vector<int>> plan;
  plan.reserve(spec.stages.size());
  for (const auto& stage : spec.stages) {
    std::vector<int> candidates;
    for (const auto& id : stage.pin_units) {
      for (int u = 0; u < static_cast<int>(spec.units.size()); ++u) {
        if (spec.units[static_cast<std::size_t>(u)].id == id) candidates.push_back(u);
      }
    }
    if (candidates.empty()) {
      for (int u = 0; u < units; ++u) candidates.push_back(u);
    }
    std::vector<int> hosted(static_cast<std::size_t>(units), 0);
    std::vector<int> replicas;
    for (int r = 0; r < stage.replicas; ++r) {
      int best = -1;
      double best_cost = 0;
      for (int u : candidates) {
        const auto i = static_cast<std::size_t>(u);
        double cost = (load[i] + 1.0) / capacity[i];
        // Spreading outranks balance: a unit that already has this stage comes last.
        if (stage.spread) cost += 1e9 * hosted[i];
        if (best < 0 || cost < best_cost) {
          best = u;
          best_cost = cost;
        }
      }
      load[static_cast<std::size_t>(best)] += 1.0;
      ++hosted[static_cast<std::size_t>(best)];
      replicas.push_back(best);
    }
    plan.push_back(std::move(replicas));
  }
  return plan;
}

}  // namespace swarmflow::placement
