#include "runtime/stats_codec.hpp"

namespace swarmflow::runtime {

namespace {

/// The replicas and edge sides unit `unit` hosts, and its transport counters.
struct Encoded {
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<schema::ReplicaStats>>> replicas;
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<schema::EdgeSide>>> edges;
  flatbuffers::Offset<schema::TransportStats> transport;
};

/// A histogram's non-empty buckets as two parallel vectors.
struct EncodedBuckets {
  flatbuffers::Offset<flatbuffers::Vector<std::uint32_t>> index;
  flatbuffers::Offset<flatbuffers::Vector<std::uint64_t>> count;
};

EncodedBuckets encode_buckets(flatbuffers::FlatBufferBuilder& fbb, const metrics::LatencyHistogram& h) {
  std::vector<std::uint32_t> index;
  std::vector<std::uint64_t> count;
  h.for_each_bucket([&](int i, std::uint64_t n) {
    index.push_back(static_cast<std::uint32_t>(i));
    count.push_back(n);
  });
  return EncodedBuckets{fbb.CreateVector(index), fbb.CreateVector(count)};
}

void decode_buckets(const flatbuffers::Vector<std::uint32_t>* index, const flatbuffers::Vector<std::uint64_t>* count,
                    std::map<int, std::uint64_t>* out) {
  if (index == nullptr || count == nullptr) return;
  for (flatbuffers::uoffset_t i = 0; i < index->size() && i < count->size(); ++i) {
    (*out)[static_cast<int>(index->Get(i))] += count->Get(i);
  }
}

metrics::LatencyHistogram histogram_of(const std::map<int, std::uint64_t>& buckets, std::int64_t max_ns) {
  metrics::LatencyHistogram h;
  h.observe_max(max_ns);
  for (const auto& [bucket, count] : buckets) h.add_bucket(bucket, count);
  return h;
}

Encoded encode_figures(flatbuffers::FlatBufferBuilder& fbb, const RunState& run, const RoutingTable& table, int unit) {
  std::vector<flatbuffers::Offset<schema::ReplicaStats>> replicas;
  for (std::size_t node = 0; node < table.unit_of.size(); ++node) {
    for (std::size_t r = 0; r < table.unit_of[node].size(); ++r) {
      if (table.unit_of[node][r] != unit && !run.drained_on(static_cast<int>(node), static_cast<int>(r), unit)) continue;
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
      const metrics::LatencyHistogram residence_h = s.residence.snapshot();
      const auto residence = encode_buckets(fbb, residence_h);
      replicas.push_back(schema::CreateReplicaStats(
          fbb, static_cast<std::uint32_t>(node), static_cast<std::uint32_t>(r), s.processed.load(), s.errors.load(),
          s.restarts.load(), s.dead_letters.load(), s.queue_peak.load(), fbb.CreateVector(counters),
          fbb.CreateVector(buckets), latency.max_ns(), fbb.CreateVector(service), s.service_sum_ns.load(),
          s.queued.load(std::memory_order_relaxed), residence.index, residence.count, residence_h.max_ns()));
    }
  }
  std::vector<flatbuffers::Offset<schema::EdgeSide>> edges;
  for (const auto& edge : run.graph.edges) {
    const auto e = static_cast<std::size_t>(edge.id);
    for (std::size_t r = 0; r < run.edge_out[e].size(); ++r) {
      if (table.unit_of[static_cast<std::size_t>(edge.from_node)][r] != unit &&
          !run.drained_on(edge.from_node, static_cast<int>(r), unit)) {
        continue;
      }
      const EdgeSideStats& s = *run.edge_out[e][r];
      edges.push_back(schema::CreateEdgeSide(fbb, static_cast<std::uint32_t>(e), static_cast<std::uint32_t>(r), true,
                                             s.sent.load(), s.dropped.load(), 0, s.peak_in_flight.load(),
                                             s.too_large.load(), 0, s.peak_retained.load(), s.replayed.load()));
    }
    for (std::size_t r = 0; r < run.edge_in[e].size(); ++r) {
      if (table.unit_of[static_cast<std::size_t>(edge.to_node)][r] != unit &&
          !run.drained_on(edge.to_node, static_cast<int>(r), unit)) {
        continue;
      }
      const EdgeSideStats& s = *run.edge_in[e][r];
      const metrics::LatencyHistogram hops_h = s.hops.snapshot();
      const auto hops = encode_buckets(fbb, hops_h);
      const metrics::LatencyHistogram held_h = s.held.snapshot();
      const auto held = encode_buckets(fbb, held_h);
      edges.push_back(schema::CreateEdgeSide(fbb, static_cast<std::uint32_t>(e), static_cast<std::uint32_t>(r), false,
                                             0, 0, s.delivered.load(), 0, 0, s.refused.load(), 0, 0, hops.index,
                                             hops.count, hops_h.max_ns(), held.index, held.count, held_h.max_ns()));
    }
  }
  Encoded out;
  const auto u = static_cast<std::size_t>(unit);
  if (u < run.transports.size() && run.transports[u]) {
    const auto& c = run.transports[u]->counters();
    std::vector<std::uint64_t> rejected;
    for (const auto& r : c.rejected) rejected.push_back(r.load());
    out.transport = schema::CreateTransportStats(fbb, c.sent.load(), c.received.load(), fbb.CreateVector(rejected),
                                                 c.unknown_peer.load(), c.send_failed.load(), c.auth_refused.load());
  }
  out.replicas = fbb.CreateVector(replicas);
  out.edges = fbb.CreateVector(edges);
  return out;
}

/// The edges' (producer node, consumer node).
std::vector<std::pair<int, int>> edge_ends(const RunState& run) {
  std::vector<std::pair<int, int>> ends;
  for (const auto& edge : run.graph.edges) ends.emplace_back(edge.from_node, edge.to_node);
  return ends;
}

/// Adds what `live` says changed to `run`'s counters (the differences wrap:
/// a total that fell is subtracted) and sets its gauges of replicas hosted
/// in other processes.
void apply_changes(RunState& run, const RoutingTable& table, FigureChanges changes) {
  for (const ReplicaFigures& d : changes.replicas) {
    const auto node = static_cast<std::size_t>(d.node);
    const auto r = static_cast<std::size_t>(d.replica);
    if (node >= run.replica_stats.size() || r >= run.replica_stats[node].size()) continue;
    ReplicaStats& s = *run.replica_stats[node][r];
    s.processed.fetch_add(d.processed, std::memory_order_relaxed);
    s.errors.fetch_add(d.errors, std::memory_order_relaxed);
    s.restarts.fetch_add(d.restarts, std::memory_order_relaxed);
    s.dead_letters.fetch_add(d.dead_letters, std::memory_order_relaxed);
    if (d.queue_peak > s.queue_peak.load()) s.queue_peak.store(d.queue_peak);
    const int u = table.unit(d.node, d.replica);
    if (u >= 0 && (static_cast<std::size_t>(u) >= run.transports.size() || !run.transports[static_cast<std::size_t>(u)])) {
      s.queued.store(d.queued, std::memory_order_relaxed);  // hosted elsewhere: its host's gauge
    }
    for (const auto& [name, value] : d.counters) {
      if (value != 0) s.counter(name).fetch_add(value, std::memory_order_relaxed);
    }
    if (!d.latency.empty()) {
      metrics::LatencyHistogram latency;
      for (const auto& [bucket, count] : d.latency) latency.add_bucket(bucket, count);
      latency.observe_max(d.latency_max_ns);
      s.merge_latency(latency);
    }
    for (std::size_t b = 0; b < d.service_buckets.size() && b < s.service_buckets.size(); ++b) {
      s.service_buckets[b].fetch_add(d.service_buckets[b], std::memory_order_relaxed);
    }
    s.service_sum_ns.fetch_add(d.service_sum_ns, std::memory_order_relaxed);
    if (!d.residence.empty()) s.residence.merge(histogram_of(d.residence, d.residence_max_ns));
  }
  for (const EdgeSideFigures& d : changes.edges) {
    const auto e = static_cast<std::size_t>(d.edge);
    const auto r = static_cast<std::size_t>(d.replica);
    if (e >= run.graph.edges.size()) continue;
    if (d.producer) {
      if (r >= run.edge_out[e].size()) continue;
      EdgeSideStats& s = *run.edge_out[e][r];
      s.sent.fetch_add(d.sent, std::memory_order_relaxed);
      s.dropped.fetch_add(d.dropped, std::memory_order_relaxed);
      s.too_large.fetch_add(d.too_large, std::memory_order_relaxed);
      if (d.peak_in_flight > s.peak_in_flight.load()) s.peak_in_flight.store(d.peak_in_flight);
      if (d.peak_retained > s.peak_retained.load()) s.peak_retained.store(d.peak_retained);
      s.replayed.fetch_add(d.replayed, std::memory_order_relaxed);
    } else {
      if (r >= run.edge_in[e].size()) continue;
      run.edge_in[e][r]->delivered.fetch_add(d.delivered, std::memory_order_relaxed);
      run.edge_in[e][r]->refused.fetch_add(d.refused, std::memory_order_relaxed);
      if (!d.hops.empty()) run.edge_in[e][r]->hops.merge(histogram_of(d.hops, d.hop_max_ns));
      if (!d.held.empty()) run.edge_in[e][r]->held.merge(histogram_of(d.held, d.held_max_ns));
    }
  }
}

void take_transport(RunState& run, int unit, const schema::TransportStats* transport) {
  if (transport == nullptr) return;
  RemoteTransportStats t;
  t.sent = transport->sent();
  t.received = transport->received();
  t.unknown_peer = transport->unknown_peer();
  t.send_failed = transport->send_failed();
  t.refused_handshakes = transport->refused_handshakes();
  if (transport->rejected() != nullptr) {
    for (std::size_t i = 0; i < transport->rejected()->size() && i < t.rejected.size(); ++i) {
      t.rejected[i] = transport->rejected()->Get(static_cast<flatbuffers::uoffset_t>(i));
    }
  }
  run.set_remote_transport(unit, t);
}

}  // namespace

transport::ControlBuffer encode_unit_done(const RunState& run, int unit) {
  const auto table = run.table();
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    const Encoded figures = encode_figures(fbb, run, *table, unit);
    const std::string error = run.error();
    auto body = schema::CreateUnitDone(fbb, fbb.CreateString(run.spec.units[static_cast<std::size_t>(unit)].id),
                                       table->epoch, error.empty(), fbb.CreateString(error), figures.replicas,
                                       figures.edges, figures.transport);
    return std::make_pair(schema::ControlBody::UnitDone, body.Union());
  });
}

