#include "runtime/unit_protocol.hpp"

#include <caf/actor.hpp>

#include "runtime/run_state.hpp"
#include "runtime/snapshot_codec.hpp"

namespace swarmflow::runtime {

void on_coordinator_message(RunState& run, UnitSide& side, const schema::Control& c, bool heartbeat) {
  std::lock_guard<std::mutex> lock(side.mutex);
  if (heartbeat) side.coordinator->heartbeat(steady_now_ns());
  switch (c.body_type()) {
    case schema::ControlBody::Heartbeat: {
      const auto* beat = c.body_as_Heartbeat();
      const std::int64_t pid = beat->pid();
      if (side.coordinator_pid != 0 && pid != side.coordinator_pid) {
        side.new_coordinator = true;
        side.clock = metrics::ClockOffsetEstimator();  // another process, maybe another host
      }
      side.coordinator_pid = pid;
      // The four times of the clock-offset exchange: this unit's heartbeat
      // left at echo_sent and arrived at echo_received; this one left at
      // sent_ns and arrives now.
      if (beat->echo_sent_ns() != 0 &&
          side.clock.add(metrics::ClockSample{beat->echo_sent_ns(), beat->echo_received_ns(), beat->sent_ns(),
                                              steady_now_ns()})) {
        const metrics::ClockEstimate e = side.clock.estimate();
        for (std::size_t u = 0; u < run.transports.size(); ++u) {
          if (run.transports[u]) run.set_clock_offset(static_cast<int>(u), e.offset_ns, e.delay_ns);
        }
      }
      break;
    }
    case schema::ControlBody::PlacementPlan: {
      const auto* p = c.body_as_PlacementPlan();
      if (side.has_plan && p->epoch() <= side.epoch) break;
      std::vector<std::vector<int>> plan;
      // Not this pipeline's plan: the coordinator runs another file.
      if (!decode_plan(run, *p, &plan)) break;
      side.plan = std::move(plan);
      side.epoch = p->epoch();
      if (side.has_plan) side.replan = true;  // a failover: the failure watch takes it up
      side.has_plan = true;
      break;
    }
    case schema::ControlBody::ClockOffsets: {
      // The other units' offsets; this process's own units keep what it measured.
      const auto* m = c.body_as_ClockOffsets();
      if (m->offsets_ns() == nullptr || m->known() == nullptr) break;
      for (std::size_t u = 0; u < m->offsets_ns()->size() && u < m->known()->size(); ++u) {
        if (u < run.transports.size() && run.transports[u]) continue;
        if (m->known()->Get(static_cast<flatbuffers::uoffset_t>(u))) {
          run.set_clock_offset(static_cast<int>(u), m->offsets_ns()->Get(static_cast<flatbuffers::uoffset_t>(u)), 0);
        }
      }
      break;
    }
    case schema::ControlBody::Go:
      side.go = true;
      break;
    case schema::ControlBody::SnapshotStored: {
      const auto* m = c.body_as_SnapshotStored();
      const auto table = run.table();
      const caf::actor a = table->actor(static_cast<int>(m->node()), static_cast<int>(m->replica()));
      if (a) send_snapshot_stored(a, m->id());
      break;
    }
    case schema::ControlBody::Restore: {
      const auto* m = c.body_as_Restore();
      if (m->snapshot() == nullptr) break;
      auto snapshot = std::make_shared<ReplicaSnapshot>();
      if (!decode_snapshot(*m->snapshot(), snapshot.get())) break;
      side.restores[{static_cast<int>(m->snapshot()->node()), static_cast<int>(m->snapshot()->replica())}] =
          std::move(snapshot);
      break;
    }
    case schema::ControlBody::StopSources:
      stop_local_sources(run);
      break;
    case schema::ControlBody::Shutdown:
      side.shutdown = true;
      if (!run.finished()) run.abort("the coordinator ended the run");
      break;
    default:
      break;
  }
  side.cv.notify_all();
}

int unit_index(const config::PipelineSpec& spec, const std::string& id) {
  for (std::size_t u = 0; u < spec.units.size(); ++u) {
    if (spec.units[u].id == id) return static_cast<int>(u);
  }
  return -1;
}

void stop_local_sources(RunState& run) {
  run.stop_requested.store(true);
  for (const auto& node : run.graph.nodes) {
    if (!node.source()) continue;
    const auto table = run.table();
    for (const auto& a : table->actors[static_cast<std::size_t>(node.index)]) {
      if (a) send_stop(a);
    }
  }
}

flatbuffers::Offset<schema::PlacementPlan> build_plan(flatbuffers::FlatBufferBuilder& fbb, const RoutingTable& table) {
  std::vector<std::uint32_t> counts;
  std::vector<std::uint32_t> units;
  for (const auto& replicas : table.unit_of) {
    counts.push_back(static_cast<std::uint32_t>(replicas.size()));
    for (int u : replicas) units.push_back(u == kLostUnit ? kLostInPlan : static_cast<std::uint32_t>(u));
  }
  return schema::CreatePlacementPlan(fbb, table.epoch, fbb.CreateVector(counts), fbb.CreateVector(units));
}

transport::ControlBuffer plan_message(const RunState& run) { return plan_message(*run.table()); }

transport::ControlBuffer plan_message(const RoutingTable& table) {
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    return std::make_pair(schema::ControlBody::PlacementPlan, build_plan(fbb, table).Union());
  });
}

