// Placement that follows the load, in the units' process (placer.hpp).

#include "runtime/placer.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include <swarmflow/log.hpp>

#include "metrics/histogram.hpp"
#include "runtime/messages.hpp"
#include "runtime/run_state.hpp"

namespace swarmflow::runtime {

namespace {

using Buckets = std::vector<std::uint64_t>;

Buckets buckets_of(const metrics::LatencyHistogram& h) {
  Buckets b;
  h.for_each_bucket([&](int i, std::uint64_t count) {
    const auto at = static_cast<std::size_t>(i);
    if (b.size() <= at) b.resize(at + 1, 0);
    b[at] = count;
  });
  return b;
}

/// The p99 of what was added between two readings of one histogram, ms; -1: nothing.
double window_p99_ms(const Buckets& before, const Buckets& after) {
  metrics::LatencyHistogram window;
  int top = -1;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const std::uint64_t was = i < before.size() ? before[i] : 0;
    if (after[i] > was) {
      window.add_bucket(static_cast<int>(i), after[i] - was);
      top = static_cast<int>(i);
    }
  }
  if (window.count() == 0) return -1;
  // Buckets alone carry no maximum, which bounds every quantile: the upper
  // edge of the highest one is the window's.
  window.observe_max(metrics::LatencyHistogram::bucket_edge_ns(top));
  return static_cast<double>(window.quantile_ns(0.99)) / 1e6;
}

/// Whether `a` is one of `actors`. By identity: actors of different units
/// (actor systems) in one process may have the same id, which is what
/// caf::actor's comparison looks at.
bool is_one_of(const caf::actor& a, const std::vector<caf::actor>& actors) {
  auto* block = caf::actor_cast<caf::actor_control_block*>(a);
  for (const auto& x : actors) {
    if (caf::actor_cast<caf::actor_control_block*>(x) == block) return true;
  }
  return false;
}

/// Stages the runtime cannot move: those in a cycle (a drain would wait on
/// itself through the feedback edge).
std::vector<char> in_cycles(const graph::Graph& g) {
  std::vector<char> fixed(g.nodes.size(), 0);
  for (const auto& e : g.edges) {
    if (!e.feedback) continue;
    fixed[static_cast<std::size_t>(e.from_node)] = 1;
    fixed[static_cast<std::size_t>(e.to_node)] = 1;
  }
  return fixed;
}

}  // namespace

placement::LoadView load_view(const std::vector<std::vector<ReplicaSample>>& before,
                              const std::vector<std::vector<ReplicaSample>>& after, std::int64_t dt_ns,
                              const std::vector<std::vector<int>>& unit_of, const std::vector<double>& speed,
                              const std::vector<int>& threads, const std::vector<std::vector<double>>& queued,
                              const std::vector<std::vector<double>>& service_ns) {
  placement::LoadView view;
  const double dt = static_cast<double>(std::max<std::int64_t>(1, dt_ns));
  view.units.resize(speed.size());
  view.unit_of = unit_of;
  std::vector<double> busy(speed.size(), 0.0);
  for (std::size_t n = 0; n < after.size(); ++n) {
    for (std::size_t r = 0; r < after[n].size(); ++r) {
      const ReplicaSample& a = after[n][r];
      const ReplicaSample* b = n < before.size() && r < before[n].size() ? &before[n][r] : nullptr;
      const int u = n < unit_of.size() && r < unit_of[n].size() ? unit_of[n][r] : -1;
      const double unit_speed = u >= 0 && static_cast<std::size_t>(u) < speed.size() ? speed[static_cast<std::size_t>(u)] : 1.0;
      const std::int64_t busy_delta = std::max<std::int64_t>(0, a.busy_ns - (b != nullptr ? b->busy_ns : 0));
      if (u >= 0 && static_cast<std::size_t>(u) < busy.size()) busy[static_cast<std::size_t>(u)] += static_cast<double>(busy_delta);
      placement::ReplicaLoadView rv;
      rv.stage = static_cast<int>(n);
      rv.replica = static_cast<int>(r);
      rv.queue_depth = n < queued.size() && r < queued[n].size() ? queued[n][r] : 0;
      rv.service_ns = n < service_ns.size() && r < service_ns[n].size() ? service_ns[n][r] : 0;
      const std::uint64_t arrivals = a.arrivals - std::min(a.arrivals, b != nullptr ? b->arrivals : 0);
      rv.arrival_hz = static_cast<double>(arrivals) * 1e9 / dt;
      rv.busy = static_cast<double>(busy_delta) / dt;
      if (!a.key_overflow) {
        for (const auto& [key, ns] : a.key_busy_ns) {
          std::int64_t was = 0;
          if (b != nullptr) {
            const auto it = std::lower_bound(b->key_busy_ns.begin(), b->key_busy_ns.end(), std::make_pair(key, std::int64_t{0}),
                                             [](const auto& x, const auto& y) { return x.first < y.first; });
            if (it != b->key_busy_ns.end() && it->first == key) was = it->second;
          }
          const double load = static_cast<double>(std::max<std::int64_t>(0, ns - was)) / dt * unit_speed;
          if (load > 0) rv.keys.push_back(placement::KeyLoad{key, load});
        }
      }
      view.replicas.push_back(std::move(rv));
    }
  }
  for (std::size_t u = 0; u < speed.size(); ++u) {
    const int t = u < threads.size() ? std::max(1, threads[u]) : 1;
    view.units[u].utilisation = std::clamp(busy[u] / (dt * t), 0.0, 1.0);
    view.units[u].speed = speed[u];
  }
  return view;
}

