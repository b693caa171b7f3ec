#include "runtime/unit_protocol.hpp"

#include <algorithm>

#include <caf/actor.hpp>

#include "runtime/messages.hpp"

#include "runtime/run_state.hpp"
#include "runtime/snapshot_codec.hpp"

namespace swarmflow::runtime {

void on_coordinator_message(RunState& run, UnitSide& side, const schema::Control& c, bool heartbeat, int unit) {
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
      if (side.has_plan && side.local_units > 1) {
        // Taken once it came on every unit's socket (see UnitSide::plan_from).
        auto& from = side.plan_from[p->epoch()];
        from.insert(unit);
        if (static_cast<int>(from.size()) < side.local_units) break;
        side.plan_from.erase(side.plan_from.begin(), side.plan_from.upper_bound(p->epoch()));
      }
      RoutingTable plan;
      // Not this pipeline's plan: the coordinator runs another file.
      if (!decode_placement(run.graph, run.spec.units.size(), *p, &plan)) break;
      side.epoch = p->epoch();
      if (side.has_plan) {
        // A failover or a move: the failure watch takes it up.
        side.plans.push_back(plan);
        side.replan = true;
        if (side.on_plan) side.on_plan();
      }
      side.plan = std::move(plan);
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
    case schema::ControlBody::KeyStates: {
      // Ahead of the plan that routes the keys here: the replica's mailbox
      // has them before any of their envelopes, which come under that plan.
      const auto* m = c.body_as_KeyStates();
      KeyStates keys;
      if (!decode_key_states(*m, &keys)) break;
      const caf::actor a = run.table()->actor(static_cast<int>(m->node()), static_cast<int>(m->replica()));
      if (a) caf::anon_send(a, keys_atom::value, std::make_shared<const KeyStates>(std::move(keys)));
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
  std::vector<std::uint32_t> h_node;
  std::vector<std::uint32_t> h_replica;
  std::vector<std::int32_t> h_from;
  std::vector<std::uint32_t> h_epoch;
  for (const auto& h : table.handovers) {
    h_node.push_back(static_cast<std::uint32_t>(h.node));
    h_replica.push_back(static_cast<std::uint32_t>(h.replica));
    h_from.push_back(h.from_unit);
    h_epoch.push_back(h.epoch);
  }
  const auto non_negative = [](const std::vector<int>& v) {
    std::vector<std::uint32_t> out;
    for (int x : v) out.push_back(static_cast<std::uint32_t>(std::max(0, x)));
    return out;
  };
  std::vector<std::uint32_t> key_nodes;
  std::vector<std::uint32_t> key_counts;
  std::vector<std::uint64_t> key_ids;
  std::vector<std::uint32_t> key_replicas;
  for (std::size_t n = 0; n < table.keys.size(); ++n) {
    if (!table.keys[n]) continue;
    key_nodes.push_back(static_cast<std::uint32_t>(n));
    key_counts.push_back(static_cast<std::uint32_t>(table.keys[n]->size()));
    for (const auto& [key, replica] : *table.keys[n]) {
      key_ids.push_back(key);
      key_replicas.push_back(static_cast<std::uint32_t>(replica));
    }
  }
  schema::PlacementPlanBuilder b(fbb);
  const auto c = fbb.CreateVector(counts);
  const auto u = fbb.CreateVector(units);
  const auto dk = fbb.CreateVector(table.draining_keys);
  const auto hn = fbb.CreateVector(h_node);
  const auto hr = fbb.CreateVector(h_replica);
  const auto hf = fbb.CreateVector(h_from);
  const auto he = fbb.CreateVector(h_epoch);
  const auto act = fbb.CreateVector(non_negative(table.active));
  const auto ring = fbb.CreateVector(non_negative(table.ring));
  const auto kn = fbb.CreateVector(key_nodes);
  const auto kc = fbb.CreateVector(key_counts);
  const auto ki = fbb.CreateVector(key_ids);
  const auto kr = fbb.CreateVector(key_replicas);
  return schema::CreatePlacementPlan(fbb, table.epoch, c, u, table.draining.first, table.draining.second, dk,
                                     table.draining_all_keys, hn, hr, hf, he, act, ring, kn, kc, ki, kr);
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
  RoutingTable table;
  if (!decode_placement(graph, units, p, &table)) return false;
  *out = std::move(table.unit_of);
  return true;
}

bool decode_placement(const graph::Graph& graph, std::size_t units, const schema::PlacementPlan& p, RoutingTable* out) {
  if (p.stage_replicas() == nullptr || p.units() == nullptr) return false;
  RoutingTable t;
  t.epoch = p.epoch();
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
    t.unit_of.push_back(std::move(replicas));
  }
  const auto replica_ok = [&](std::int64_t node, std::int64_t replica) {
    return node >= 0 && static_cast<std::size_t>(node) < nodes.size() && replica >= 0 &&
           replica < nodes[static_cast<std::size_t>(node)].decl->replicas;
  };
  const auto size = [](const auto* v) -> std::size_t { return v == nullptr ? 0 : v->size(); };
  if (p.draining_node() >= 0) {
    if (!replica_ok(p.draining_node(), p.draining_replica())) return false;
    t.draining = {p.draining_node(), p.draining_replica()};
  }
  if (p.draining_keys() != nullptr) t.draining_keys.assign(p.draining_keys()->begin(), p.draining_keys()->end());
  t.draining_all_keys = p.draining_all_keys();
  const std::size_t handovers = size(p.handover_node());
  if (size(p.handover_replica()) != handovers || size(p.handover_from()) != handovers ||
      size(p.handover_epoch()) != handovers) {
    return false;
  }
  for (flatbuffers::uoffset_t i = 0; i < handovers; ++i) {
    RoutingTable::Handover h;
    h.node = static_cast<int>(p.handover_node()->Get(i));
    h.replica = static_cast<int>(p.handover_replica()->Get(i));
    h.from_unit = p.handover_from()->Get(i);
    h.epoch = p.handover_epoch()->Get(i);
    if (!replica_ok(h.node, h.replica) || h.from_unit < kLostUnit || h.from_unit >= static_cast<int>(units)) return false;
    t.handovers.push_back(h);
  }
  for (const auto* counts : {p.active(), p.ring()}) {
    if (counts == nullptr || counts->size() == 0) continue;
    if (counts->size() != nodes.size()) return false;
    std::vector<int> v;
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const std::uint32_t x = counts->Get(static_cast<flatbuffers::uoffset_t>(n));
      if (x > static_cast<std::uint32_t>(nodes[n].decl->replicas)) return false;
      v.push_back(static_cast<int>(x));
    }
    (counts == p.active() ? t.active : t.ring) = std::move(v);
  }
  const std::size_t maps = size(p.key_nodes());
  const std::size_t keys = size(p.key_ids());
  if (size(p.key_counts()) != maps || size(p.key_replicas()) != keys) return false;
  std::size_t k = 0;
  for (flatbuffers::uoffset_t i = 0; i < maps; ++i) {
    const std::uint32_t node = p.key_nodes()->Get(i);
    const std::uint32_t count = p.key_counts()->Get(i);
    if (node >= nodes.size() || count > keys - k) return false;
    auto map = std::make_shared<KeyMap>();
    for (std::uint32_t j = 0; j < count; ++j, ++k) {
      const auto replica = p.key_replicas()->Get(static_cast<flatbuffers::uoffset_t>(k));
      if (!replica_ok(node, replica)) return false;
      (*map)[p.key_ids()->Get(static_cast<flatbuffers::uoffset_t>(k))] = static_cast<int>(replica);
    }
    t.keys.resize(nodes.size());
    t.keys[node] = std::move(map);
  }
  if (k != keys) return false;
  *out = std::move(t);
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
