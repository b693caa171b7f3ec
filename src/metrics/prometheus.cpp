// The run's figures in the Prometheus text format (see prometheus.hpp).

#include "metrics/prometheus.hpp"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

namespace swarmflow::metrics {

namespace {

/// Appends `value` escaped as a label value.
void append_escaped(std::string& out, const std::string& value) {
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c; break;
    }
  }
}

}  // namespace

std::string escape_label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  append_escaped(out, value);
  return out;
}

namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

/// The `le` label of each of kServiceBucketsS, as "%g" writes it ("1e-05", "0.005", "5").
struct LeLabels {
  std::string le[kServiceBuckets];
  LeLabels() {
    for (int b = 0; b < kServiceBuckets; ++b) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "le=\"%g\"", kServiceBucketsS[b]);
      le[b] = buf;
    }
  }
};

/// Builds the exposition one family at a time, straight into one string:
/// labels are rendered once per series, numbers with std::to_chars.
class Writer {
 public:
  Writer() { out_.reserve(16384); }
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
  /// `labels` as `a="x",b="y"` (escaped), for line().
  static std::string render(const Labels& labels) {
    std::string out;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out += ',';
      out += labels[i].first;
      out += "=\"";
      append_escaped(out, labels[i].second);
      out += '"';
    }
    return out;
  }
  /// One sample: name + suffix, the rendered labels and one more label (either may be empty), the value.
  template <class V>
  void line(std::string_view name, std::string_view suffix, std::string_view labels, std::string_view more, V value) {
    out_ += name;
    out_ += suffix;
    if (!labels.empty() || !more.empty()) {
      out_ += '{';
      out_ += labels;
      if (!labels.empty() && !more.empty()) out_ += ',';
      out_ += more;
      out_ += '}';
    }
    out_ += ' ';
    number(value);
    out_ += '\n';
  }
  void sample(std::string_view name, const Labels& labels, double value) { line(name, {}, render(labels), {}, value); }
  void sample(std::string_view name, const Labels& labels, std::uint64_t value) {
    line(name, {}, render(labels), {}, value);
  }
  /// A histogram's _bucket (cumulative, `le`), _sum and _count samples.
  void histogram(std::string_view name, const Labels& labels, const std::vector<std::uint64_t>& cumulative,
                 std::uint64_t count, double sum) {
    histogram(name, render(labels), cumulative, count, sum);
  }
  /// The same with labels rendered (render()).
  void histogram(std::string_view name, const std::string& rendered, const std::vector<std::uint64_t>& cumulative,
                 std::uint64_t count, double sum) {
    static const LeLabels les;
    for (std::size_t b = 0; b < cumulative.size() && b < static_cast<std::size_t>(kServiceBuckets); ++b) {
      line(name, "_bucket", rendered, les.le[b], cumulative[b]);
    }
    line(name, "_bucket", rendered, "le=\"+Inf\"", count);
    line(name, "_sum", rendered, {}, sum);
    line(name, "_count", rendered, {}, count);
  }
  std::string take() { return std::move(out_); }

 private:
  void number(std::uint64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
  }
  /// The shortest text that reads back as `v`; the text format's +Inf, -Inf and NaN.
  void number(double v) {
    if (std::isnan(v)) {
      out_ += "NaN";
    } else if (std::isinf(v)) {
      out_ += v > 0 ? "+Inf" : "-Inf";
    } else {
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, v);
      out_.append(buf, r.ptr);
    }
  }

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
  // Each edge's and replica's labels, rendered once for all their families.
  std::vector<std::string> edge;
  for (const auto& e : r.edges) edge.push_back(Writer::render(edge_labels(e)));
  std::vector<std::string> replica;
  for (const auto& x : r.replicas) replica.push_back(Writer::render(replica_labels(x)));

  w.family("swarmflow_run_duration_seconds", "gauge", "Seconds since the run started.");
  w.sample("swarmflow_run_duration_seconds", pipeline, r.duration_s);

  w.family("swarmflow_edge_sent_total", "counter", "Envelopes sent on an edge.");
  for (std::size_t i = 0; i < r.edges.size(); ++i) w.line("swarmflow_edge_sent_total", {}, edge[i], {}, r.edges[i].sent);
  w.family("swarmflow_edge_delivered_total", "counter", "Envelopes delivered on an edge.");
  for (std::size_t i = 0; i < r.edges.size(); ++i) w.line("swarmflow_edge_delivered_total", {}, edge[i], {}, r.edges[i].delivered);
  w.family("swarmflow_edge_dropped_total", "counter",
           "Envelopes dropped on an edge, by reason: overflow (the edge's policy, or a live source without credit), "
           "too_large (over transport.max_message_bytes), refused (the consumer's unit refused the payload).");
  for (std::size_t i = 0; i < r.edges.size(); ++i) {
    const EdgeReport& e = r.edges[i];
    const std::uint64_t overflow = e.dropped >= e.too_large + e.refused ? e.dropped - e.too_large - e.refused : 0;
    w.line("swarmflow_edge_dropped_total", {}, edge[i], "reason=\"overflow\"", overflow);
    w.line("swarmflow_edge_dropped_total", {}, edge[i], "reason=\"too_large\"", e.too_large);
    w.line("swarmflow_edge_dropped_total", {}, edge[i], "reason=\"refused\"", e.refused);
  }
  w.family("swarmflow_edge_replayed_total", "counter",
           "Envelopes sent again to a consumer replica placed anew after a failover.");
  for (std::size_t i = 0; i < r.edges.size(); ++i) w.line("swarmflow_edge_replayed_total", {}, edge[i], {}, r.edges[i].replayed);

  w.family("swarmflow_replica_queue_depth", "gauge", "Envelopes waiting at a replica.");
  for (std::size_t i = 0; i < r.replicas.size(); ++i) w.line("swarmflow_replica_queue_depth", {}, replica[i], {}, r.replicas[i].queued);
  w.family("swarmflow_replica_processed_total", "counter", "Envelopes a replica processed.");
  for (std::size_t i = 0; i < r.replicas.size(); ++i) w.line("swarmflow_replica_processed_total", {}, replica[i], {}, r.replicas[i].processed);
  w.family("swarmflow_replica_errors_total", "counter", "Steps of a replica that failed or threw.");
  for (std::size_t i = 0; i < r.replicas.size(); ++i) w.line("swarmflow_replica_errors_total", {}, replica[i], {}, r.replicas[i].errors);
  w.family("swarmflow_replica_restarts_total", "counter", "Restarts of a replica's stage.");
  for (std::size_t i = 0; i < r.replicas.size(); ++i) w.line("swarmflow_replica_restarts_total", {}, replica[i], {}, r.replicas[i].restarts);
  w.family("swarmflow_replica_dead_letters_total", "counter", "Envelopes a replica gave up after repeated failures.");
  for (std::size_t i = 0; i < r.replicas.size(); ++i) w.line("swarmflow_replica_dead_letters_total", {}, replica[i], {}, r.replicas[i].dead_letters);

  w.family("swarmflow_stage_service_seconds", "histogram", "Time a replica's stage took per step.");
  for (std::size_t i = 0; i < r.replicas.size(); ++i) {
    const ReplicaReport& x = r.replicas[i];
    std::vector<std::uint64_t> cumulative;
    std::uint64_t n = 0;
    for (std::size_t b = 0; b + 1 < x.service_buckets.size(); ++b) cumulative.push_back(n += x.service_buckets[b]);
    if (!x.service_buckets.empty()) n += x.service_buckets.back();
    w.histogram("swarmflow_stage_service_seconds", replica[i], cumulative, n, x.service_sum_s);
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
  for (std::size_t i = 0; i < r.edges.size(); ++i) {
    const EdgeReport& e = r.edges[i];
    w.histogram("swarmflow_edge_latency_seconds", edge[i], e.latency_le, e.latency.count, e.latency_sum_s);
  }
  w.family("swarmflow_edge_held_seconds", "histogram",
           "Time from an envelope's arrival at the producer (its capture, at a source) to the moment it left it on "
           "the edge: the producer's queue, step and wait for credit.");
  for (std::size_t i = 0; i < r.edges.size(); ++i) {
    const EdgeReport& e = r.edges[i];
    w.histogram("swarmflow_edge_held_seconds", edge[i], e.held_le, e.held.count, e.held_sum_s);
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
  auto summary = [&w](const std::string& name, const Labels& labels, const ValueSummary& v, double per_unit) {
    const std::string rendered = Writer::render(labels);
    w.line(name, {}, rendered, "quantile=\"0.5\"", v.p50 / per_unit);
    w.line(name, {}, rendered, "quantile=\"0.99\"", v.p99 / per_unit);
    w.line(name, "_sum", rendered, {}, v.mean * static_cast<double>(v.count) / per_unit);
    w.line(name, "_count", rendered, {}, v.count);
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
