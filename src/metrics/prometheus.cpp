// The run's figures in the Prometheus text format (see prometheus.hpp).

#include "metrics/prometheus.hpp"

#include <cinttypes>
#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace swarmflow::metrics {

std::string escape_label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c; break;
    }
  }
  return out;
}

namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

/// Builds the exposition one family at a time.
class Writer {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(const std::string& name, const Labels& labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      for (std::size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) out_ += ',';
        out_ += labels[i].first;
        out_ += "=\"";
        out_ += escape_label(labels[i].second);
        out_ += '"';
      }
      out_ += '}';
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, " %.17g\n", value);
    out_ += buf;
  }
  void sample(const std::string& name, const Labels& labels, std::uint64_t value) {
    sample(name, labels, static_cast<double>(value));
  }
  /// A histogram's _bucket (cumulative, `le`), _sum and _count samples.
  void histogram(const std::string& name, Labels labels, const std::vector<std::uint64_t>& cumulative,
                 std::uint64_t count, double sum) {
    for (std::size_t b = 0; b < cumulative.size() && b < static_cast<std::size_t>(kServiceBuckets); ++b) {
      char le[32];
      std::snprintf(le, sizeof le, "%g", kServiceBucketsS[b]);
      Labels with = labels;
      with.emplace_back("le", le);
      sample(name + "_bucket", with, cumulative[b]);
    }
    Labels inf = labels;
    inf.emplace_back("le", "+Inf");
    sample(name + "_bucket", inf, count);
    sample(name + "_sum", labels, sum);
    sample(name + "_count", labels, count);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

Labels edge_labels(const EdgeReport& e) { return {{"edge", e.from + " -> " + e.to}, {"from", e.from}, {"to", e.to}}; }

Labels replica_labels(const ReplicaReport& r) {
  return {{"stage", r.stage}, {"replica", std::to_string(r.replica)}, {"unit", r.unit}};
}

}  // namespace

