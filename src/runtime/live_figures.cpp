#include "runtime/live_figures.hpp"

#include <algorithm>

namespace swarmflow::runtime {
namespace {

bool hosts(const std::vector<std::vector<int>>& unit_of, int node, int replica, int unit) {
  if (node < 0 || static_cast<std::size_t>(node) >= unit_of.size()) return false;
  const auto& replicas = unit_of[static_cast<std::size_t>(node)];
  return replica >= 0 && static_cast<std::size_t>(replica) < replicas.size() &&
         replicas[static_cast<std::size_t>(replica)] == unit;
}

/// `total` - `applied`, bucket by bucket, for a histogram: it only grows,
/// so buckets are added, never taken back.
void subtract_buckets(std::map<int, std::uint64_t>& total, const std::map<int, std::uint64_t>& applied) {
  for (auto it = total.begin(); it != total.end();) {
    auto old = applied.find(it->first);
    const std::uint64_t before = old == applied.end() ? 0 : old->second;
    if (it->second > before) {
      it->second -= before;
      ++it;
    } else {
      it = total.erase(it);
    }
  }
}

void add_buckets(std::map<int, std::uint64_t>& to, const std::map<int, std::uint64_t>& from) {
  for (const auto& [bucket, count] : from) to[bucket] += count;
}

/// `total` - `applied` for counters (wrapping), `total` for gauges and peaks.
ReplicaFigures difference(const ReplicaFigures& total, const ReplicaFigures& applied) {
  ReplicaFigures d = total;
  d.processed = total.processed - applied.processed;
  d.errors = total.errors - applied.errors;
  d.restarts = total.restarts - applied.restarts;
  d.dead_letters = total.dead_letters - applied.dead_letters;
  for (auto& [name, value] : d.counters) {
    auto it = applied.counters.find(name);
    if (it != applied.counters.end()) value -= it->second;
  }
  for (const auto& [name, value] : applied.counters) {
    if (total.counters.count(name) == 0) d.counters[name] = -value;
  }
  subtract_buckets(d.latency, applied.latency);
  subtract_buckets(d.residence, applied.residence);
  for (std::size_t b = 0; b < d.service_buckets.size(); ++b) {
    if (b < applied.service_buckets.size()) d.service_buckets[b] -= applied.service_buckets[b];
  }
  d.service_sum_ns = total.service_sum_ns - applied.service_sum_ns;
  return d;
}

EdgeSideFigures difference(const EdgeSideFigures& total, const EdgeSideFigures& applied) {
  EdgeSideFigures d = total;
  d.sent = total.sent - applied.sent;
  d.dropped = total.dropped - applied.dropped;
  d.too_large = total.too_large - applied.too_large;
  d.delivered = total.delivered - applied.delivered;
  d.refused = total.refused - applied.refused;
  d.replayed = total.replayed - applied.replayed;
  subtract_buckets(d.hops, applied.hops);
  subtract_buckets(d.held, applied.held);
  return d;
}

}  // namespace

void LiveFigures::take(const UnitFigures& f, const std::vector<std::vector<int>>& unit_of,
                       const std::vector<std::pair<int, int>>& edge_ends,
                       const std::vector<std::tuple<int, int, int>>& drained_on) {
  const auto hosted = [&](int node, int replica) {
    return hosts(unit_of, node, replica, f.unit) ||
           std::find(drained_on.begin(), drained_on.end(), std::make_tuple(node, replica, f.unit)) != drained_on.end();
  };
  std::uint64_t incarnation = f.incarnation;
  if (incarnation == 0) {
    auto it = incarnation_.find(f.unit);
    if (it != incarnation_.end()) incarnation = it->second;
  } else {
    incarnation_[f.unit] = incarnation;
  }
  const auto place = [&](auto& hosted, const auto& figures, int node, int replica) {
    for (std::size_t i = 0; i < hosted.hosts.size(); ++i) {
      auto& [host, kept] = hosted.hosts[i];
      // One process keeps one replica's figures whichever of its units hosts
      // it: a move between two of its units is the same host.
      if (host.incarnation == incarnation && (host.unit == f.unit || incarnation != 0)) {
        if (host.unit != f.unit) {
          host.unit = f.unit;
          host.carried = host.carried || carried_.count({node, replica, f.unit}) != 0;
        }
        kept = figures;
        hosted.latest = i;
        return;
      }
    }
    Host host{f.unit, incarnation, carried_.count({node, replica, f.unit}) != 0};
    hosted.hosts.emplace_back(host, figures);
    hosted.latest = hosted.hosts.size() - 1;
  };
  for (const auto& r : f.replicas) {
    if (!hosted(r.node, r.replica)) continue;
    const ReplicaKey key{r.node, r.replica};
    place(replicas_[key], r, r.node, r.replica);
    dirty_replicas_[key] = true;
  }
  for (const auto& e : f.edges) {
    if (e.edge < 0 || static_cast<std::size_t>(e.edge) >= edge_ends.size()) continue;
    const auto& ends = edge_ends[static_cast<std::size_t>(e.edge)];
    if (!hosted(e.producer ? ends.first : ends.second, e.replica)) continue;
    const EdgeKey key{e.edge, e.replica, e.producer};
    // Edge sides are never carried over: the node key only marks carried replicas.
    place(edges_[key], e, -1, -1);
    dirty_edges_[key] = true;
  }
}

void LiveFigures::carried_over(int node, int replica, int unit) {
  carried_[{node, replica, unit}] = true;
  auto it = replicas_.find({node, replica});
  if (it == replicas_.end()) return;
  for (auto& [host, figures] : it->second.hosts) {
    if (host.unit == unit) host.carried = true;
  }
  dirty_replicas_[{node, replica}] = true;
}

ReplicaFigures LiveFigures::replica_total(int node, int replica) const {
  ReplicaFigures t;
  t.node = node;
  t.replica = replica;
  auto it = replicas_.find({node, replica});
  if (it == replicas_.end()) return t;
  const auto& hosts = it->second.hosts;
  // The last host that started from a snapshot carries the processed count
  // and named counters of every host before it.
  std::size_t from = 0;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    if (hosts[i].first.carried) from = i;
  }
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const ReplicaFigures& f = hosts[i].second;
    if (i >= from) {
      t.processed += f.processed;
      for (const auto& [name, value] : f.counters) t.counters[name] += value;
    }
    t.errors += f.errors;
    t.restarts += f.restarts;
    t.dead_letters += f.dead_letters;
    t.queue_peak = std::max(t.queue_peak, f.queue_peak);
    add_buckets(t.latency, f.latency);
    add_buckets(t.residence, f.residence);
    t.residence_max_ns = std::max(t.residence_max_ns, f.residence_max_ns);
    t.latency_max_ns = std::max(t.latency_max_ns, f.latency_max_ns);
    if (t.service_buckets.size() < f.service_buckets.size()) t.service_buckets.resize(f.service_buckets.size());
    for (std::size_t b = 0; b < f.service_buckets.size(); ++b) t.service_buckets[b] += f.service_buckets[b];
    t.service_sum_ns += f.service_sum_ns;
  }
  t.queued = hosts[it->second.latest].second.queued;
  return t;
}

