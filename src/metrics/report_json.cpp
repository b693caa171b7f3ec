#include <swarmflow/report.hpp>

#include <cstdio>

#include <nlohmann/json.hpp>

namespace swarmflow {

namespace {

using Json = nlohmann::ordered_json;

Json counters_json(const std::map<std::string, std::int64_t>& counters) {
  Json j = Json::object();
  for (const auto& [name, value] : counters) j[name] = value;
  return j;
}

std::int64_t counter_or(const StageReport& s, const std::string& name, std::int64_t fallback) {
  auto it = s.counters.find(name);
  return it == s.counters.end() ? fallback : it->second;
}

Json summary_json(const LatencySummary& l) {
  Json j = Json::object();
  j["count"] = l.count;
  j["p50"] = l.p50_ms;
  j["p99"] = l.p99_ms;
  j["p999"] = l.p999_ms;
  j["max"] = l.max_ms;
  return j;
}

Json stage_json(const StageReport& s) {
  Json j = Json::object();
  j["type"] = s.type;
  j["replicas"] = s.replicas;
  j["processed"] = s.processed;
  j["errors"] = s.errors;
  j["restarts"] = s.restarts;
  j["dead_letters"] = s.dead_letters;
  j["counters"] = counters_json(s.counters);
  j["queued"] = s.queued;
  j["residence_ms"] = summary_json(s.residence);
  if (!s.histograms.empty()) {
    Json h = Json::object();
    for (const auto& [name, v] : s.histograms) {
      Json x = Json::object();
      x["count"] = v.count;
      x["mean"] = v.mean;
      x["p50"] = v.p50;
      x["p99"] = v.p99;
      Json counts = Json::object();
      for (const auto& [value, n] : v.counts) counts[Json(value).dump()] = n;
      x["counts"] = std::move(counts);
      h[name] = std::move(x);
    }
    j["histograms"] = std::move(h);
  }
  return j;
}

Json edge_json(const EdgeReport& e) {
  Json j = Json::object();
  j["from"] = e.from;
  j["to"] = e.to;
  j["sent"] = e.sent;
  j["delivered"] = e.delivered;
  j["dropped"] = e.dropped;
  j["too_large"] = e.too_large;
  j["refused"] = e.refused;
  j["peak_in_flight"] = e.peak_in_flight;
  j["peak_retained"] = e.peak_retained;
  j["replayed"] = e.replayed;
  j["overflow"] = e.overflow;
  j["latency_ms"] = summary_json(e.latency);
  j["held_ms"] = summary_json(e.held);
  return j;
}

Json sink_json(const StageReport& s) {
  Json j = Json::object();
  j["received"] = counter_or(s, "received", static_cast<std::int64_t>(s.processed));
  j["lost"] = counter_or(s, "lost", 0);
  j["duplicate"] = counter_or(s, "duplicate", 0);
  j["reordered"] = counter_or(s, "reordered", 0);
  Json latency = Json::object();
  latency["p50"] = s.latency.p50_ms;
  latency["p99"] = s.latency.p99_ms;
  latency["p999"] = s.latency.p999_ms;
  latency["max"] = s.latency.max_ms;
  j["latency_ms"] = std::move(latency);
  j["counters"] = counters_json(s.counters);
  return j;
}

Json unit_json(const UnitReport& u) {
  Json j = Json::object();
  j["replicas"] = u.replicas;
  j["sent"] = u.sent;
  j["received"] = u.received;
  j["rejected"] = u.rejected;
  j["unknown_peer"] = u.unknown_peer;
  j["send_failed"] = u.send_failed;
  j["refused_handshakes"] = u.refused_handshakes;
  j["load_reports"] = u.load_reports;
  j["utilisation"] = u.utilisation;
  j["speed"] = u.speed;
  j["clock_offset_ms"] = u.clock_known ? Json(u.clock_offset_ms) : Json(nullptr);
  j["clock_error_ms"] = u.clock_known ? Json(u.clock_error_ms) : Json(nullptr);
  Json reasons = Json::object();
  for (const auto& [reason, n] : u.rejected_by_reason) reasons[reason] = n;
  j["rejected_by_reason"] = std::move(reasons);
  return j;
}

/// The ultrasound example's scores (docs/ultrasound.md): ultrasound.report
/// keeps them as integer counters; here they become the run report's
/// top-level `ultrasound` object. Null when the run has no such stage.
Json ultrasound_json(const std::vector<StageReport>& stages) {
  const StageReport* r = nullptr;
  for (const StageReport& s : stages) {
    if (s.type == "ultrasound.report") r = &s;
  }
  if (r == nullptr) return Json(nullptr);
  auto get = [&](const std::string& name) { return static_cast<double>(counter_or(*r, name, 0)); };
  auto ratio = [](double a, double b) { return b > 0 ? Json(a / b) : Json(nullptr); };
  Json j = Json::object();
  j["frames"] = counter_or(*r, "frames", 0);
  j["scored_frames"] = counter_or(*r, "scored_frames", 0);
  j["lesions"] = counter_or(*r, "lesions_truth", 0);
  j["dice_mean"] = ratio(get("dice_sum_ppm") / 1e6, get("lesions_truth"));
  Json by_type = Json::object();
  const std::string prefix = "lesions_truth.";
  for (const auto& [name, n] : r->counters) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string type = name.substr(prefix.size());
    by_type[type] = ratio(get("dice_sum_ppm." + type) / 1e6, static_cast<double>(n));
  }
  j["dice_by_type"] = std::move(by_type);
  j["flow_error_mean"] = ratio(get("flow_error_sum_ppm") / 1e6, get("vessels_truth"));
  j["report_facts_correct"] = ratio(get("facts_right"), get("facts"));
  j["latency_p50_ms"] = get("latency_p50_us") / 1000;
  j["latency_p99_ms"] = get("latency_p99_us") / 1000;
  return j;
}

}  // namespace