bool decode_plan(const RunState& run, const schema::PlacementPlan& p, std::vector<std::vector<int>>* out) {
  return decode_plan(run.graph, run.spec.units.size(), p, out);
}

bool decode_plan(const graph::Graph& graph, std::size_t units, const schema::PlacementPlan& p,
                 std::vector<std::vector<int>>* out) {
  if (p.stage_replicas() == nullptr || p.units() == nullptr) return false;
  std::vector<std::vector<int>> plan;
  std::size_t next = 0;
  const auto& nodes = graph.nodes;
  if (p.stage_replicas()->size() != nodes.size()) return false;
  for (std::size_t node = 0; node < nodes.size(); ++node) {
    const auto n = p.stage_replicas()->Get(static_cast<flatbuffers::uoffset_t>(node));
    if (n != static_cast<std::uint32_t>(nodes[node].decl->replicas)) return false;
    std::vector<int> replicas;
    for (std::uint32_t r = 0; r < n; ++r, ++next) {
      if (next >= p.units()->size()) return false;
      const std::uint32_t u = p.units()->Get(static_cast<flatbuffers::uoffset_t>(next));
      if (u >= units && u != kLostInPlan) return false;
      replicas.push_back(u == kLostInPlan ? kLostUnit : static_cast<int>(u));
    }
    plan.push_back(std::move(replicas));
  }
  *out = std::move(plan);
  return true;
}

transport::ControlBuffer simple_message(schema::ControlBody type, std::uint32_t epoch) {
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    flatbuffers::Offset<void> body;
    switch (type) {
      case schema::ControlBody::Go:
        body = schema::CreateGo(fbb, epoch).Union();
        break;
      case schema::ControlBody::Shutdown:
        body = schema::CreateShutdown(fbb, epoch).Union();
        break;
      case schema::ControlBody::StopSources:
        body = schema::CreateStopSources(fbb, epoch).Union();
        break;
      default:
        break;
    }
    return std::make_pair(type, body);
  });
}

transport::ControlBuffer ready_message(const std::string& unit_id, std::uint32_t epoch) {
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    return std::make_pair(schema::ControlBody::Ready, schema::CreateReady(fbb, fbb.CreateString(unit_id), epoch).Union());
  });
}

transport::ControlBuffer leaving_message(const std::string& unit_id, std::uint32_t epoch) {
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    return std::make_pair(schema::ControlBody::Leaving,
                          schema::CreateLeaving(fbb, fbb.CreateString(unit_id), epoch).Union());
  });
}

transport::ControlBuffer unit_state_message(const std::string& unit_id, const RoutingTable& table, bool running) {
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    const auto plan = build_plan(fbb, table);
    return std::make_pair(schema::ControlBody::UnitState,
                          schema::CreateUnitState(fbb, fbb.CreateString(unit_id), plan, running).Union());
  });
}

}  // namespace swarmflow::runtime