EdgeSideFigures LiveFigures::edge_total(int edge, int replica, bool producer) const {
  EdgeSideFigures t;
  t.edge = edge;
  t.replica = replica;
  t.producer = producer;
  auto it = edges_.find({edge, replica, producer});
  if (it == edges_.end()) return t;
  for (const auto& [host, f] : it->second.hosts) {
    t.sent += f.sent;
    t.dropped += f.dropped;
    t.too_large += f.too_large;
    t.delivered += f.delivered;
    t.refused += f.refused;
    t.replayed += f.replayed;
    t.peak_in_flight = std::max(t.peak_in_flight, f.peak_in_flight);
    t.peak_retained = std::max(t.peak_retained, f.peak_retained);
    add_buckets(t.hops, f.hops);
    t.hop_max_ns = std::max(t.hop_max_ns, f.hop_max_ns);
    add_buckets(t.held, f.held);
    t.held_max_ns = std::max(t.held_max_ns, f.held_max_ns);
  }
  return t;
}

FigureChanges LiveFigures::changes() {
  FigureChanges out;
  for (const auto& [key, dirty] : dirty_replicas_) {
    (void)dirty;
    const ReplicaFigures total = replica_total(key.first, key.second);
    ReplicaFigures& applied = applied_replicas_[key];
    out.replicas.push_back(difference(total, applied));
    applied = total;
  }
  for (const auto& [key, dirty] : dirty_edges_) {
    (void)dirty;
    const EdgeSideFigures total = edge_total(std::get<0>(key), std::get<1>(key), std::get<2>(key));
    EdgeSideFigures& applied = applied_edges_[key];
    out.edges.push_back(difference(total, applied));
    applied = total;
  }
  dirty_replicas_.clear();
  dirty_edges_.clear();
  return out;
}

}  // namespace swarmflow::runtime