Placer::Placer(std::shared_ptr<RunState> run, PlacerHooks hooks, placement::PolicySettings settings, bool adaptive)
    : run_(std::move(run)),
      hooks_(std::move(hooks)),
      policy_(run_->spec, settings),
      settings_(settings),
      adaptive_(adaptive) {
  for (std::size_t u = 0; u < run_->spec.units.size(); ++u) remote_units_ = remote_units_ || remote(static_cast<int>(u));
}

Placer::~Placer() { stop(); }

void Placer::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void Placer::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Placer::drained(int node, int replica, std::shared_ptr<const ReplicaSnapshot> handover) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    drained_.push_back(Drained{node, replica, std::move(handover)});
  }
  cv_.notify_all();
}

std::uint64_t Placer::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool Placer::request(placement::Move move, std::string* why) {
  const std::string refused = refusal(move);
  if (!refused.empty()) {
    if (why != nullptr) *why = refused;
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queued_.push_back(std::move(move));
  }
  cv_.notify_all();
  return true;
}

std::string Placer::refusal(const placement::Move& move) const {
  const graph::Graph& g = run_->graph;
  if (move.stage < 0 || static_cast<std::size_t>(move.stage) >= g.nodes.size()) return "no such stage";
  const graph::Node& node = g.nodes[static_cast<std::size_t>(move.stage)];
  const config::StageDecl& decl = *node.decl;
  if (node.in_edges.empty()) return "stage '" + decl.id + "' is a source: its data comes from where it runs";
  if (in_cycles(g)[static_cast<std::size_t>(move.stage)] != 0) {
    return "stage '" + decl.id + "' is in a cycle: its drain would wait on itself";
  }
  if (decl.join.enabled) return "stage '" + decl.id + "' joins its inputs: a drain would split its open sets";
  const auto table = run_->table();
  switch (move.kind) {
    case placement::MoveKind::move_replica: {
      if (move.replica < 0 || move.replica >= decl.replicas) return "stage '" + decl.id + "' has no such replica";
      if (move.replica >= table->active_of(move.stage)) {
        return "replica " + std::to_string(move.replica) + " of stage '" + decl.id + "' stands by (add it instead)";
      }
      if (run_->replica_stats[static_cast<std::size_t>(move.stage)][static_cast<std::size_t>(move.replica)]
              ->finished.load()) {
        return "replica " + std::to_string(move.replica) + " of stage '" + decl.id + "' has finished";
      }
      if (move.to_unit < 0 || static_cast<std::size_t>(move.to_unit) >= run_->spec.units.size()) return "no such unit";
      if (!runs(*table, move.stage, move.replica)) return "the replica's unit is gone or has finished";
      if (!usable(move.to_unit)) {
        return "unit '" + run_->spec.units[static_cast<std::size_t>(move.to_unit)].id + "' is gone or has finished";
      }
      if (table->unit(move.stage, move.replica) == move.to_unit) return "the replica is on that unit already";
      const std::string& unit = run_->spec.units[static_cast<std::size_t>(move.to_unit)].id;
      if (!decl.pin_units.empty() && std::find(decl.pin_units.begin(), decl.pin_units.end(), unit) == decl.pin_units.end()) {
        return "stage '" + decl.id + "' may not run on unit '" + unit + "' (its placement.units)";
      }
      if (node.out_edges.empty() &&
          !run_->replica_stats[static_cast<std::size_t>(move.stage)][static_cast<std::size_t>(move.replica)]
               ->stateful.load()) {
        return "stage '" + decl.id + "' is a sink that keeps no state it could hand over (what it writes stays where it is)";
      }
      return {};
    }
    case placement::MoveKind::reassign_keys: {
      if (!decl.keyed || decl.fanout_all) return "stage '" + decl.id + "' is not keyed";
      for (const auto& stats : run_->replica_stats[static_cast<std::size_t>(move.stage)]) {
        if (stats->stateful.load() && !stats->state_per_key.load()) {
          return "stage '" + decl.id + "' keeps state per replica, not per key: its keys stay";
        }
      }
      for (const auto& [key, replica] : move.keys) {
        if (replica < 0 || replica >= decl.replicas) return "stage '" + decl.id + "' has no such replica";
        if (replica >= table->active_of(move.stage)) {
          return "replica " + std::to_string(replica) + " of stage '" + decl.id + "' stands by";
        }
      }
      return {};
    }
    case placement::MoveKind::add_replica: {
      const int active = table->active_of(move.stage);
      if (active >= decl.max_replicas || active >= decl.replicas) {
        return "stage '" + decl.id + "' has its most replicas already (" + std::to_string(decl.max_replicas) + ")";
      }
      if (run_->replica_stats[static_cast<std::size_t>(move.stage)][static_cast<std::size_t>(active)]->finished.load()) {
        return "stage '" + decl.id + "' has finished";
      }
      if (!runs(*table, move.stage, active)) return "the replica's unit is gone or has finished";
      const int standing = table->unit(move.stage, active);
      const int to = move.to_unit < 0 ? standing : move.to_unit;
      if (static_cast<std::size_t>(to) >= run_->spec.units.size()) return "no such unit";
      if (!usable(to)) return "unit '" + run_->spec.units[static_cast<std::size_t>(to)].id + "' is gone or has finished";
      const std::string& unit = run_->spec.units[static_cast<std::size_t>(to)].id;
      if (!decl.pin_units.empty() && std::find(decl.pin_units.begin(), decl.pin_units.end(), unit) == decl.pin_units.end()) {
        return "stage '" + decl.id + "' may not run on unit '" + unit + "' (its placement.units)";
      }
      if (to != standing && node.out_edges.empty() &&
          !run_->replica_stats[static_cast<std::size_t>(move.stage)][static_cast<std::size_t>(active)]->stateful.load()) {
        return "stage '" + decl.id + "' is a sink that keeps no state: its replica " + std::to_string(active) +
               " is added only where it stands by (unit '" + run_->spec.units[static_cast<std::size_t>(standing)].id +
               "')";
      }
      return {};
    }
    case placement::MoveKind::remove_replica: {
      const int active = table->active_of(move.stage);
      if (active <= decl.min_replicas) {
        return "stage '" + decl.id + "' has its fewest replicas already (" + std::to_string(decl.min_replicas) + ")";
      }
      // Its last replica that takes work goes.
      const ReplicaStats& stats = *run_->replica_stats[static_cast<std::size_t>(move.stage)][static_cast<std::size_t>(active - 1)];
      if (stats.finished.load()) return "stage '" + decl.id + "' has finished";
      if (!runs(*table, move.stage, active - 1)) return "the replica's unit is gone or has finished";
      if (stats.stateful.load() && !stats.state_per_key.load()) {
        return "stage '" + decl.id + "' keeps state per replica, not per key: its replicas stay";
      }
      if (stats.state_per_key.load() && !stats.lists_keys.load()) {
        return "stage '" + decl.id + "' cannot list the keys it keeps state for (Stage::held_keys): its replicas stay";
      }
      return {};
    }
  }
  return "unknown move";
}

