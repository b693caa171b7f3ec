// What `swarmflow top` draws (top.hpp): pure text from /api/v1/state.

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include <swarmflow/report.hpp>

#include "cli/top.hpp"

namespace swarmflow::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

std::string human(double x) {
  if (x >= 1e6) return format("%.1fM", x / 1e6);
  if (x >= 1e3) return format("%.1fk", x / 1e3);
  return format("%.0f", x);
}

std::string stage_of(const std::string& port) { return port.substr(0, port.rfind('/')); }

std::uint64_t u64(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<std::uint64_t>() : 0;
}

double number(const Json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string text(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// p99 in ms of per-bucket counts over kServiceBucketsS (+Inf last).
double p99_ms(const std::vector<std::uint64_t>& buckets) {
  std::uint64_t total = 0;
  for (auto n : buckets) total += n;
  if (total == 0) return 0;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    seen += buckets[i];
    if (static_cast<double>(seen) >= 0.99 * static_cast<double>(total)) {
      return kServiceBucketsS[std::min<std::size_t>(i, kServiceBuckets - 1)] * 1e3;
    }
  }
  return 0;
}

/// A section: its title line and rows.
struct Section {
  std::string title;
  std::vector<std::string> rows;
};

}  // namespace

std::vector<std::string> top_lines(const std::string& state, const std::string& previous, double interval_s,
                                   const std::string& address, int width, int height) {
  width = std::max(width, 10);
  height = std::max(height, 1);
  const Json now = Json::parse(state, nullptr, false);
  const Json before = previous.empty() ? Json() : Json::parse(previous, nullptr, false);
  std::vector<std::string> out;
  const auto fit = [&](std::string line) {
    if (static_cast<int>(line.size()) > width) line.resize(static_cast<std::size_t>(width));
    return line;
  };
  if (!now.is_object()) {
    out.push_back(fit("swarmflow top " + address + ": no state (is this a swarmflow --metrics address?)"));
    return out;
  }
  // Rates over the coordinator's clock (the run's duration) where it moved.
  if (before.is_object()) {
    const double dt = number(now, "duration_s") - number(before, "duration_s");
    if (dt > 0) interval_s = dt;
  }
  const bool rates = before.is_object() && interval_s > 0;
  const auto rate = [&](std::uint64_t n, std::uint64_t b) {
    return rates && n >= b ? static_cast<double>(n - b) / interval_s : 0.0;
  };
  out.push_back(fit(format("swarmflow top  %s  %s%s  %.1f s  %s   q quits", text(now, "pipeline").c_str(),
                           now.value("finished", false) ? "finished" : "running",
                           now.value("ok", true) ? "" : " FAILED", number(now, "duration_s"), address.c_str())));

  // Replicas by stage and by unit.
  std::map<std::string, std::vector<const Json*>> by_stage;
  std::map<std::string, double> unit_rate;
  std::map<std::string, std::uint64_t> before_processed;  // "stage/replica"
  if (rates && before.contains("replicas")) {
    for (const auto& r : before["replicas"]) {
      before_processed[text(r, "stage") + "/" + std::to_string(r.value("replica", 0))] = u64(r, "processed");
    }
  }
  if (now.contains("replicas")) {
    for (const auto& r : now["replicas"]) {
      by_stage[text(r, "stage")].push_back(&r);
      const std::string key = text(r, "stage") + "/" + std::to_string(r.value("replica", 0));
      auto b = before_processed.find(key);
      if (b != before_processed.end()) unit_rate[text(r, "unit")] += rate(u64(r, "processed"), b->second);
    }
  }

  std::vector<Section> sections;
  Section units{fit(format("%-14s %4s %5s %6s %9s %10s %10s", "UNIT", "rep", "load", "speed", "steps/s", "sent",
                           "received")),
                {}};
  if (now.contains("units")) {
    for (const auto& [id, u] : now["units"].items()) {
      units.rows.push_back(fit(format("%-14s %4d %4.0f%% %6.2f %9s %10" PRIu64 " %10" PRIu64, id.c_str(),
                                      u.value("replicas", 0), 100 * number(u, "utilisation"), number(u, "speed", 1),
                                      human(unit_rate[id]).c_str(), u64(u, "sent"), u64(u, "received"))));
    }
  }
  sections.push_back(std::move(units));

  // Drops by consumer stage, with their reasons.
  std::map<std::string, std::uint64_t> drops;
  std::map<std::string, std::string> why;
  const auto add_why = [&](const std::string& stage, std::uint64_t n, const std::string& reason) {
    if (n == 0) return;
    std::string& w = why[stage];
    w += (w.empty() ? "" : ",") + std::to_string(n) + " " + reason;
  };
  std::vector<std::string> edge_rows;
  std::map<std::string, std::uint64_t> before_sent;
  if (rates && before.contains("edges")) {
    for (const auto& e : before["edges"]) before_sent[text(e, "from") + ">" + text(e, "to")] = u64(e, "sent");
  }
  if (now.contains("edges")) {
    for (const auto& e : now["edges"]) {
      const std::string to = stage_of(text(e, "to"));
      const std::uint64_t dropped = u64(e, "dropped");
      const std::uint64_t too_large = u64(e, "too_large");
      const std::uint64_t refused = u64(e, "refused");
      drops[to] += dropped;
      const std::string overflow = text(e, "overflow") == "block" ? "no-credit" : text(e, "overflow");
      add_why(to, dropped >= too_large + refused ? dropped - too_large - refused : 0, overflow);
      add_why(to, too_large, "too-large");
      add_why(to, refused, "refused");
      const std::uint64_t sent = u64(e, "sent");
      const std::uint64_t delivered = u64(e, "delivered");
      const std::uint64_t in_flight = sent >= delivered + dropped ? sent - delivered - dropped : 0;
      auto b = before_sent.find(text(e, "from") + ">" + text(e, "to"));
      const double p99 = e.contains("latency_ms") ? number(e["latency_ms"], "p99") : 0.0;
      edge_rows.push_back(fit(format("%-34s %9s %7" PRIu64 " %9" PRIu64 " %10" PRIu64 " %9.3f",
                                     (text(e, "from") + " -> " + text(e, "to")).c_str(),
                                     human(b == before_sent.end() ? 0 : rate(sent, b->second)).c_str(), in_flight,
                                     dropped, sent, p99)));
    }
  }

  Section stages{fit(format("%-16s %4s %9s %7s %9s %9s  %s", "STAGE", "rep", "rate/s", "queue", "drops", "p99 ms",
                            "drop reasons")),
                 {}};
  if (now.contains("stages")) {
    for (const auto& [id, s] : now["stages"].items()) {
      std::uint64_t queued = 0;
      std::vector<std::uint64_t> buckets(static_cast<std::size_t>(kServiceBuckets) + 1, 0);
      for (const Json* r : by_stage[id]) {
        queued += u64(*r, "queued");
        const Json& service = (*r)["service_s"];
        std::uint64_t below = 0;
        for (int b = 0; b < kServiceBuckets; ++b) {
          char bound[32];
          std::snprintf(bound, sizeof bound, "%g", kServiceBucketsS[b]);
          // A bound not listed holds what the one below it holds.
          const std::uint64_t n =
              service.contains("le") && service["le"].contains(bound) ? u64(service["le"], bound) : below;
          buckets[static_cast<std::size_t>(b)] += n >= below ? n - below : 0;
          below = n;
        }
        const std::uint64_t count = u64(service, "count");
        buckets.back() += count >= below ? count - below : 0;
      }
      std::uint64_t processed_before = 0;
      bool known = false;
      if (rates && before.contains("stages") && before["stages"].contains(id)) {
        processed_before = u64(before["stages"][id], "processed");
        known = true;
      }
      // p99 of the residence (arrival -> end of step) where measured, else of the step alone.
      double p99 = p99_ms(buckets);
      if (s.contains("residence_ms") && u64(s["residence_ms"], "count") > 0) p99 = number(s["residence_ms"], "p99");
      stages.rows.push_back(fit(format("%-16s %4d %9s %7" PRIu64 " %9" PRIu64 " %9.3f  %s", id.c_str(),
                                       s.value("replicas", 0),
                                       human(known ? rate(u64(s, "processed"), processed_before) : 0).c_str(), queued,
                                       drops[id], p99, why[id].c_str())));
    }
  }
  sections.push_back(std::move(stages));
  sections.push_back(
      Section{fit(format("%-34s %9s %7s %9s %10s %9s", "EDGE", "rate/s", "flight", "dropped", "sent", "p99 ms")),
              edge_rows});

  Section failovers{"FAILOVERS", {}};
  if (now.contains("failovers")) {
    for (const auto& f : now["failovers"]) {
      std::string moved;
      for (const auto& m : f.value("moved", Json::array())) moved += (moved.empty() ? "" : ", ") + m.get<std::string>();
      std::string lost;
      for (const auto& l : f.value("lost", Json::array())) lost += (lost.empty() ? "" : ", ") + l.get<std::string>();
      failovers.rows.push_back(fit(format("%8.2f s  unit %s %s, epoch %u: %s%s%s", number(f, "detected_s"),
                                          text(f, "unit").c_str(), text(f, "cause").c_str(),
                                          f.value("epoch", 0u), moved.empty() ? "nothing moved" : moved.c_str(),
                                          lost.empty() ? "" : "; lost ", lost.c_str())));
    }
  }
  if (failovers.rows.empty()) failovers.rows.push_back("none");
  sections.push_back(std::move(failovers));

  // Moves, newest first (the policy may make many in a long run).
  Section moves{"MOVES", {}};
  if (now.contains("moves") && now["moves"].is_array()) {
    const auto& all = now["moves"];
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      const auto& m = *it;
      moves.rows.push_back(fit(format("%8.2f s  %s %s/%d %s -> %s, drained in %.1f ms: %s", number(m, "at_s"),
                                      text(m, "kind").c_str(), text(m, "stage").c_str(), m.value("replica", 0),
                                      text(m, "from").c_str(), text(m, "to").c_str(), number(m, "drain_ms"),
                                      text(m, "why").c_str())));
    }
  }
  if (moves.rows.empty()) moves.rows.push_back("none");
  sections.push_back(std::move(moves));

  // Each section gets its title and as many rows as fit, in order; a section
  // cut short says how many rows it left out.
  for (auto& s : sections) {
    int room = height - static_cast<int>(out.size());
    if (room < 2) break;
    out.push_back(s.title);
    --room;
    const int n = static_cast<int>(s.rows.size());
    const int shown = n <= room ? n : std::max(0, room - 1);
    for (int i = 0; i < shown; ++i) out.push_back(s.rows[static_cast<std::size_t>(i)]);
    if (shown < n) out.push_back(fit(format("  +%d more", n - shown)));
  }
  return out;
}

}  // namespace swarmflow::cli