std::string to_prometheus(const RunReport& r) {
  Writer w;
  const Labels pipeline = {{"pipeline", r.pipeline}};

  w.family("swarmflow_run_duration_seconds", "gauge", "Seconds since the run started.");
  w.sample("swarmflow_run_duration_seconds", pipeline, r.duration_s);

  w.family("swarmflow_edge_sent_total", "counter", "Envelopes sent on an edge.");
  for (const auto& e : r.edges) w.sample("swarmflow_edge_sent_total", edge_labels(e), e.sent);
  w.family("swarmflow_edge_delivered_total", "counter", "Envelopes delivered on an edge.");
  for (const auto& e : r.edges) w.sample("swarmflow_edge_delivered_total", edge_labels(e), e.delivered);
  w.family("swarmflow_edge_dropped_total", "counter",
           "Envelopes dropped on an edge, by reason: overflow (the edge's policy, or a live source without credit), "
           "too_large (over transport.max_message_bytes), refused (the consumer's unit refused the payload).");
  for (const auto& e : r.edges) {
    const std::uint64_t overflow = e.dropped >= e.too_large + e.refused ? e.dropped - e.too_large - e.refused : 0;
    for (const auto& [reason, n] : {std::pair<const char*, std::uint64_t>{"overflow", overflow},
                                    {"too_large", e.too_large},
                                    {"refused", e.refused}}) {
      Labels l = edge_labels(e);
      l.emplace_back("reason", reason);
      w.sample("swarmflow_edge_dropped_total", l, n);
    }
  }
  w.family("swarmflow_edge_replayed_total", "counter",
           "Envelopes sent again to a consumer replica placed anew after a failover.");
  for (const auto& e : r.edges) w.sample("swarmflow_edge_replayed_total", edge_labels(e), e.replayed);

  w.family("swarmflow_replica_queue_depth", "gauge", "Envelopes waiting at a replica.");
  for (const auto& x : r.replicas) w.sample("swarmflow_replica_queue_depth", replica_labels(x), x.queued);
  w.family("swarmflow_replica_processed_total", "counter", "Envelopes a replica processed.");
  for (const auto& x : r.replicas) w.sample("swarmflow_replica_processed_total", replica_labels(x), x.processed);
  w.family("swarmflow_replica_errors_total", "counter", "Steps of a replica that failed or threw.");
  for (const auto& x : r.replicas) w.sample("swarmflow_replica_errors_total", replica_labels(x), x.errors);
  w.family("swarmflow_replica_restarts_total", "counter", "Restarts of a replica's stage.");
  for (const auto& x : r.replicas) w.sample("swarmflow_replica_restarts_total", replica_labels(x), x.restarts);
  w.family("swarmflow_replica_dead_letters_total", "counter", "Envelopes a replica gave up after repeated failures.");
  for (const auto& x : r.replicas) w.sample("swarmflow_replica_dead_letters_total", replica_labels(x), x.dead_letters);

  w.family("swarmflow_stage_service_seconds", "histogram", "Time a replica's stage took per step.");
  for (const auto& x : r.replicas) {
    std::vector<std::uint64_t> cumulative;
    std::uint64_t n = 0;
    for (std::size_t b = 0; b + 1 < x.service_buckets.size(); ++b) cumulative.push_back(n += x.service_buckets[b]);
    if (!x.service_buckets.empty()) n += x.service_buckets.back();
    w.histogram("swarmflow_stage_service_seconds", replica_labels(x), cumulative, n, x.service_sum_s);
  }

  w.family("swarmflow_sink_latency_seconds", "histogram",
           "Capture-to-completion latency of what reached a sink (a stage that feeds no other).");
  for (const auto& s : r.stages) {
    if (!s.sink) continue;
    w.histogram("swarmflow_sink_latency_seconds", {{"stage", s.id}}, s.latency_le, s.latency.count, s.latency_sum_s);
  }

  w.family("swarmflow_stage_residence_seconds", "histogram",
           "Time from an envelope's arrival at a stage's replica to the end of its step (queue wait and service).");
  for (const auto& s : r.stages) {
    w.histogram("swarmflow_stage_residence_seconds", {{"stage", s.id}}, s.residence_le, s.residence.count,
                s.residence_sum_s);
  }
  w.family("swarmflow_edge_latency_seconds", "histogram",
           "Time from the moment an envelope left the producer (after any wait for credit) to its arrival at the "
           "consumer; across processes, corrected by their clock offset.");
  for (const auto& e : r.edges) {
    w.histogram("swarmflow_edge_latency_seconds", edge_labels(e), e.latency_le, e.latency.count, e.latency_sum_s);
  }
  w.family("swarmflow_edge_held_seconds", "histogram",
           "Time from an envelope's arrival at the producer (its capture, at a source) to the moment it left it on "
           "the edge: the producer's queue, step and wait for credit.");
  for (const auto& e : r.edges) {
    w.histogram("swarmflow_edge_held_seconds", edge_labels(e), e.held_le, e.held.count, e.held_sum_s);
  }

  w.family("swarmflow_unit_utilization", "gauge", "Busy fraction of a unit's worker threads in its last load report.");
  for (const auto& u : r.units) w.sample("swarmflow_unit_utilization", {{"unit", u.id}}, u.utilisation);
  w.family("swarmflow_unit_clock_offset_seconds", "gauge",
           "The coordinator's steady clock minus that of a unit's process, as heartbeats measured it.");
  for (const auto& u : r.units) {
    if (u.clock_known) w.sample("swarmflow_unit_clock_offset_seconds", {{"unit", u.id}}, u.clock_offset_ms / 1e3);
  }
  w.family("swarmflow_unit_clock_error_seconds", "gauge",
           "How far off a unit's clock offset may be: half the round trip it was measured with.");
  for (const auto& u : r.units) {
    if (u.clock_known) w.sample("swarmflow_unit_clock_error_seconds", {{"unit", u.id}}, u.clock_error_ms / 1e3);
  }
  w.family("swarmflow_unit_replicas", "gauge", "Replicas a unit hosts by the placement in force.");
  for (const auto& u : r.units) w.sample("swarmflow_unit_replicas", {{"unit", u.id}}, static_cast<std::uint64_t>(u.replicas));
  w.family("swarmflow_transport_rejected_total", "counter",
           "Messages a unit's transport dropped at verification, by reason.");
  for (const auto& u : r.units) {
    for (const auto& [reason, n] : u.rejected_by_reason) {
      w.sample("swarmflow_transport_rejected_total", {{"unit", u.id}, {"reason", reason}}, n);
    }
    if (u.unknown_peer > 0) w.sample("swarmflow_transport_rejected_total", {{"unit", u.id}, {"reason", "unknown_peer"}}, u.unknown_peer);
    if (u.refused_handshakes > 0) {
      w.sample("swarmflow_transport_rejected_total", {{"unit", u.id}, {"reason", "handshake"}}, u.refused_handshakes);
    }
  }

  // The stages' own histograms (StageContext::observe), as summaries; the
  // token generators' TTFT and TPOT in seconds besides.
  auto summary = [&w](const std::string& name, Labels labels, const ValueSummary& v, double per_unit) {
    for (const auto& [q, value] : {std::pair<const char*, double>{"0.5", v.p50}, {"0.99", v.p99}}) {
      Labels with = labels;
      with.emplace_back("quantile", q);
      w.sample(name, with, value / per_unit);
    }
    w.sample(name + "_sum", labels, v.mean * static_cast<double>(v.count) / per_unit);
    w.sample(name + "_count", labels, v.count);
  };
  w.family("swarmflow_stage_observed", "summary",
           "A stage's own histogram (StageContext::observe), in the unit the stage records it in, by name.");
  for (const auto& st : r.stages) {
    for (const auto& [name, v] : st.histograms) summary("swarmflow_stage_observed", {{"stage", st.id}, {"name", name}}, v, 1.0);
  }
  // One family at a time: each family's samples follow its HELP and TYPE.
  const char* generator_families[][3] = {
      {"swarmflow_generate_ttft_seconds", "ttft_ms",
       "Time to first token of an lm.generate stage's requests, from their arrival at it."},
      {"swarmflow_generate_tpot_seconds", "tpot_ms",
       "Time per output token of an lm.generate stage's requests (the mean gap between a request's tokens)."},
  };
  for (const auto& f : generator_families) {
    w.family(f[0], "summary", f[2]);
    for (const auto& st : r.stages) {
      if (st.type != "lm.generate") continue;
      if (auto it = st.histograms.find(f[1]); it != st.histograms.end()) summary(f[0], {{"stage", st.id}}, it->second, 1000.0);
    }
  }
  w.family("swarmflow_generate_tokens_total", "counter", "Tokens an lm.generate stage generated.");
  for (const auto& st : r.stages) {
    if (st.type != "lm.generate") continue;
    auto tokens = st.counters.find("tokens");
    w.sample("swarmflow_generate_tokens_total", {{"stage", st.id}},
             static_cast<std::uint64_t>(tokens != st.counters.end() ? std::max<std::int64_t>(tokens->second, 0) : 0));
  }

  w.family("swarmflow_failovers_total", "counter", "Units whose replicas were placed anew, by cause (dead, left).");
  std::uint64_t dead = 0;
  std::uint64_t left = 0;
  for (const auto& f : r.failovers) (f.cause == "left" ? left : dead) += 1;
  w.sample("swarmflow_failovers_total", {{"cause", "dead"}}, dead);
  w.sample("swarmflow_failovers_total", {{"cause", "left"}}, left);
  w.family("swarmflow_moves_total", "counter",
           "Changes of placement made while the run went on, by kind (move: a replica to another unit; keys: keys to "
           "other replicas).");
  std::uint64_t moved = 0;
  std::uint64_t keys = 0;
  for (const auto& m : r.moves) (m.kind == "keys" ? keys : moved) += 1;
  w.sample("swarmflow_moves_total", {{"kind", "move"}}, moved);
  w.sample("swarmflow_moves_total", {{"kind", "keys"}}, keys);
  return w.take();
}

}  // namespace swarmflow::metrics