std::vector<Placer::Step> Placer::steps_of(const placement::Move& move) const {
  std::vector<Step> steps;
  if (move.kind != placement::MoveKind::reassign_keys) {
    Step s;
    s.move = move;
    s.node = move.stage;
    s.replica = move.replica;
    s.to_unit = move.to_unit;
    // Added: the first replica standing by; removed: the last that works.
    const int active = run_->table()->active_of(move.stage);
    if (move.kind == placement::MoveKind::add_replica) {
      s.serving = 1;
      s.replica = active;
    } else if (move.kind == placement::MoveKind::remove_replica) {
      s.serving = -1;
      s.replica = active - 1;
      s.to_unit = -1;
    }
    steps.push_back(std::move(s));
    return steps;
  }
  // Keys leave each replica that gives some away after it drains.
  const auto table = run_->table();
  const ConsistentHashRing ring(table->ring_of(move.stage));
  const auto map = table->key_map(move.stage);
  std::map<int, std::vector<std::pair<std::uint64_t, int>>> by_owner;
  for (const auto& [key, to] : move.keys) {
    int owner = ring.replica_for(key);
    if (map) {
      const auto it = map->find(key);
      if (it != map->end()) owner = it->second;
    }
    if (owner != to) by_owner[owner].emplace_back(key, to);
  }
  for (auto& [owner, keys] : by_owner) {
    Step s;
    s.move = move;
    s.node = move.stage;
    s.replica = owner;
    s.keys = std::move(keys);
    steps.push_back(std::move(s));
  }
  return steps;
}