transport::ControlBuffer encode_unit_figures(const RunState& run, int unit, std::uint64_t incarnation) {
  const auto table = run.table();
  return transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    const Encoded figures = encode_figures(fbb, run, *table, unit);
    const auto u = static_cast<std::size_t>(unit);
    const std::int64_t offset = u < run.clock_offset_ns.size() ? run.clock_offset_ns[u]->load() : 0;
    const std::int64_t delay = u < run.clock_delay_ns.size() ? run.clock_delay_ns[u]->load() : -1;
    auto body = schema::CreateUnitFigures(fbb, fbb.CreateString(run.spec.units[u].id), table->epoch, incarnation,
                                          steady_now_ns(), figures.replicas, figures.edges, figures.transport, offset,
                                          delay);
    return std::make_pair(schema::ControlBody::UnitFigures, body.Union());
  });
}

UnitFigures decode_figures(int unit, std::uint64_t incarnation,
                           const flatbuffers::Vector<flatbuffers::Offset<schema::ReplicaStats>>* replicas,
                           const flatbuffers::Vector<flatbuffers::Offset<schema::EdgeSide>>* edges) {
  UnitFigures f;
  f.unit = unit;
  f.incarnation = incarnation;
  if (replicas != nullptr) {
    for (const auto* rs : *replicas) {
      ReplicaFigures r;
      r.node = static_cast<int>(rs->node());
      r.replica = static_cast<int>(rs->replica());
      r.processed = rs->processed();
      r.errors = rs->errors();
      r.restarts = rs->restarts();
      r.dead_letters = rs->dead_letters();
      r.queue_peak = rs->queue_peak();
      r.queued = rs->queued();
      if (rs->counters() != nullptr) {
        for (const auto* c : *rs->counters()) {
          if (c->name() != nullptr) r.counters[c->name()->str()] = c->value();
        }
      }
      if (rs->latency_buckets() != nullptr) {
        for (const auto* b : *rs->latency_buckets()) r.latency[static_cast<int>(b->index())] += b->count();
      }
      r.latency_max_ns = rs->latency_max_ns();
      if (rs->service_buckets() != nullptr) {
        r.service_buckets.assign(rs->service_buckets()->begin(), rs->service_buckets()->end());
      }
      r.service_sum_ns = rs->service_sum_ns();
      decode_buckets(rs->residence_index(), rs->residence_count(), &r.residence);
      r.residence_max_ns = rs->residence_max_ns();
      f.replicas.push_back(std::move(r));
    }
  }
  if (edges != nullptr) {
    for (const auto* es : *edges) {
      EdgeSideFigures e;
      e.edge = static_cast<int>(es->edge());
      e.replica = static_cast<int>(es->replica());
      e.producer = es->producer();
      e.sent = es->sent();
      e.dropped = es->dropped();
      e.too_large = es->too_large();
      e.delivered = es->delivered();
      e.refused = es->refused();
      e.peak_in_flight = es->peak_in_flight();
      e.peak_retained = es->peak_retained();
      e.replayed = es->replayed();
      decode_buckets(es->hop_index(), es->hop_count(), &e.hops);
      e.hop_max_ns = es->hop_max_ns();
      decode_buckets(es->held_index(), es->held_count(), &e.held);
      e.held_max_ns = es->held_max_ns();
      f.edges.push_back(e);
    }
  }
  return f;
}

void merge_unit_figures(RunState& run, LiveFigures& live, int unit, const schema::UnitFigures& figures) {
  const auto table = run.table();
  live.take(decode_figures(unit, figures.incarnation(), figures.replicas(), figures.edges()), table->unit_of,
            edge_ends(run), run.drained_hosts());
  apply_changes(run, *table, live.changes());
  take_transport(run, unit, figures.transport());
}

void merge_unit_done(RunState& run, LiveFigures& live, int unit, const schema::UnitDone& done) {
  const auto table = run.table();
  live.take(decode_figures(unit, 0, done.replicas(), done.edges()), table->unit_of, edge_ends(run),
            run.drained_hosts());
  apply_changes(run, *table, live.changes());
  take_transport(run, unit, done.transport());
  if (!done.ok()) run.fail(done.error() != nullptr ? done.error()->str() : "unit " + std::to_string(unit) + " failed");
}

}  // namespace swarmflow::runtime
