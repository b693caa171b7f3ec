#include "runtime/report_builder.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <cmath>
#include <limits>

#include "runtime/run_state.hpp"

namespace swarmflow::runtime {

namespace {

/// Every consensus.vote stage's figures, from its counters; its added
/// latency histogram (`vote_latency_le_<ns>`, `vote_latency_le_inf`) is
/// read into percentiles and leaves the stage's counters.
void add_consensus(RunReport& r) {
  const std::string prefix = "vote_latency_le_";
  for (auto& s : r.stages) {
    if (s.type != "consensus.vote") continue;
    ConsensusReport c;
    c.stage = s.id;
    auto get = [&](const char* name) {
      auto it = s.counters.find(name);
      return it == s.counters.end() ? std::uint64_t{0} : static_cast<std::uint64_t>(std::max<std::int64_t>(0, it->second));
    };
    c.decisions = get("decisions");
    c.wrong = get("wrong");
    c.checked = get("checked");
    c.without_quorum = get("without_quorum");
    c.corrections = get("corrections");
    c.fast = get("fast");
    c.leader_changes = get("leader_changes");
    c.late_votes = get("late_votes");
    std::vector<std::pair<double, std::uint64_t>> buckets;  // (bound in ms, count)
    for (auto it = s.counters.begin(); it != s.counters.end();) {
      if (it->first.rfind(prefix, 0) != 0) {
        ++it;
        continue;
      }
      const std::string bound = it->first.substr(prefix.size());
      double ms = std::numeric_limits<double>::infinity();
      if (bound != "inf") {
        try {
          ms = std::stod(bound) / 1e6;
        } catch (const std::exception&) {
          ms = std::numeric_limits<double>::infinity();
        }
      }
      if (it->second > 0) buckets.emplace_back(ms, static_cast<std::uint64_t>(it->second));
      it = s.counters.erase(it);
    }
    std::sort(buckets.begin(), buckets.end());
    std::uint64_t total = 0;
    for (const auto& b : buckets) total += b.second;
    auto percentile = [&](double q) {
      if (total == 0) return 0.0;
      const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total)));
      std::uint64_t seen = 0;
      double last_finite = 0;
      for (const auto& [ms, n] : buckets) {
        seen += n;
        if (std::isfinite(ms)) last_finite = ms;
        if (seen >= rank) return std::isfinite(ms) ? ms : last_finite;
      }
      return last_finite;
    };
    c.added_latency_p50_ms = percentile(0.5);
    c.added_latency_p99_ms = percentile(0.99);
    r.consensus.push_back(std::move(c));
  }
}

}  // namespace

