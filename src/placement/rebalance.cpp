// The adaptive placement policy (see rebalance.hpp).

#include "placement/rebalance.hpp"

#include <algorithm>
#include <cmath>

namespace swarmflow::placement {

PolicySettings PolicySettings::from(const config::PlacementDecl& decl) {
  PolicySettings s;
  s.rebalance_above = decl.rebalance_above;
  s.hysteresis = std::min(decl.hysteresis, decl.rebalance_above / 2);
  s.sustain_ns = static_cast<std::int64_t>(decl.sustain_ms) * 1'000'000;
  s.cooldown_ns = static_cast<std::int64_t>(decl.cooldown_ms) * 1'000'000;
  return s;
}

const char* to_string(MoveKind kind) {
  switch (kind) {
    case MoveKind::move_replica: return "move";
    case MoveKind::add_replica: return "add";
    case MoveKind::remove_replica: return "remove";
    case MoveKind::reassign_keys: return "keys";
  }
  return "?";
}

std::vector<std::pair<std::uint64_t, int>> assign_keys_by_load(std::vector<KeyLoad> keys,
                                                                const std::vector<double>& capacity) {
  std::stable_sort(keys.begin(), keys.end(), [](const KeyLoad& a, const KeyLoad& b) {
    return a.load != b.load ? a.load > b.load : a.key < b.key;
  });
  std::vector<double> load(capacity.size(), 0.0);
  std::vector<std::pair<std::uint64_t, int>> owner;
  owner.reserve(keys.size());
  for (const KeyLoad& k : keys) {
    std::size_t best = 0;
    double best_after = 0;
    for (std::size_t r = 0; r < capacity.size(); ++r) {
      const double after = (load[r] + k.load) / std::max(capacity[r], 1e-9);
      if (r == 0 || after < best_after - 1e-12) {
        best = r;
        best_after = after;
      }
    }
    load[best] += k.load;
    owner.emplace_back(k.key, static_cast<int>(best));
  }
  std::sort(owner.begin(), owner.end());
  return owner;
}

double fewest_moves(const std::vector<KeyLoad>& keys, const std::vector<double>& capacity, std::vector<double> load,
                    std::vector<int>& owner) {
  const std::size_t n = capacity.size();
  auto busiest_of = [&](std::size_t skip_a, std::size_t skip_b) {
    double b = 0;
    for (std::size_t r = 0; r < n; ++r) {
      if (r != skip_a && r != skip_b) b = std::max(b, load[r] / std::max(capacity[r], 1e-9));
    }
    return b;
  };
  for (std::size_t step = 0; step < keys.size(); ++step) {
    std::size_t h = 0;
    for (std::size_t r = 1; r < n; ++r) {
      if (load[r] / std::max(capacity[r], 1e-9) > load[h] / std::max(capacity[h], 1e-9)) h = r;
    }
    const double now = load[h] / std::max(capacity[h], 1e-9);
    double best = now;
    std::size_t best_key = keys.size();
    std::size_t best_to = n;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (static_cast<std::size_t>(owner[i]) != h) continue;
      for (std::size_t r = 0; r < n; ++r) {
        if (r == h) continue;
        const double m = std::max({(load[h] - keys[i].load) / std::max(capacity[h], 1e-9),
                                   (load[r] + keys[i].load) / std::max(capacity[r], 1e-9), busiest_of(h, r)});
        if (m < best - 1e-12) {
          best = m;
          best_key = i;
          best_to = r;
        }
      }
    }
    if (best_key == keys.size()) break;
    load[h] -= keys[best_key].load;
    load[best_to] += keys[best_key].load;
    owner[best_key] = static_cast<int>(best_to);
  }
  double busiest = 0;
  for (std::size_t r = 0; r < n; ++r) busiest = std::max(busiest, load[r] / std::max(capacity[r], 1e-9));
  return busiest;
}

Rebalancer::Rebalancer(const config::PipelineSpec& spec, PolicySettings settings)
    : spec_(spec),
      settings_(settings),
      hot_(spec.units.size()),
      uneven_(spec.stages.size()),
      backlog_(spec.stages.size()),
      idle_(spec.stages.size()) {}

double Rebalancer::speed(int unit) const {
  const auto u = static_cast<std::size_t>(unit);
  if (u < speeds_.size() && speeds_[u] > 0) return speeds_[u];
  return spec_.units[u].speed;
}

