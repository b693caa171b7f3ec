#include <swarmflow/registry.hpp>

#include <algorithm>

namespace swarmflow {

Status Registry::add(std::string name, std::string description, StageFactory make) {
  if (types_.count(name) != 0) {
    return Status::error("stage type '" + name + "' is already registered", StatusCode::invalid_argument);
  }
  StageType t{name, std::move(description), std::move(make)};
  types_.emplace(std::move(name), std::move(t));
  return {};
}

const StageType* Registry::find(std::string_view name) const {
  auto it = types_.find(name);
  return it == types_.end() ? nullptr : &it->second;
}

std::vector<const StageType*> Registry::all() const {
  std::vector<const StageType*> out;
  out.reserve(types_.size());
  for (const auto& [name, type] : types_) out.push_back(&type);
  return out;
}

std::string Registry::nearest(std::string_view name) const {
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const auto& [candidate, type] : types_) {
    std::size_t d = edit_distance(name, candidate);
    if (d < best_d) {
      best_d = d;
      best = candidate;
    }
  }
  // Only suggest names that are reasonably close.
  if (best_d > std::max<std::size_t>(3, name.size() / 2)) return {};
  return best;
}

Status Registry::describe(std::string_view name, StageSpec& spec) const {
  const StageType* t = find(name);
  if (t == nullptr) return Status::error("unknown stage type '" + std::string(name) + "'", StatusCode::not_found);
  auto stage = t->make();
  stage->setup(spec);
  return {};
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace swarmflow