RunReport build_report(const RunState& run) {
  const auto table = run.table();
  RunReport r;
  r.pipeline = run.spec.name;
  r.ok = run.ok();
  r.error = run.error();
  r.finished = run.finished();
  const std::int64_t end = r.finished ? run.end_ns.load() : steady_now_ns();
  const std::int64_t start = run.start_ns.load();
  r.duration_s = start > 0 ? static_cast<double>(end - start) / 1e9 : 0.0;
  const graph::Graph& g = run.graph;
  for (const auto& node : g.nodes) {
    StageReport s;
    s.id = node.decl->id;
    s.type = node.decl->type;
    s.replicas = node.decl->replicas;
    s.sink = node.out_edges.empty();
    metrics::LatencyHistogram latency;
    metrics::LatencyHistogram residence;
    for (const auto& stats : run.replica_stats[static_cast<std::size_t>(node.index)]) {
      residence.merge(stats->residence.snapshot());
      s.processed += stats->processed.load(std::memory_order_relaxed);
      s.errors += stats->errors.load(std::memory_order_relaxed);
      s.restarts += stats->restarts.load(std::memory_order_relaxed);
      s.dead_letters += stats->dead_letters.load(std::memory_order_relaxed);
      s.queued += stats->queued.load(std::memory_order_relaxed);
      s.queue_peak = std::max<std::uint64_t>(s.queue_peak, stats->queue_peak.load(std::memory_order_relaxed));
      for (const auto& [name, value] : stats->counters()) s.counters[name] += value;
      latency.merge(stats->latency());
    }
    s.latency = latency.summary();
    for (double bound : kServiceBucketsS) {
      s.latency_le.push_back(latency.count_at_most(static_cast<std::int64_t>(bound * 1e9)));
    }
    s.latency_sum_s = latency.sum_ns() / 1e9;
    s.residence = residence.summary();
    for (double bound : kServiceBucketsS) {
      s.residence_le.push_back(residence.count_at_most(static_cast<std::int64_t>(bound * 1e9)));
    }
    s.residence_sum_s = residence.sum_ns() / 1e9;
    r.stages.push_back(std::move(s));
  }
  for (const auto& edge : g.edges) {
    EdgeReport e;
    e.from = g.from_name(edge);
    e.to = g.to_name(edge);
    e.overflow = config::to_string(edge.overflow);
    for (const auto& side : run.edge_out[static_cast<std::size_t>(edge.id)]) {
      e.sent += side->sent.load(std::memory_order_relaxed);
      e.dropped += side->dropped.load(std::memory_order_relaxed);
      e.too_large += side->too_large.load(std::memory_order_relaxed);
      e.waiting += side->waiting.load(std::memory_order_relaxed);
      e.peak_in_flight = std::max<std::uint64_t>(e.peak_in_flight, side->peak_in_flight.load(std::memory_order_relaxed));
      e.peak_retained = std::max<std::uint64_t>(e.peak_retained, side->peak_retained.load(std::memory_order_relaxed));
      e.replayed += side->replayed.load(std::memory_order_relaxed);
    }
    metrics::LatencyHistogram hops;
    metrics::LatencyHistogram held;
    for (const auto& side : run.edge_in[static_cast<std::size_t>(edge.id)]) {
      hops.merge(side->hops.snapshot());
      held.merge(side->held.snapshot());
      e.delivered += side->delivered.load(std::memory_order_relaxed);
      e.refused += side->refused.load(std::memory_order_relaxed);
    }
    e.dropped += e.refused;
    e.latency = hops.summary();
    for (double bound : kServiceBucketsS) e.latency_le.push_back(hops.count_at_most(static_cast<std::int64_t>(bound * 1e9)));
    e.latency_sum_s = hops.sum_ns() / 1e9;
    e.held = held.summary();
    for (double bound : kServiceBucketsS) e.held_le.push_back(held.count_at_most(static_cast<std::int64_t>(bound * 1e9)));
    e.held_sum_s = held.sum_ns() / 1e9;
    r.edges.push_back(std::move(e));
  }
  for (std::size_t u = 0; u < run.spec.units.size(); ++u) {
    UnitReport unit;
    unit.id = run.spec.units[u].id;
    unit.replicas = table->replicas_on(static_cast<int>(u));
    const UnitLoad load = run.load(static_cast<int>(u));
    unit.load_reports = load.reports;
    unit.utilisation = load.utilisation;
    if (u < run.unit_speed.size() && run.unit_speed[u]) unit.speed = run.unit_speed[u]->load(std::memory_order_relaxed);
    if (u < run.clock_delay_ns.size()) {
      const std::int64_t delay = run.clock_delay_ns[u]->load(std::memory_order_relaxed);
      unit.clock_known = delay >= 0;
      unit.clock_offset_ms = unit.clock_known ? static_cast<double>(run.clock_offset_ns[u]->load()) / 1e6 : 0.0;
      unit.clock_error_ms = unit.clock_known ? static_cast<double>(delay) / 2e6 : 0.0;
    }
    if (u < run.transports.size() && run.transports[u]) {
      const auto& c = run.transports[u]->counters();
      unit.sent = c.sent.load();
      unit.received = c.received.load();
      unit.rejected = c.rejected_total();
      unit.unknown_peer = c.unknown_peer.load();
      unit.send_failed = c.send_failed.load();
      unit.refused_handshakes = c.auth_refused.load();
      for (std::size_t i = 1; i < c.rejected.size(); ++i) {
        const auto n = c.rejected[i].load();
        if (n > 0) unit.rejected_by_reason[transport::to_string(static_cast<transport::Rejection>(i))] = n;
      }
    } else if (auto remote = run.remote_transport(static_cast<int>(u))) {
      unit.sent = remote->sent;
      unit.received = remote->received;
      unit.unknown_peer = remote->unknown_peer;
      unit.send_failed = remote->send_failed;
      unit.refused_handshakes = remote->refused_handshakes;
      for (std::size_t i = 1; i < remote->rejected.size(); ++i) {
        unit.rejected += remote->rejected[i];
        if (remote->rejected[i] > 0) {
          unit.rejected_by_reason[transport::to_string(static_cast<transport::Rejection>(i))] = remote->rejected[i];
        }
      }
    }
    r.units.push_back(std::move(unit));
  }
  for (const auto& node : g.nodes) {
    const auto n = static_cast<std::size_t>(node.index);
    for (std::size_t i = 0; i < run.replica_stats[n].size(); ++i) {
      const ReplicaStats& stats = *run.replica_stats[n][i];
      ReplicaReport rr;
      rr.stage = node.decl->id;
      rr.replica = static_cast<int>(i);
      const int u = table->unit(node.index, static_cast<int>(i));
      if (u >= 0 && static_cast<std::size_t>(u) < run.spec.units.size()) rr.unit = run.spec.units[static_cast<std::size_t>(u)].id;
      rr.processed = stats.processed.load(std::memory_order_relaxed);
      rr.errors = stats.errors.load(std::memory_order_relaxed);
      rr.restarts = stats.restarts.load(std::memory_order_relaxed);
      rr.dead_letters = stats.dead_letters.load(std::memory_order_relaxed);
      rr.queued = stats.queued.load(std::memory_order_relaxed);
      for (const auto& b : stats.service_buckets) rr.service_buckets.push_back(b.load(std::memory_order_relaxed));
      rr.service_sum_s = static_cast<double>(stats.service_sum_ns.load(std::memory_order_relaxed)) / 1e9;
      r.replicas.push_back(std::move(rr));
    }
  }
  r.failovers = run.failovers();
  r.moves = run.moves();
  // Each failover's replays and duplicates, counted by the replicas as
  // failover.<epoch>.replayed / .duplicates, go to that failover.
  for (auto& s : r.stages) {
    for (auto it = s.counters.begin(); it != s.counters.end();) {
      const std::string& name = it->first;
      if (name.rfind("failover.", 0) != 0) {
        ++it;
        continue;
      }
      const auto dot = name.find('.', 9);
      const std::string what = dot == std::string::npos ? "" : name.substr(dot + 1);
      std::uint32_t epoch = 0;
      try {
        epoch = static_cast<std::uint32_t>(std::stoul(name.substr(9, dot - 9)));
      } catch (const std::exception&) {
        epoch = 0;
      }
      for (auto& f : r.failovers) {
        if (f.epoch != epoch) continue;
        if (what == "replayed") f.replayed += static_cast<std::uint64_t>(it->second);
        if (what == "duplicates") f.duplicates_dropped += static_cast<std::uint64_t>(it->second);
      }
      it = s.counters.erase(it);
    }
  }
  // Histograms the stages keep (StageContext::observe) are counters
  // hist.<name>.<bucket> and hist.<name>.sum_milli.
  for (auto& s : r.stages) {
    std::map<std::string, std::pair<std::map<int, std::uint64_t>, double>> found;
    for (auto it = s.counters.begin(); it != s.counters.end();) {
      const std::string& name = it->first;
      const auto dot = name.rfind('.');
      if (name.rfind("hist.", 0) != 0 || dot == std::string::npos || dot <= 5) {
        ++it;
        continue;
      }
      auto& [counts, sum] = found[name.substr(5, dot - 5)];
      const std::string what = name.substr(dot + 1);
      if (what == "sum_milli") {
        sum += static_cast<double>(it->second) / 1000.0;
      } else {
        try {
          counts[std::stoi(what)] += static_cast<std::uint64_t>(std::max<std::int64_t>(it->second, 0));
        } catch (const std::exception&) {
          ++it;
          continue;
        }
      }
      it = s.counters.erase(it);
    }
    for (const auto& [name, h] : found) s.histograms[name] = value_buckets::summarize(h.first, h.second);
  }
  add_consensus(r);
  return r;
}

/// Hands verified inbound messages to the local replicas they are for. It
/// lives on one unit's transport thread: envelopes received in one burst go

}  // namespace swarmflow::runtime