double Rebalancer::capacity(int unit) const {
  const config::UnitDecl& u = spec_.units[static_cast<std::size_t>(unit)];
  return std::max(1, u.threads) * std::max(speed(unit), 1e-6);
}

bool Rebalancer::allowed(int stage, int unit) const {
  const config::StageDecl& s = spec_.stages[static_cast<std::size_t>(stage)];
  if (s.pin_units.empty()) return true;
  const std::string& id = spec_.units[static_cast<std::size_t>(unit)].id;
  return std::find(s.pin_units.begin(), s.pin_units.end(), id) != s.pin_units.end();
}

bool Rebalancer::movable(int stage) const {
  const config::StageDecl& s = spec_.stages[static_cast<std::size_t>(stage)];
  // Sources stay where their data comes from; a stage pinned to one unit stays there.
  const auto i = static_cast<std::size_t>(stage);
  if (i < immovable_.size() && immovable_[i] != 0) return false;
  return !s.inputs.empty() && s.pin_units.size() != 1;
}

double Rebalancer::work(const ReplicaLoadView& r, int unit) const {
  return std::max(r.busy, r.arrival_hz * r.service_ns / 1e9) * std::max(speed(unit), 1e-6);
}

std::vector<Move> Rebalancer::decide(const LoadView& view, std::int64_t now) {
  std::vector<Move> moves;
  if (last_move_ns_ != 0 && now - last_move_ns_ < settings_.cooldown_ns) return moves;
  speeds_.assign(view.units.size(), 0.0);
  for (std::size_t u = 0; u < view.units.size(); ++u) speeds_[u] = view.units[u].speed;
  immovable_ = view.immovable;
  keys_fixed_ = view.keys_fixed;
  // Each unit's load: what it measured (a saturated unit's true demand is
  // more, which the hot rule acts on).
  std::vector<double> load(spec_.units.size(), 0.0);
  for (std::size_t u = 0; u < load.size() && u < view.units.size(); ++u) {
    load[u] = std::clamp(view.units[u].utilisation, 0.0, 1.0);
  }
  Move m;
  if (hot_unit_move(view, load, now, &m) || key_move(view, now, &m) ||
      (view.scaling && (scale_out(view, load, now, &m) || scale_in(view, now, &m)))) {
    moves.push_back(std::move(m));
    last_move_ns_ = now;
    // Every condition has to show again, after the move.
    for (auto* v : {&hot_, &uneven_, &backlog_, &idle_}) {
      for (auto& s : *v) s.at = 0;
    }
  }
  return moves;
}

bool Rebalancer::hot_unit_move(const LoadView& view, std::vector<double>& load, std::int64_t now, Move* out) {
  // A unit counts as hot only while a move would relieve it: in a pipeline
  // that runs flat out every unit is busy, and that alone is no reason.
  bool found = false;
  for (std::size_t u = 0; u < load.size(); ++u) {
    const bool usable = u < view.units.size() && view.units[u].usable;
    Move candidate;
    const bool hot = usable && load[u] > settings_.rebalance_above &&
                     relieve(view, load, static_cast<int>(u), &candidate);
    if (hot_[u].held(hot, now, settings_.sustain_ns) && !found) {
      *out = std::move(candidate);
      found = true;
    }
  }
  return found;
}

