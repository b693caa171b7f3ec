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

/// This unit process, as the coordinator tells it from one started again
/// with the same unit id: its pid and start time.
std::uint64_t incarnation() {
  static const std::uint64_t id = (static_cast<std::uint64_t>(::getpid()) << 40) ^
                                  static_cast<std::uint64_t>(steady_now_ns() & ((std::int64_t{1} << 40) - 1)) ^
                                  static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return id == 0 ? 1 : id;
}

/// Every `interval_ms`, the utilisation of the unit's worker threads and per
/// replica queue depth, service time, arrival rate and progress, as a
/// LoadReport to the coordinator (a unit process) or straight into the run's
/// view (a unit in the coordinator's process). Quits when the run has ended.
caf::behavior unit_actor(caf::event_based_actor* self, std::shared_ptr<RunState> run, int unit, int threads,
                         bool remote_coordinator, int figures_ms) {
  struct State {
    std::int64_t last_ns = steady_now_ns();
    std::int64_t last_busy = 0;
    std::vector<std::uint64_t> last_arrivals;
  };
  auto state = std::make_shared<State>();
  const auto interval = std::chrono::milliseconds(std::max(1, run->spec.placement.interval_ms));
  self->delayed_send(self, interval, tick_atom::value);
  const auto figures_interval = std::chrono::milliseconds(std::max(1, figures_ms));
  if (remote_coordinator && figures_ms > 0) self->delayed_send(self, figures_interval, figures_atom::value);
  return {[=](figures_atom) {
            if (run->finished()) return;  // UnitDone carries the rest
            run->transports[static_cast<std::size_t>(unit)]->send_control(
                encode_unit_figures(*run, unit, incarnation()));
            self->delayed_send(self, figures_interval, figures_atom::value);
          },
          [=](tick_atom) {
    if (run->finished()) {
      self->quit();
      return;
    }
    const std::int64_t now = steady_now_ns();
    const double dt_ns = static_cast<double>(std::max<std::int64_t>(1, now - state->last_ns));
    std::int64_t busy = 0;
    double utilisation = 0;
    std::size_t k = 0;
    const auto table = run->table();
    auto report = transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
      std::vector<flatbuffers::Offset<schema::ReplicaLoad>> replicas;
      for (const auto& node : run->graph.nodes) {
        const auto n = static_cast<std::size_t>(node.index);
        for (std::size_t r = 0; r < table->unit_of[n].size(); ++r) {
          if (table->unit_of[n][r] != unit) continue;
          const ReplicaStats& s = *run->replica_stats[n][r];
          busy += s.busy_until(now);
          std::uint64_t arrivals = 0;
          for (int e : node.in_edges) arrivals += run->edge_in[static_cast<std::size_t>(e)][r]->delivered.load();
          if (state->last_arrivals.size() <= k) state->last_arrivals.push_back(0);
          const double arrival_hz = static_cast<double>(arrivals - state->last_arrivals[k]) * 1e9 / dt_ns;
          state->last_arrivals[k++] = arrivals;
          replicas.push_back(schema::CreateReplicaLoad(
              fbb, fbb.CreateString(node.decl->id), static_cast<std::uint32_t>(r),
              static_cast<std::uint32_t>(s.queued.load()), static_cast<double>(s.service_ns.load()), arrival_hz,
              s.processed.load()));
        }
      }
      utilisation =
          std::clamp(static_cast<double>(busy - state->last_busy) / (dt_ns * std::max(1, threads)), 0.0, 1.0);
      auto body = schema::CreateLoadReport(fbb, fbb.CreateString(run->spec.units[static_cast<std::size_t>(unit)].id),
                                           now, static_cast<float>(utilisation), fbb.CreateVector(replicas));
      return std::make_pair(schema::ControlBody::LoadReport, body.Union());
    });
    state->last_busy = busy;
    state->last_ns = now;
    if (remote_coordinator) {
      run->transports[static_cast<std::size_t>(unit)]->send_control(std::move(report));
    } else {
      run->record_load(unit, utilisation);
    }
    self->delayed_send(self, interval, tick_atom::value);
  }};
}

}  // namespace

caf::actor spawn_unit_actor(caf::actor_system& system, std::shared_ptr<RunState> run, int unit, int threads,
                            bool remote_coordinator, int figures_ms) {
  return system.spawn(unit_actor, std::move(run), unit, threads, remote_coordinator, figures_ms);
}

}  // namespace swarmflow::runtime