std::string RunReport::to_json() const {
  Json j = Json::object();
  j["pipeline"] = pipeline;
  j["ok"] = ok;
  j["finished"] = finished;
  j["duration_s"] = duration_s;
  if (!error.empty()) j["error"] = error;
  Json stages_j = Json::object();
  Json sinks_j = Json::object();
  for (const StageReport& s : stages) {
    stages_j[s.id] = stage_json(s);
    if (s.sink) sinks_j[s.id] = sink_json(s);
  }
  Json edges_j = Json::array();
  for (const EdgeReport& e : edges) edges_j.push_back(edge_json(e));
  j["stages"] = std::move(stages_j);
  j["edges"] = std::move(edges_j);
  j["sinks"] = std::move(sinks_j);
  Json units_j = Json::object();
  for (const UnitReport& u : units) units_j[u.id] = unit_json(u);
  j["units"] = std::move(units_j);
  Json coordinator_j = Json::object();
  coordinator_j["refused_handshakes"] = coordinator.refused_handshakes;
  coordinator_j["stale_refused"] = coordinator.stale_refused;
  j["coordinator"] = std::move(coordinator_j);
  Json failovers_j = Json::array();
  for (const FailoverReport& f : failovers) {
    Json fj = Json::object();
    fj["unit"] = f.unit;
    fj["cause"] = f.cause;
    fj["detected_s"] = f.detected_s;
    fj["silent_ms"] = f.silent_ms;
    fj["epoch"] = f.epoch;
    fj["moved"] = f.moved;
    fj["lost"] = f.lost;
    fj["first_output_ms"] = f.first_output_ms >= 0 ? Json(f.first_output_ms) : Json(nullptr);
    fj["replayed"] = f.replayed;
    fj["duplicates_dropped"] = f.duplicates_dropped;
    fj["lost_why"] = f.lost_why;
    failovers_j.push_back(std::move(fj));
  }
  j["failovers"] = std::move(failovers_j);
  Json moves_j = Json::array();
  for (const MoveReport& m : moves) {
    Json mj = Json::object();
    mj["at_s"] = m.at_s;
    mj["kind"] = m.kind;
    mj["stage"] = m.stage;
    mj["replica"] = m.replica;
    mj["from"] = m.from;
    mj["to"] = m.to;
    mj["why"] = m.why;
    mj["epoch"] = m.epoch;
    mj["drain_ms"] = m.drain_ms;
    mj["keys"] = m.keys;
    mj["latency_p99_before_ms"] = m.latency_p99_before_ms >= 0 ? Json(m.latency_p99_before_ms) : Json(nullptr);
    mj["latency_p99_around_ms"] = m.latency_p99_around_ms >= 0 ? Json(m.latency_p99_around_ms) : Json(nullptr);
    moves_j.push_back(std::move(mj));
  }
  j["moves"] = std::move(moves_j);
  Json consensus_j = Json::object();
  for (const ConsensusReport& c : consensus) {
    Json cj = Json::object();
    cj["decisions"] = c.decisions;
    cj["wrong"] = c.wrong;
    cj["checked"] = c.checked;
    cj["without_quorum"] = c.without_quorum;
    cj["corrections"] = c.corrections;
    cj["fast"] = c.fast;
    cj["leader_changes"] = c.leader_changes;
    cj["late_votes"] = c.late_votes;
    cj["added_latency_ms"] = Json{{"p50", c.added_latency_p50_ms}, {"p99", c.added_latency_p99_ms}};
    consensus_j[c.stage] = std::move(cj);
  }
  j["consensus"] = std::move(consensus_j);
  Json replicas_j = Json::array();
  for (const ReplicaReport& x : replicas) {
    Json rj = Json::object();
    rj["stage"] = x.stage;
    rj["replica"] = x.replica;
    rj["unit"] = x.unit;
    rj["processed"] = x.processed;
    rj["errors"] = x.errors;
    rj["restarts"] = x.restarts;
    rj["dead_letters"] = x.dead_letters;
    rj["queued"] = x.queued;
    Json service = Json::object();
    Json le = Json::object();
    std::uint64_t n = 0;
    for (std::size_t b = 0; b < x.service_buckets.size(); ++b) {
      n += x.service_buckets[b];
      if (b < static_cast<std::size_t>(kServiceBuckets)) {
        char bound[32];
        std::snprintf(bound, sizeof bound, "%g", kServiceBucketsS[b]);
        le[bound] = n;
      }
    }
    service["count"] = n;
    service["sum_s"] = x.service_sum_s;
    service["le"] = std::move(le);
    rj["service_s"] = std::move(service);
    replicas_j.push_back(std::move(rj));
  }
  j["replicas"] = std::move(replicas_j);
  if (Json us = ultrasound_json(stages); !us.is_null()) j["ultrasound"] = std::move(us);
  // Names and messages come from users and stages; never fail on bad UTF-8.
  return j.dump(2, ' ', false, Json::error_handler_t::replace);
}

const StageReport* RunReport::stage(const std::string& id) const {
  for (const StageReport& s : stages) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

const EdgeReport* RunReport::edge(const std::string& from, const std::string& to) const {
  for (const EdgeReport& e : edges) {
    if (e.from == from && e.to == to) return &e;
  }
  return nullptr;
}

}  // namespace swarmflow