std::vector<std::vector<ReplicaSample>> Placer::sample(std::int64_t now) const {
  const graph::Graph& g = run_->graph;
  std::vector<std::vector<ReplicaSample>> out(g.nodes.size());
  for (const auto& node : g.nodes) {
    const auto n = static_cast<std::size_t>(node.index);
    for (int r = 0; r < node.decl->replicas; ++r) {
      const ReplicaStats& s = *run_->replica_stats[n][static_cast<std::size_t>(r)];
      ReplicaSample x;
      x.busy_ns = s.busy_until(now);
      x.arrivals = taken_by(node.index, r);
      if (node.decl->keyed) {
        auto keys = s.keys();
        x.key_busy_ns = std::move(keys.busy_ns);
        std::sort(x.key_busy_ns.begin(), x.key_busy_ns.end());
        x.key_overflow = keys.overflow;
      }
      out[n].push_back(std::move(x));
    }
  }
  return out;
}

bool Placer::usable(int unit) const {
  if (unit < 0 || static_cast<std::size_t>(unit) >= run_->spec.units.size()) return false;
  if (!remote(unit)) return true;
  const RunState::RemoteUnit& u = *run_->remote_units[static_cast<std::size_t>(unit)];
  return !u.gone.load() && !u.done.load();
}

bool Placer::runs(const RoutingTable& table, int node, int replica) const {
  const int unit = table.unit(node, replica);
  if (unit == kLostUnit) return false;
  return remote(unit) ? usable(unit) : static_cast<bool>(table.actor(node, replica));
}

bool Placer::hosts_caught_up() const {
  const auto table = run_->table();
  for (std::size_t n = 0; n < table->actors.size(); ++n) {
    for (std::size_t r = 0; r < table->actors[n].size(); ++r) {
      if (table->actors[n][r] && run_->replica_stats[n][r]->epoch.load(std::memory_order_acquire) < table->epoch) {
        return false;
      }
    }
  }
  // Unit processes say so (Ready); one gone has no replicas left after its
  // failover.
  for (std::size_t u = 0; u < run_->spec.units.size(); ++u) {
    // One gone or done answers no more plans (its replicas have finished).
    if (!remote(static_cast<int>(u)) || !usable(static_cast<int>(u))) continue;
    if (table->replicas_on(static_cast<int>(u)) == 0) continue;
    if (run_->remote_units[u]->epoch.load() < table->epoch) return false;
  }
  return true;
}

std::uint64_t Placer::taken_by(int node, int replica) const {
  const auto n = static_cast<std::size_t>(node);
  const auto r = static_cast<std::size_t>(replica);
  const ReplicaStats& s = *run_->replica_stats[n][r];
  const int unit = run_->table()->unit(node, replica);
  // Where its count comes from: this process's edge figures, or the load
  // reports of the unit process that hosts it (each counts from where that
  // process's count was).
  int source = kLocalSource;
  std::uint64_t value = 0;
  if (remote(unit)) {
    source = s.remote_unit.load(std::memory_order_acquire);
    value = s.remote_arrivals.load(std::memory_order_relaxed);
  } else {
    for (int e : run_->graph.nodes[n].in_edges) {
      const EdgeSideStats& in = *run_->edge_in[static_cast<std::size_t>(e)][r];
      value += in.delivered.load(std::memory_order_relaxed) + in.refused.load(std::memory_order_relaxed);
    }
  }
  if (taken_.size() <= n) taken_.resize(run_->graph.nodes.size());
  if (taken_[n].size() <= r) taken_[n].resize(static_cast<std::size_t>(run_->graph.nodes[n].decl->replicas));
  Taken& t = taken_[n][r];
  if (source == kNoSource) return static_cast<std::uint64_t>(std::max<std::int64_t>(0, t.offset + t.last[t.source]));
  if (t.source != source) {
    // Its new host counts on from where that host's count stood when it
    // was seen last (0 if never): the total carries on.
    t.offset += t.last[t.source] - t.last[source];
    t.source = source;
  }
  t.last[source] = static_cast<std::int64_t>(value);
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, t.offset + static_cast<std::int64_t>(value)));
}

std::uint64_t Placer::in_flight_to(int node) const {
  std::uint64_t sent = 0;
  std::uint64_t taken = 0;
  for (int e : run_->graph.nodes[static_cast<std::size_t>(node)].in_edges) {
    for (const auto& p : run_->edge_out[static_cast<std::size_t>(e)]) {
      // `sent` counts what the producer offered, its drops included.
      const std::uint64_t offered = p->sent.load(std::memory_order_relaxed);
      sent += offered - std::min(offered, p->dropped.load(std::memory_order_relaxed));
    }
  }
  for (int r = 0; r < run_->graph.nodes[static_cast<std::size_t>(node)].decl->replicas; ++r) taken += taken_by(node, r);
  return sent > taken ? sent - taken : 0;
}

metrics::LatencyHistogram Placer::sink_latency() const {
  metrics::LatencyHistogram all;
  for (const auto& node : run_->graph.nodes) {
    if (!node.out_edges.empty()) continue;
    for (const auto& stats : run_->replica_stats[static_cast<std::size_t>(node.index)]) all.merge(stats->latency());
  }
  return all;
}

