#include "runtime/stats_codec.hpp"

namespace swarmflow::runtime {

transport::ControlBuffer encode_unit_done(const RunState& run, int unit) {
  const auto table = run.table();
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    std::vector<flatbuffers::Offset<schema::ReplicaStats>> replicas;
    for (std::size_t node = 0; node < table->unit_of.size(); ++node) {
      for (std::size_t r = 0; r < table->unit_of[node].size(); ++r) {
        if (table->unit_of[node][r] != unit) continue;
        const ReplicaStats& s = *run.replica_stats[node][r];
        std::vector<flatbuffers::Offset<schema::Count>> counters;
        for (const auto& [name, value] : s.counters()) {
          counters.push_back(schema::CreateCount(fbb, fbb.CreateString(name), value));
        }
        const metrics::LatencyHistogram latency = s.latency();
        std::vector<flatbuffers::Offset<schema::Bucket>> buckets;
        latency.for_each_bucket([&](int index, std::uint64_t count) {
          buckets.push_back(schema::CreateBucket(fbb, static_cast<std::uint32_t>(index), count));
        });
        std::vector<std::uint64_t> service;
        for (const auto& b : s.service_buckets) service.push_back(b.load(std::memory_order_relaxed));
        replicas.push_back(schema::CreateReplicaStats(
            fbb, static_cast<std::uint32_t>(node), static_cast<std::uint32_t>(r), s.processed.load(), s.errors.load(),
            s.restarts.load(), s.dead_letters.load(), s.queue_peak.load(), fbb.CreateVector(counters),
            fbb.CreateVector(buckets), latency.max_ns(), fbb.CreateVector(service), s.service_sum_ns.load()));
      }
    }
    std::vector<flatbuffers::Offset<schema::EdgeSide>> edges;
    for (const auto& edge : run.graph.edges) {
      const auto e = static_cast<std::size_t>(edge.id);
      for (std::size_t r = 0; r < run.edge_out[e].size(); ++r) {
        if (table->unit_of[static_cast<std::size_t>(edge.from_node)][r] != unit) continue;
        const EdgeSideStats& s = *run.edge_out[e][r];
        edges.push_back(schema::CreateEdgeSide(fbb, static_cast<std::uint32_t>(e), static_cast<std::uint32_t>(r), true,
                                               s.sent.load(), s.dropped.load(), 0, s.peak_in_flight.load(),
                                               s.too_large.load(), 0, s.peak_retained.load(), s.replayed.load()));
      }
      for (std::size_t r = 0; r < run.edge_in[e].size(); ++r) {
        if (table->unit_of[static_cast<std::size_t>(edge.to_node)][r] != unit) continue;
        const EdgeSideStats& s = *run.edge_in[e][r];
        edges.push_back(schema::CreateEdgeSide(fbb, static_cast<std::uint32_t>(e), static_cast<std::uint32_t>(r),
                                               false, 0, 0, s.delivered.load(), 0, 0, s.refused.load()));
      }
    }
    flatbuffers::Offset<schema::TransportStats> transport_stats;
    const auto u = static_cast<std::size_t>(unit);
    if (u < run.transports.size() && run.transports[u]) {
      const auto& c = run.transports[u]->counters();
      std::vector<std::uint64_t> rejected;
      for (const auto& r : c.rejected) rejected.push_back(r.load());
      transport_stats =
          schema::CreateTransportStats(fbb, c.sent.load(), c.received.load(), fbb.CreateVector(rejected),
                                       c.unknown_peer.load(), c.send_failed.load(), c.auth_refused.load());
    }
    const std::string error = run.error();
    auto body = schema::CreateUnitDone(fbb, fbb.CreateString(run.spec.units[u].id), table->epoch, error.empty(),
                                       fbb.CreateString(error), fbb.CreateVector(replicas), fbb.CreateVector(edges),
                                       transport_stats);
    return std::make_pair(schema::ControlBody::UnitDone, body.Union());
  });
}

void merge_unit_done(RunState& run, int unit, const schema::UnitDone& done) {
  const auto table = run.table();
  if (done.replicas() != nullptr) {
    for (const auto* rs : *done.replicas()) {
      const auto node = static_cast<std::size_t>(rs->node());
      const auto r = static_cast<std::size_t>(rs->replica());
      if (node >= run.replica_stats.size() || r >= run.replica_stats[node].size()) continue;
      if (table->unit_of[node][r] != unit) continue;
      ReplicaStats& s = *run.replica_stats[node][r];
      s.processed += rs->processed();
      s.errors += rs->errors();
      s.restarts += rs->restarts();
      s.dead_letters += rs->dead_letters();
      if (rs->queue_peak() > s.queue_peak.load()) s.queue_peak.store(rs->queue_peak());
      if (rs->counters() != nullptr) {
        for (const auto* c : *rs->counters()) {
          if (c->name() != nullptr) s.counter(c->name()->string_view()) += c->value();
        }
      }
      metrics::LatencyHistogram latency;
      if (rs->latency_buckets() != nullptr) {
        for (const auto* b : *rs->latency_buckets()) latency.add_bucket(static_cast<int>(b->index()), b->count());
      }
      latency.observe_max(rs->latency_max_ns());
      if (rs->service_buckets() != nullptr) {
        for (std::size_t b = 0; b < rs->service_buckets()->size() && b < s.service_buckets.size(); ++b) {
          s.service_buckets[b].fetch_add(rs->service_buckets()->Get(static_cast<flatbuffers::uoffset_t>(b)));
        }
      }
      s.service_sum_ns.fetch_add(rs->service_sum_ns());
      s.merge_latency(latency);
    }
  }
  if (done.edges() != nullptr) {
    for (const auto* es : *done.edges()) {
      const auto e = static_cast<std::size_t>(es->edge());
      const auto r = static_cast<std::size_t>(es->replica());
      if (e >= run.graph.edges.size()) continue;
      const auto& edge = run.graph.edges[e];
      if (es->producer()) {
        if (r >= run.edge_out[e].size() || table->unit_of[static_cast<std::size_t>(edge.from_node)][r] != unit) continue;
        EdgeSideStats& s = *run.edge_out[e][r];
        s.sent += es->sent();
        s.dropped += es->dropped();
        s.too_large += es->too_large();
        if (es->peak_in_flight() > s.peak_in_flight.load()) s.peak_in_flight.store(es->peak_in_flight());
        if (es->peak_retained() > s.peak_retained.load()) s.peak_retained.store(es->peak_retained());
        s.replayed += es->replayed();
      } else {
        if (r >= run.edge_in[e].size() || table->unit_of[static_cast<std::size_t>(edge.to_node)][r] != unit) continue;
        run.edge_in[e][r]->delivered += es->delivered();
        run.edge_in[e][r]->refused += es->refused();
      }
    }
  }
  if (done.transport() != nullptr) {
    RemoteTransportStats t;
    t.sent = done.transport()->sent();
    t.received = done.transport()->received();
    t.unknown_peer = done.transport()->unknown_peer();
    t.send_failed = done.transport()->send_failed();
    t.refused_handshakes = done.transport()->refused_handshakes();
    if (done.transport()->rejected() != nullptr) {
      for (std::size_t i = 0; i < done.transport()->rejected()->size() && i < t.rejected.size(); ++i) {
        t.rejected[i] = done.transport()->rejected()->Get(static_cast<flatbuffers::uoffset_t>(i));
      }
    }
    run.set_remote_transport(unit, t);
  }
  if (!done.ok()) run.fail(done.error() != nullptr ? done.error()->str() : "unit " + std::to_string(unit) + " failed");
}

}  // namespace swarmflow::runtime