bool Rebalancer::relieve(const LoadView& view, const std::vector<double>& load, int hottest, Move* out) const {
  const double cool = settings_.rebalance_above - settings_.hysteresis;
  const auto h = static_cast<std::size_t>(hottest);
  // Its replicas, heaviest first.
  std::vector<const ReplicaLoadView*> mine;
  for (const auto& r : view.replicas) {
    const auto s = static_cast<std::size_t>(r.stage);
    if (s < view.unit_of.size() && static_cast<std::size_t>(r.replica) < view.unit_of[s].size() &&
        view.unit_of[s][static_cast<std::size_t>(r.replica)] == hottest) {
      mine.push_back(&r);
    }
  }
  std::stable_sort(mine.begin(), mine.end(), [&](const ReplicaLoadView* a, const ReplicaLoadView* b) {
    return work(*a, hottest) > work(*b, hottest);
  });
  for (const ReplicaLoadView* r : mine) {
    if (!movable(r->stage)) continue;
    const double w = work(*r, hottest);
    int best = -1;
    double best_after = 0;
    for (std::size_t t = 0; t < load.size(); ++t) {
      if (t == h || t >= view.units.size() || !view.units[t].usable || !allowed(r->stage, static_cast<int>(t))) continue;
      const double after = load[t] + w / capacity(static_cast<int>(t));
      if (best < 0 || after < best_after) {
        best = static_cast<int>(t);
        best_after = after;
      }
    }
    if (best < 0 || best_after >= cool) continue;
    const double source_after = std::max(0.0, load[h] - w / capacity(hottest));
    // Worth it only if the hotter of the two ends cooler by the hysteresis:
    // a replica that keeps a whole unit busy gains nothing by moving.
    if (std::max(best_after, source_after) > load[h] - settings_.hysteresis) continue;
    out->kind = MoveKind::move_replica;
    out->stage = r->stage;
    out->replica = r->replica;
    out->from_unit = hottest;
    out->to_unit = best;
    out->why = "unit '" + spec_.units[h].id + "' busy " + std::to_string(static_cast<int>(std::lround(load[h] * 100))) +
               "% (over " + std::to_string(static_cast<int>(std::lround(settings_.rebalance_above * 100))) + "%)";
    return true;
  }
  return false;
}

bool Rebalancer::key_move(const LoadView& view, std::int64_t now, Move* out) {
  for (std::size_t s = 0; s < spec_.stages.size() && s < view.unit_of.size(); ++s) {
    const config::StageDecl& stage = spec_.stages[s];
    const std::size_t n = view.unit_of[s].size();
    if (!stage.keyed || stage.fanout_all || n < 2 || (s < keys_fixed_.size() && keys_fixed_[s] != 0)) {
      uneven_[s].at = 0;
      continue;
    }
    // Each replica's capacity: its unit's, shared among the replicas there.
    std::vector<double> cap(n, 1.0);
    for (std::size_t r = 0; r < n; ++r) {
      const int u = view.unit_of[s][r];
      if (u < 0) continue;
      int sharing = 0;
      for (const auto& replicas : view.unit_of) sharing += static_cast<int>(std::count(replicas.begin(), replicas.end(), u));
      cap[r] = capacity(u) / std::max(1, sharing);
    }
    std::vector<double> load(n, 0.0);
    std::vector<KeyLoad> keys;
    std::vector<int> owner_of;  // parallel to keys
    for (const auto& r : view.replicas) {
      if (static_cast<std::size_t>(r.stage) != s || static_cast<std::size_t>(r.replica) >= n) continue;
      for (const KeyLoad& k : r.keys) {
        load[static_cast<std::size_t>(r.replica)] += k.load;
        keys.push_back(k);
        owner_of.push_back(r.replica);
      }
    }
    double total = 0;
    double total_cap = 0;
    double busiest = 0;
    for (std::size_t r = 0; r < n; ++r) {
      total += load[r];
      total_cap += cap[r];
      busiest = std::max(busiest, load[r] / cap[r]);
    }
    const double mean = total_cap > 0 ? total / total_cap : 0;
    // Keys of a stage that is hardly busy stay: their moves would cost
    // drains and win nothing.
    const bool uneven = total > 0 && keys.size() > 1 && busiest > (1 + settings_.key_imbalance) * mean &&
                        busiest >= kKeysBusyFloor;
    std::vector<std::pair<std::uint64_t, int>> changed;
    if (uneven) {
      // Largest first from scratch, and the fewest keys moved (each replica
      // that gives keys away drains, so fewer is cheaper): the fewest unless
      // it ends more than 5% busier.
      const auto assignment = assign_keys_by_load(keys, cap);
      std::vector<int> lpt(keys.size());
      std::vector<double> after(n, 0.0);
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const auto it = std::lower_bound(assignment.begin(), assignment.end(), std::make_pair(keys[i].key, -1));
        lpt[i] = it != assignment.end() && it->first == keys[i].key ? it->second : owner_of[i];
        after[static_cast<std::size_t>(lpt[i])] += keys[i].load;
      }
      double lpt_busiest = 0;
      for (std::size_t r = 0; r < n; ++r) lpt_busiest = std::max(lpt_busiest, after[r] / cap[r]);
      std::vector<int> few = owner_of;
      const double few_busiest = fewest_moves(keys, cap, load, few);
      const std::vector<int>& chosen = few_busiest <= lpt_busiest * 1.05 ? few : lpt;
      const double busiest_after = few_busiest <= lpt_busiest * 1.05 ? few_busiest : lpt_busiest;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (chosen[i] != owner_of[i]) changed.emplace_back(keys[i].key, chosen[i]);
      }
      if (busiest_after > busiest * (1 - settings_.hysteresis)) changed.clear();
    }
    // Only while a reassignment would help.
    if (!uneven_[s].held(!changed.empty(), now, settings_.sustain_ns)) continue;
    std::sort(changed.begin(), changed.end());
    out->kind = MoveKind::reassign_keys;
    out->stage = static_cast<int>(s);
    out->keys = std::move(changed);
    out->why = "stage '" + stage.id + "': its busiest replica carries " +
               std::to_string(static_cast<int>(std::lround((busiest / std::max(mean, 1e-12) - 1) * 100))) +
               "% over its share";
    return true;
  }
  return false;
}