bool Placer::publish(std::shared_ptr<RoutingTable> table, const std::vector<caf::actor>& fresh) {
  // One placement an epoch: a failover's (the coordinator's) may have come
  // first, and this one was made from the placement before it.
  std::lock_guard<std::mutex> guard(run_->publish_mutex);
  if (run_->table()->epoch + 1 != table->epoch) {
    for (const auto& a : fresh) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    swarmflow::log::warn("placement: epoch %u was taken up first (a failover): this move's placement is dropped",
                         run_->table()->epoch);
    return false;
  }
  std::shared_ptr<const RoutingTable> published = std::move(table);
  for (const auto& actors : published->actors) {
    for (const auto& a : actors) {
      if (a && !is_one_of(a, fresh)) {
        caf::anon_send(a, placement_atom::value, published);
      }
    }
  }
  run_->publish(published);
  if (hooks_.set_epoch) hooks_.set_epoch(published->epoch);
  if (hooks_.send_plan) hooks_.send_plan(*published);
  for (const auto& a : fresh) caf::anon_send(a, start_atom::value);
  return true;
}

void Placer::begin(placement::Move move, std::int64_t now) {
  // Checked again, and split into steps, from the placement in force now:
  // an earlier move may have changed where the replica or its keys are.
  const std::string refused = refusal(move);
  std::vector<Step> steps = refused.empty() ? steps_of(move) : std::vector<Step>{};
  if (steps.empty()) {
    if (!refused.empty()) {
      swarmflow::log::info("placement: %s of stage '%s' not made: %s", placement::to_string(move.kind),
                           run_->graph.nodes[static_cast<std::size_t>(move.stage)].decl->id.c_str(), refused.c_str());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++completed_;
    return;
  }
  if (steps.size() > 1) {
    // The other replicas that give keys away drain after this one, their
    // keys worked out again then.
    placement::Move rest = move;
    rest.keys.clear();
    for (std::size_t i = 1; i < steps.size(); ++i) {
      rest.keys.insert(rest.keys.end(), steps[i].keys.begin(), steps[i].keys.end());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    queued_.push_front(std::move(rest));
  }
  Step step = std::move(steps.front());
  const auto current = run_->table();
  if (!runs(*current, step.node, step.replica)) {  // gone (a failover)
    std::lock_guard<std::mutex> lock(mutex_);
    ++completed_;
    return;
  }
  if (step.serving > 0 && (step.to_unit < 0 || step.to_unit == current->unit(step.node, step.replica))) {
    add_in_place(step, now);
    return;
  }
  auto table = std::make_shared<RoutingTable>(*current);
  table->epoch = current->epoch + 1;
  table->draining = {step.node, step.replica};
  table->draining_keys.clear();
  for (const auto& [key, to] : step.keys) table->draining_keys.push_back(key);
  table->draining_all_keys =
      step.serving < 0 &&
      run_->replica_stats[static_cast<std::size_t>(step.node)][static_cast<std::size_t>(step.replica)]->state_per_key.load();
  pending_ = std::make_unique<Pending>();
  pending_->from_unit = current->unit(step.node, step.replica);
  pending_->started_ns = now;
  pending_->sink_buckets_before = buckets_of(sink_latency());
  pending_->step = std::move(step);
  if (!publish(std::move(table), {})) {
    pending_.reset();
    std::lock_guard<std::mutex> lock(mutex_);
    ++completed_;
  }
}

void Placer::change_serving(const Step& step, RoutingTable& table) const {
  if (step.serving == 0) return;
  const std::size_t nodes = run_->graph.nodes.size();
  std::vector<int> active(nodes);
  std::vector<int> ring(nodes);
  for (std::size_t n = 0; n < nodes; ++n) {
    active[n] = table.active_of(static_cast<int>(n));
    ring[n] = table.ring_of(static_cast<int>(n));
  }
  const auto n = static_cast<std::size_t>(step.node);
  if (step.serving > 0) {
    active[n] = step.replica + 1;  // its keys come by the key map, each from a drained replica
  } else {
    active[n] = step.replica;
    ring[n] = std::min(ring[n], active[n]);  // only its own keys change hands: it drained
    if (auto old = table.key_map(step.node)) {
      auto map = std::make_shared<KeyMap>(*old);
      for (auto it = map->begin(); it != map->end();) it = it->second == step.replica ? map->erase(it) : std::next(it);
      table.keys.resize(nodes);
      table.keys[n] = std::move(map);
    }
  }
  table.active = std::move(active);
  table.ring = std::move(ring);
}

void Placer::add_in_place(const Step& step, std::int64_t now) {
  const auto current = run_->table();
  auto table = std::make_shared<RoutingTable>(*current);
  table->epoch = current->epoch + 1;
  change_serving(step, *table);
  const int unit = current->unit(step.node, step.replica);
  const std::uint32_t epoch = table->epoch;
  const auto before = buckets_of(sink_latency());
  if (publish(std::move(table), {})) record(step, unit, unit, epoch, now, now, before);
  std::lock_guard<std::mutex> lock(mutex_);
  ++completed_;
}

void Placer::complete(std::shared_ptr<const ReplicaSnapshot> handover, std::int64_t now) {
  const Step& step = pending_->step;
  const auto current = run_->table();
  auto table = std::make_shared<RoutingTable>(*current);
  table->epoch = current->epoch + 1;
  table->draining = {-1, -1};
  table->draining_keys.clear();
  table->draining_all_keys = false;
  const int from = pending_->from_unit;
  // A target that finished or went meanwhile takes nothing: it stays.
  const int to = step.to_unit >= 0 && usable(step.to_unit) ? step.to_unit : from;
  table->unit_of[static_cast<std::size_t>(step.node)][static_cast<std::size_t>(step.replica)] = to;
  auto& handovers = table->handovers;
  handovers.erase(std::remove_if(handovers.begin(), handovers.end(),
                                 [&](const RoutingTable::Handover& h) {
                                   return h.node == step.node && h.replica == step.replica;
                                 }),
                  handovers.end());
  handovers.push_back(RoutingTable::Handover{step.node, step.replica, from, table->epoch});
  if (!step.keys.empty()) {
    auto map = std::make_shared<KeyMap>();
    if (auto old = current->key_map(step.node)) *map = *old;
    for (const auto& [key, replica] : step.keys) (*map)[key] = replica;
    table->keys.resize(run_->graph.nodes.size());
    table->keys[static_cast<std::size_t>(step.node)] = std::move(map);
  }
  if (handover && handover->finished) {
    // It had finished before it drained: it stays where it is, and its
    // producers take it up again there (nothing more goes to it).
    table->unit_of[static_cast<std::size_t>(step.node)][static_cast<std::size_t>(step.replica)] = from;
    table->keys = current->keys;
    publish(std::move(table), {});
    swarmflow::log::info("placement: %s/%d had finished: not moved",
                         run_->graph.nodes[static_cast<std::size_t>(step.node)].decl->id.c_str(), step.replica);
    pending_.reset();
    std::lock_guard<std::mutex> lock(mutex_);
    ++completed_;
    return;
  }
  change_serving(step, *table);
  // What it did where it drained still counts there (that unit's figures,
  // from another process, keep it).
  if (to != from) run_->record_drained_on(step.node, step.replica, from);
  if (handover && !handover->keys.empty()) {
    // Keys with their state go to the replicas that take them before the
    // placement that routes their envelopes there is published: each one's
    // state is in its mailbox ahead of the key's next envelope. A removed
    // replica's keys go where the new placement puts them.
    const auto map = table->key_map(step.node);
    const ConsistentHashRing ring(table->ring_of(step.node));
    std::map<int, KeyStates> by_replica;
    for (const auto& [key, state] : handover->keys) {
      const auto it = std::find_if(step.keys.begin(), step.keys.end(), [&](const auto& k) { return k.first == key; });
      if (it != step.keys.end()) {
        by_replica[it->second].emplace_back(key, state);
      } else if (step.serving < 0) {
        int owner = ring.replica_for(key);
        if (map) {
          const auto placed = map->find(key);
          if (placed != map->end()) owner = placed->second;
        }
        by_replica[owner].emplace_back(key, state);
      }
    }
    for (auto& [replica, keys] : by_replica) {
      if (const caf::actor to_actor = current->actor(step.node, replica)) {
        caf::anon_send(to_actor, keys_atom::value, std::make_shared<const KeyStates>(std::move(keys)));
      } else if (const int unit = current->unit(step.node, replica); remote(unit) && hooks_.send_keys) {
        // Ahead of the plan, on the same socket: its unit hands them to the
        // replica before it takes that plan up.
        hooks_.send_keys(unit, table->epoch, step.node, replica, keys);
      }
    }
  }
  const caf::actor old = current->actor(step.node, step.replica);
  // The successor starts from the drained replica's state; a stage that
  // keeps none starts afresh (its counters are this process's already).
  std::shared_ptr<const ReplicaSnapshot> restore = handover && !handover->state.empty() ? handover : nullptr;
  caf::actor successor;
  if (remote(to)) {
    // Its unit process spawns it when it takes this plan up, from the state
    // sent ahead of the plan.
    if (restore && hooks_.send_restore) hooks_.send_restore(to, table->epoch, step.node, step.replica, *restore);
  } else {
    successor = hooks_.spawn(to, table, step.node, step.replica, std::move(restore));
  }
  table->actors.resize(run_->graph.nodes.size());
  auto& slot = table->actors[static_cast<std::size_t>(step.node)];
  slot.resize(run_->graph.nodes[static_cast<std::size_t>(step.node)].decl->replicas);
  slot[static_cast<std::size_t>(step.replica)] = successor;
  const std::uint32_t epoch = table->epoch;
  if (publish(std::move(table), successor ? std::vector<caf::actor>{successor} : std::vector<caf::actor>{})) {
    if (old) caf::anon_send_exit(old, caf::exit_reason::user_shutdown);
    record(step, from, to, epoch, pending_->started_ns, now, pending_->sink_buckets_before);
  }
  pending_.reset();
  std::lock_guard<std::mutex> lock(mutex_);
  ++completed_;
}

void Placer::record(const Step& step, int from, int to, std::uint32_t epoch, std::int64_t started_ns, std::int64_t now,
                    const std::vector<std::uint64_t>& sink_buckets_before) {
  MoveReport m;
  const std::int64_t start = run_->start_ns.load();
  m.at_s = static_cast<double>(started_ns - start) / 1e9;
  m.kind = step.serving > 0 ? "add" : step.serving < 0 ? "remove" : step.keys.empty() ? "move" : "keys";
  m.stage = run_->graph.nodes[static_cast<std::size_t>(step.node)].decl->id;
  m.replica = step.replica;
  m.from = run_->spec.units[static_cast<std::size_t>(from)].id;
  m.to = run_->spec.units[static_cast<std::size_t>(to)].id;
  m.why = step.move.why.empty() ? "asked for" : step.move.why;
  m.epoch = epoch;
  m.drain_ms = static_cast<double>(now - started_ns) / 1e6;
  m.keys = step.keys.size();
  // Sinks in unit processes are heard every figures period: the windows
  // then reach back, and on, that much further.
  const std::int64_t interval_ns = static_cast<std::int64_t>(std::max(1, run_->spec.placement.interval_ms)) * 1'000'000;
  if (!latency_before_.empty()) m.latency_p99_before_ms = window_p99_ms(latency_before_.front(), sink_buckets_before);
  latency_due_.push_back(LatencyDue{run_->move_count(), sink_buckets_before,
                                    now + interval_ns + static_cast<std::int64_t>(hooks_.figures_lag_ms) * 1'000'000});
  swarmflow::log::info("placement: %s %s/%d %s -> %s (%s), drained in %.1f ms", m.kind.c_str(), m.stage.c_str(),
                       m.replica, m.from.c_str(), m.to.c_str(), m.why.c_str(), m.drain_ms);
  run_->record_move(std::move(m));
}

void Placer::loop() {
  const std::int64_t interval = static_cast<std::int64_t>(std::max(1, run_->spec.placement.interval_ms)) * 1'000'000;
  const std::vector<char> cycles = in_cycles(run_->graph);
  std::int64_t last_ns = steady_now_ns();
  std::int64_t next_ns = last_ns + interval;
  auto last = sample(steady_now_ns());
  latency_before_.push_back(buckets_of(sink_latency()));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    cv_.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(next_ns)),
                   [&] { return stopping_ || !drained_.empty() || (!pending_ && !queued_.empty()); });
    if (stopping_) break;
    std::vector<Drained> drained = std::move(drained_);
    drained_.clear();
    lock.unlock();
    std::int64_t now = steady_now_ns();
    for (auto& d : drained) {
      if (pending_ && pending_->step.node == d.node && pending_->step.replica == d.replica) {
        complete(std::move(d.handover), now);
      }
    }
    if (pending_ && !run_->table()->is_draining(pending_->step.node, pending_->step.replica)) {
      // A failover's placement took the place of the move's.
      swarmflow::log::warn("placement: %s/%d: move given up (placement epoch %u took its place)",
                           run_->graph.nodes[static_cast<std::size_t>(pending_->step.node)].decl->id.c_str(),
                           pending_->step.replica, run_->table()->epoch);
      pending_.reset();
      std::lock_guard<std::mutex> guard(mutex_);
      ++completed_;
    }
    if (run_->finished() || run_->stop_requested.load()) {
      lock.lock();
      queued_.clear();
      next_ns = steady_now_ns() + interval;
      continue;
    }
    if (!pending_ && !hosts_caught_up()) {
      // A move begins once every host has taken up the placement before it.
      lock.lock();
      cv_.wait_for(lock, std::chrono::microseconds(remote_units_ ? 1000 : 200), [&] { return stopping_; });
      continue;
    }
    if (!pending_) {
      lock.lock();
      std::optional<placement::Move> next;
      if (!queued_.empty()) {
        next = std::move(queued_.front());
        queued_.pop_front();
      }
      lock.unlock();
      if (next) begin(std::move(*next), now);
    }
    now = steady_now_ns();
    if (now >= next_ns) {
      next_ns = now + interval;
      auto current = sample(now);
      const auto table = run_->table();
      const std::size_t units = run_->spec.units.size();
      std::vector<double> speed(units);
      std::vector<int> threads(units);
      for (std::size_t u = 0; u < units; ++u) {
        speed[u] = run_->unit_speed[u]->load(std::memory_order_relaxed);
        threads[u] = hooks_.threads ? hooks_.threads(static_cast<int>(u)) : 1;
      }
      std::vector<std::vector<double>> queued(run_->graph.nodes.size());
      std::vector<std::vector<double>> service(run_->graph.nodes.size());
      placement::LoadView view;
      for (const auto& node : run_->graph.nodes) {
        const auto n = static_cast<std::size_t>(node.index);
        // A replica takes its inputs one message at a time: what waits for
        // it is mostly what its producers sent that it has not taken yet
        // (in its mailbox, or on its way), shared among the replicas here.
        const double waiting = static_cast<double>(in_flight_to(node.index)) / std::max(1, table->active_of(node.index));
        for (const auto& s : run_->replica_stats[n]) {
          queued[n].push_back(static_cast<double>(s->queued.load(std::memory_order_relaxed)) + waiting);
          service[n].push_back(static_cast<double>(s->service_ns.load(std::memory_order_relaxed)));
        }
      }
      // The policy sees the replicas that take work; those standing by
      // (`replicas: {min, max}`) are what it may add.
      std::vector<std::vector<int>> serving = table->unit_of;
      for (std::size_t n = 0; n < serving.size(); ++n) serving[n].resize(static_cast<std::size_t>(table->active_of(static_cast<int>(n))));
      view = load_view(last, current, now - last_ns, serving, speed, threads, queued, service);
      view.replicas.erase(std::remove_if(view.replicas.begin(), view.replicas.end(),
                                         [&](const placement::ReplicaLoadView& r) {
                                           return static_cast<std::size_t>(r.replica) >= serving[static_cast<std::size_t>(r.stage)].size();
                                         }),
                          view.replicas.end());
      view.scaling = true;
      view.immovable = cycles;
      for (const auto& node : run_->graph.nodes) {
        if (node.decl->join.enabled) view.immovable[static_cast<std::size_t>(node.index)] = 1;
      }
      view.keys_fixed.assign(run_->graph.nodes.size(), 0);
      view.no_scale_in.assign(run_->graph.nodes.size(), 0);
      view.add_only_on.assign(run_->graph.nodes.size(), -1);
      for (const auto& node : run_->graph.nodes) {
        const auto n = static_cast<std::size_t>(node.index);
        bool stateful = false;
        bool per_replica = false;  // state that is not kept per key
        bool unlisted = false;     // state per key whose keys the stage cannot list
        bool overflow = false;
        for (std::size_t r = 0; r < run_->replica_stats[n].size(); ++r) {
          const ReplicaStats& s = *run_->replica_stats[n][r];
          stateful = stateful || s.stateful.load();
          per_replica = per_replica || (s.stateful.load() && !s.state_per_key.load());
          unlisted = unlisted || (s.state_per_key.load() && !s.lists_keys.load());
          overflow = overflow || current[n][r].key_overflow;
        }
        view.keys_fixed[n] = per_replica || overflow ? 1 : 0;
        view.no_scale_in[n] = per_replica || unlisted ? 1 : 0;
        if (node.out_edges.empty() && !stateful) {
          // What a sink without state writes stays where it is: it is
          // neither moved nor removed, and a replica is added only where it
          // stands by.
          view.immovable[n] = 1;
          view.no_scale_in[n] = 1;
          const int active = table->active_of(node.index);
          if (active < node.decl->replicas) view.add_only_on[n] = table->unit(node.index, active);
        }
      }
      last = std::move(current);
      last_ns = now;
      // Latency windows: the interval before a move, and around it.
      const auto buckets = buckets_of(sink_latency());
      for (auto it = latency_due_.begin(); it != latency_due_.end();) {
        if (now < it->due_ns) {
          ++it;
          continue;
        }
        run_->set_move_latency(it->index, window_p99_ms(it->since, buckets));
        it = latency_due_.erase(it);
      }
      latency_before_.push_back(buckets);
      // The oldest kept starts the interval before a move (and, with sinks
      // heard every figures period, that much before it).
      const std::size_t keep = 1 + static_cast<std::size_t>((hooks_.figures_lag_ms + run_->spec.placement.interval_ms - 1) /
                                                            std::max(1, run_->spec.placement.interval_ms));
      while (latency_before_.size() > keep) latency_before_.erase(latency_before_.begin());
      if (adaptive_ && !pending_) {
        bool idle = false;
        {
          std::lock_guard<std::mutex> guard(mutex_);
          idle = queued_.empty();
        }
        if (idle) {
          for (const auto& move : policy_.decide(view, now)) {
            std::string why;
            if (!request(move, &why)) {
              swarmflow::log::info("placement: %s of stage '%s' not made: %s", placement::to_string(move.kind),
                                   run_->graph.nodes[static_cast<std::size_t>(move.stage)].decl->id.c_str(), why.c_str());
            }
          }
        }
      }
    }
    lock.lock();
  }
}

}  // namespace swarmflow::runtime
