#include "runtime/unit_actor.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include <caf/all.hpp>

#include <swarmflow/schema/control_generated.h>

#include <unistd.h>

#include "runtime/run_state.hpp"
#include "runtime/stats_codec.hpp"
#include "transport/control.hpp"

namespace swarmflow::runtime {
namespace {

using tick_atom = caf::atom_constant<caf::atom("tick")>;
using figures_atom = caf::atom_constant<caf::atom("figures")>;

/// Every `interval_ms`, the utilisation of the unit's worker threads and per
/// replica queue depth, service time, arrival rate and progress, as a
/// LoadReport to the coordinator (a unit process) or straight into the run's
/// view (a unit in the coordinator's process). Quits when the run has ended.
caf::behavior unit_actor(caf::event_based_actor* self, std::shared_ptr<RunState> run, int unit, int threads,
                         bool remote_coordinator, int figures_ms) {
  struct State {
    explicit State(int unit, int threads) : reporter(unit, threads) {}
    LoadReporter reporter;
  };
  auto state = std::make_shared<State>(unit, threads);
  const auto interval = std::chrono::milliseconds(std::max(1, run->spec.placement.interval_ms));
  self->delayed_send(self, interval, tick_atom::value);
  const auto figures_interval = std::chrono::milliseconds(std::max(1, figures_ms));
  if (remote_coordinator && figures_ms > 0) self->delayed_send(self, figures_interval, figures_atom::value);
  return {[=](figures_atom) {
            if (run->finished()) return;  // UnitDone carries the rest
            run->transports[static_cast<std::size_t>(unit)]->send_control(
                encode_unit_figures(*run, unit, process_incarnation()));
            self->delayed_send(self, figures_interval, figures_atom::value);
          },
          [=](tick_atom) {
            if (run->finished()) {
              self->quit();
              return;
            }
            // A unit process's load reports go from its watch thread, which
            // busy workers cannot hold up (LoadReporter).
            if (!remote_coordinator) {
              double utilisation = 0;
              state->reporter.report(*run, &utilisation);
              run->record_load(unit, utilisation);
            }
            self->delayed_send(self, interval, tick_atom::value);
          }};
}

}  // namespace

std::uint64_t process_incarnation() {
  static const std::uint64_t id = (static_cast<std::uint64_t>(::getpid()) << 40) ^
                                  static_cast<std::uint64_t>(steady_now_ns() & ((std::int64_t{1} << 40) - 1)) ^
                                  static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return id == 0 ? 1 : id;
}

LoadReporter::LoadReporter(int unit, int threads) : unit_(unit), threads_(threads), last_ns_(steady_now_ns()) {}

transport::ControlBuffer LoadReporter::report(RunState& run, double* utilisation_out) {
  const std::int64_t now = steady_now_ns();
  const double dt_ns = static_cast<double>(std::max<std::int64_t>(1, now - last_ns_));
  std::int64_t busy = 0;
  double utilisation = 0;
  std::size_t k = 0;
  const auto table = run.table();
  auto report = transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    std::vector<flatbuffers::Offset<schema::ReplicaLoad>> replicas;
    for (const auto& node : run.graph.nodes) {
      const auto n = static_cast<std::size_t>(node.index);
      for (std::size_t r = 0; r < table->unit_of[n].size(); ++r) {
        if (table->unit_of[n][r] != unit_) continue;
        const ReplicaStats& s = *run.replica_stats[n][r];
        busy += s.busy_until(now);
        std::uint64_t arrivals = 0;
        for (int e : node.in_edges) arrivals += run.edge_in[static_cast<std::size_t>(e)][r]->delivered.load();
        if (last_arrivals_.size() <= k) last_arrivals_.push_back(0);
        const double arrival_hz = static_cast<double>(arrivals - std::min(arrivals, last_arrivals_[k])) * 1e9 / dt_ns;
        last_arrivals_[k++] = arrivals;
        std::uint8_t flags = 0;
        flags |= s.stateful.load() ? kLoadStateful : 0;
        flags |= s.state_per_key.load() ? kLoadStatePerKey : 0;
        flags |= s.lists_keys.load() ? kLoadListsKeys : 0;
        flags |= s.finished.load() ? kLoadFinished : 0;
        std::vector<std::uint64_t> key_ids;
        std::vector<std::int64_t> key_busy;
        if (node.decl->keyed) {
          const auto keys = s.keys();
          flags |= keys.overflow ? kLoadKeyOverflow : 0;
          for (const auto& [key, ns] : keys.busy_ns) {
            key_ids.push_back(key);
            key_busy.push_back(ns);
          }
        }
        replicas.push_back(schema::CreateReplicaLoad(
            fbb, fbb.CreateString(node.decl->id), static_cast<std::uint32_t>(r),
            static_cast<std::uint32_t>(s.queued.load()), static_cast<double>(s.service_ns.load()), arrival_hz,
            s.processed.load(), static_cast<std::uint32_t>(n), s.busy_until(now), arrivals, flags,
            fbb.CreateVector(key_ids), fbb.CreateVector(key_busy)));
      }
    }
    // A replica that moved away takes its busy time along: the unit's
    // utilisation never counts a fall as negative.
    utilisation = std::clamp(static_cast<double>(std::max<std::int64_t>(0, busy - last_busy_)) /
                                 (dt_ns * std::max(1, threads_)),
                             0.0, 1.0);
    auto body = schema::CreateLoadReport(fbb, fbb.CreateString(run.spec.units[static_cast<std::size_t>(unit_)].id),
                                         now, static_cast<float>(utilisation), fbb.CreateVector(replicas),
                                         run.unit_speed[static_cast<std::size_t>(unit_)]->load(std::memory_order_relaxed));
    return std::make_pair(schema::ControlBody::LoadReport, body.Union());
  });
  last_busy_ = busy;
  last_ns_ = now;
  if (utilisation_out != nullptr) *utilisation_out = utilisation;
  return report;
}