bool Rebalancer::scale_out(const LoadView& view, std::vector<double>& load, std::int64_t now, Move* out) {
  const double cool = settings_.rebalance_above - settings_.hysteresis;
  for (std::size_t s = 0; s < spec_.stages.size() && s < view.unit_of.size(); ++s) {
    const config::StageDecl& stage = spec_.stages[s];
    const std::size_t n = view.unit_of[s].size();
    double depth = 0;
    int seen = 0;
    for (const auto& r : view.replicas) {
      if (static_cast<std::size_t>(r.stage) != s) continue;
      depth += r.queue_depth;
      ++seen;
    }
    const double limit = settings_.backlog_fraction * std::max(1, stage.queue.capacity);
    const bool backlog = seen > 0 && depth / seen >= limit;
    // Where a new replica would have the most room (spare threads x speed).
    int best = -1;
    double best_room = 0;
    if (backlog && static_cast<int>(n) < stage.max_replicas && !stage.inputs.empty()) {
      const int only = s < view.add_only_on.size() ? view.add_only_on[s] : -1;
      for (std::size_t t = 0; t < load.size(); ++t) {
        if (t >= view.units.size() || !view.units[t].usable || !allowed(static_cast<int>(s), static_cast<int>(t))) continue;
        if ((only >= 0 && static_cast<int>(t) != only) || load[t] >= cool) continue;
        const double room = (1 - load[t]) * capacity(static_cast<int>(t));
        if (best < 0 || room > best_room) {
          best = static_cast<int>(t);
          best_room = room;
        }
      }
    }
    if (!backlog_[s].held(best >= 0, now, settings_.sustain_ns)) continue;
    out->kind = MoveKind::add_replica;
    out->stage = static_cast<int>(s);
    out->replica = static_cast<int>(n);
    out->to_unit = best;
    out->why = "stage '" + stage.id + "': its queues hold a backlog (mean " +
               std::to_string(static_cast<int>(std::lround(depth / seen))) + " of " +
               std::to_string(stage.queue.capacity) + ")";
    return true;
  }
  return false;
}

bool Rebalancer::scale_in(const LoadView& view, std::int64_t now, Move* out) {
  for (std::size_t s = 0; s < spec_.stages.size() && s < view.unit_of.size(); ++s) {
    const config::StageDecl& stage = spec_.stages[s];
    const std::size_t n = view.unit_of[s].size();
    bool idle = static_cast<int>(n) > stage.min_replicas && (s >= view.no_scale_in.size() || view.no_scale_in[s] == 0);
    // Nothing waits beyond what is on its way (a quarter of the backlog's mark).
    const double quiet = 0.25 * settings_.backlog_fraction * std::max(1, stage.queue.capacity);
    int seen = 0;
    for (const auto& r : view.replicas) {
      if (static_cast<std::size_t>(r.stage) != s) continue;
      ++seen;
      const double busy = r.arrival_hz * r.service_ns / 1e9;
      idle = idle && busy < settings_.scale_in_below && r.queue_depth <= quiet;
    }
    if (!idle_[s].held(idle && seen > 0, now, settings_.sustain_ns)) continue;
    out->kind = MoveKind::remove_replica;
    out->stage = static_cast<int>(s);
    out->replica = static_cast<int>(n) - 1;
    out->from_unit = view.unit_of[s][n - 1];
    out->why = "stage '" + stage.id + "': every replica is less than " +
               std::to_string(static_cast<int>(std::lround(settings_.scale_in_below * 100))) + "% busy";
    return true;
  }
  return false;
}

}  // namespace swarmflow::placement