void take_remote_load(RunState& run, int unit, const schema::LoadReport& report) {
  // Its speed as its process has it (a scenario, or a change asked for there).
  if (report.speed() > 0 && report.speed() <= 1000) {
    run.unit_speed[static_cast<std::size_t>(unit)]->store(report.speed(), std::memory_order_relaxed);
  }
  if (report.replicas() == nullptr) return;
  const auto table = run.table();
  for (const auto* r : *report.replicas()) {
    if (r == nullptr) continue;
    const auto n = static_cast<std::size_t>(r->node());
    const auto i = static_cast<std::size_t>(r->replica());
    // Only from the unit that hosts it now: an older host's last report
    // would mix two processes' cumulative figures.
    if (n >= run.replica_stats.size() || i >= run.replica_stats[n].size() || table->unit(static_cast<int>(n), static_cast<int>(i)) != unit) {
      continue;
    }
    ReplicaStats& s = *run.replica_stats[n][i];
    s.busy_ns.store(r->busy_ns(), std::memory_order_relaxed);
    s.remote_arrivals.store(r->arrivals(), std::memory_order_relaxed);
    s.remote_unit.store(unit, std::memory_order_release);
    s.queued.store(r->queue_depth(), std::memory_order_relaxed);
    s.service_ns.store(static_cast<std::int64_t>(r->service_ns()), std::memory_order_relaxed);
    const std::uint8_t flags = r->flags();
    s.stateful.store((flags & kLoadStateful) != 0);
    s.state_per_key.store((flags & kLoadStatePerKey) != 0);
    s.lists_keys.store((flags & kLoadListsKeys) != 0);
    if ((flags & kLoadFinished) != 0) s.finished.store(true);
    ReplicaStats::KeyFigures keys;
    keys.overflow = (flags & kLoadKeyOverflow) != 0;
    const std::size_t count = r->key_ids() == nullptr ? 0 : r->key_ids()->size();
    if (r->key_busy_ns() != nullptr && r->key_busy_ns()->size() == count) {
      for (flatbuffers::uoffset_t k = 0; k < count; ++k) keys.busy_ns.emplace_back(r->key_ids()->Get(k), r->key_busy_ns()->Get(k));
    }
    s.publish_keys(std::move(keys));
  }
}

caf::actor spawn_unit_actor(caf::actor_system& system, std::shared_ptr<RunState> run, int unit, int threads,
                            bool remote_coordinator, int figures_ms) {
  return system.spawn(unit_actor, std::move(run), unit, threads, remote_coordinator, figures_ms);
}

}  // namespace swarmflow::runtime
