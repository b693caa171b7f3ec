#include "cli/progress.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

namespace swarmflow::cli {

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

std::string human_rate(double per_s) {
  if (per_s >= 1e6) return format("%.1fM/s", per_s / 1e6);
  if (per_s >= 1e3) return format("%.1fk/s", per_s / 1e3);
  return format("%.0f/s", per_s);
}

/// Drops on the inputs of each stage, by consumer stage id.
std::map<std::string, std::uint64_t> drops_by_consumer(const RunReport& r) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& e : r.edges) out[e.to.substr(0, e.to.find('/'))] += e.dropped;
  return out;
}

/// The stages upstream of `sink` that run several replicas without a key:
/// each may pass the envelopes of one stream to different replicas, which
/// finish them in another order.
std::vector<const StageReport*> unkeyed_parallel_upstream(const RunReport& r, const std::string& sink,
                                                          const std::set<std::string>& keyed) {
  std::vector<const StageReport*> out;
  std::set<std::string> seen{sink};
  std::vector<std::string> todo{sink};
  while (!todo.empty()) {
    const std::string id = todo.back();
    todo.pop_back();
    const StageReport* s = r.stage(id);
    if (s != nullptr && id != sink && s->replicas > 1 && keyed.count(id) == 0) out.push_back(s);
    for (const auto& e : r.edges) {
      if (e.to.substr(0, e.to.find('/')) != id) continue;
      const std::string from = e.from.substr(0, e.from.find('/'));
      if (seen.insert(from).second) todo.push_back(from);
    }
  }
  return out;
}

}  // namespace

std::string eta_text(double seconds) {
  const auto s = static_cast<std::int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return format("%" PRId64 "s", s);
  if (s < 3600) return format("%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
  return format("%" PRId64 "h%02" PRId64 "m", s / 3600, (s % 3600) / 60);
}

std::string completion_text(std::uint64_t done, std::int64_t expected, double elapsed_s) {
  if (expected <= 0) return "";
  const auto total = static_cast<std::uint64_t>(expected);
  if (done >= total) return "100%";
  // Rounded down, so 100% is shown only when the source is done.
  const std::uint64_t percent = done * 100 / total;
  std::string text = format("%" PRIu64 "%%", percent);
  if (done > 0 && elapsed_s > 0) {
    const double left_s = elapsed_s * static_cast<double>(total - done) / static_cast<double>(done);
    text += " eta " + eta_text(left_s);
  }
  return text;
}

std::string progress_line(const RunReport& now, const RunReport& previous, double interval_s) {
  std::string line = format("[%6.1fs]", now.duration_s);
  const auto drops = drops_by_consumer(now);
  for (const auto& s : now.stages) {
    const StageReport* before = previous.stage(s.id);
    const double delta = static_cast<double>(s.processed - (before != nullptr ? before->processed : 0));
    line += format(" | %s %s", s.id.c_str(), human_rate(interval_s > 0 ? delta / interval_s : 0).c_str());
    if (s.queued > 0) line += format(" q=%" PRIu64, s.queued);
    auto d = drops.find(s.id);
    if (d != drops.end() && d->second > 0) line += format(" drop=%" PRIu64, d->second);
    if (auto expected = s.counters.find(kExpectedCounter); expected != s.counters.end()) {
      const std::string done = completion_text(s.processed, expected->second, now.duration_s);
      if (!done.empty()) line += " " + done;
    }
    if (s.restarts > 0) line += format(" restarts=%" PRIu64, s.restarts);
  }
  if (!now.moves.empty()) {
    const MoveReport& last = now.moves.back();
    line += format(" | moves %zu", now.moves.size());
    if (now.moves.size() > previous.moves.size()) {
      line += format(" (%s %s/%d %s->%s)", last.kind.c_str(), last.stage.c_str(), last.replica, last.from.c_str(),
                     last.to.c_str());
    }
  }
  return line;
}

std::string summary_table(const RunReport& r, const std::set<std::string>& keyed) {
  std::string out;
  out += format("pipeline %s: %s in %.2f s\n", r.pipeline.c_str(), r.ok ? "ok" : "FAILED", r.duration_s);
  if (!r.error.empty()) out += format("  error: %s\n", r.error.c_str());
  out += format("\n  %-20s %-24s %4s %12s %10s %10s %7s %8s %6s\n", "stage", "type", "rep", "processed", "rate/s",
                "per rep/s", "errors", "restarts", "dead");
  for (const auto& s : r.stages) {
    const double rate = r.duration_s > 0 ? static_cast<double>(s.processed) / r.duration_s : 0.0;
    out += format("  %-20s %-24s %4d %12" PRIu64 " %10.1f %10.1f %7" PRIu64 " %8" PRIu64 " %6" PRIu64 "\n",
                  s.id.c_str(), s.type.c_str(), s.replicas, s.processed, rate, rate / std::max(1, s.replicas),
                  s.errors, s.restarts, s.dead_letters);
  }
  out += format("\n  %-32s %-32s %10s %10s %9s  %s\n", "edge from", "to", "sent", "delivered", "dropped", "why");
  for (const auto& e : r.edges) {
    std::string why = e.dropped == e.too_large + e.refused
                          ? ""
                          : (e.overflow == "block" ? "live source, no credit" : e.overflow);
    if (e.too_large > 0) {
      why = (why.empty() ? "" : why + "; ") + std::to_string(e.too_large) + " over transport.max_message_bytes";
    }
    if (e.refused > 0) why = (why.empty() ? "" : why + "; ") + std::to_string(e.refused) + " refused on arrival";
    out += format("  %-32s %-32s %10" PRIu64 " %10" PRIu64 " %9" PRIu64 "  %s\n", e.from.c_str(), e.to.c_str(), e.sent,
                  e.delivered, e.dropped, why.c_str());
  }
  bool header = false;
  for (const auto& s : r.stages) {
    if (!s.sink) continue;
    if (!header) {
      out += format("\n  %-20s %10s %8s %8s %9s %9s %9s %9s %9s\n", "sink", "received", "lost", "dup", "reorder",
                    "p50 ms", "p99 ms", "p99.9 ms", "max ms");
      header = true;
    }
    auto counter = [&](const char* name, std::int64_t fallback) {
      auto it = s.counters.find(name);
      return it == s.counters.end() ? fallback : it->second;
    };
    out += format("  %-20s %10" PRId64 " %8" PRId64 " %8" PRId64 " %9" PRId64 " %9.3f %9.3f %9.3f %9.3f\n",
                  s.id.c_str(), counter("received", static_cast<std::int64_t>(s.processed)), counter("lost", 0),
                  counter("duplicate", 0), counter("reordered", 0), s.latency.p50_ms, s.latency.p99_ms,
                  s.latency.p999_ms, s.latency.max_ms);
  }
  // The stages' own histograms (lm.generate: TTFT, TPOT, batch sizes).
  header = false;
  for (const auto& s : r.stages) {
    for (const auto& [name, h] : s.histograms) {
      if (!header) {
        out += format("\n  %-20s %-16s %10s %11s %11s %11s\n", "stage", "histogram", "count", "mean", "p50", "p99");
        header = true;
      }
      out += format("  %-20s %-16s %10" PRIu64 " %11.3f %11.3f %11.3f\n", s.id.c_str(), name.c_str(), h.count, h.mean,
                    h.p50, h.p99);
    }
    auto tokens = s.counters.find("tokens");
    if (s.type == "lm.generate" && tokens != s.counters.end() && r.duration_s > 0) {
      out += format("  %-20s %-16s %10" PRId64 " %11.1f tokens/s over the run\n", s.id.c_str(), "tokens", tokens->second,
                    static_cast<double>(tokens->second) / r.duration_s);
    }
  }
  for (const auto& s : r.stages) {
    if (!s.sink || s.replicas <= 1 || keyed.count(s.id) != 0 || s.counters.count("lost") == 0) continue;
    out += format("\n  %s: %d replicas without a key: each checks only the envelopes it gets, so lost and\n"
                  "    reorder count the gaps between them. Use `key: stream` on it to check whole streams.\n",
                  s.id.c_str(), s.replicas);
  }
  for (const auto& s : r.stages) {
    auto it = s.counters.find("reordered");
    if (!s.sink || it == s.counters.end() || it->second <= 0) continue;
    const auto parallel = unkeyed_parallel_upstream(r, s.id, keyed);
    if (parallel.empty()) {
      out += format("\n  %s: reorder = envelopes of a stream that arrived after a later one of the same stream\n",
                    s.id.c_str());
      continue;
    }
    std::string stages;
    for (const auto* p : parallel) {
      stages += format("%s%s (%d replicas)", stages.empty() ? "" : ", ", p->id.c_str(), p->replicas);
    }
    out += format("\n  %s: reorder = envelopes of a stream that arrived after a later one of the same stream;\n"
                  "    expected here, not a loss: %s %s no key, so one stream's envelopes take\n"
                  "    several replicas and finish out of order. Use `key: stream` to keep each stream's order.\n",
                  s.id.c_str(), stages.c_str(), parallel.size() == 1 ? "has" : "have");
  }
  bool hops = false;
  for (const auto& s : r.stages) hops = hops || s.residence.count > 0;
  if (hops) {
    out += format("\n  %-32s %10s %9s %9s   (at a stage: arrival -> end of step; an edge: sent -> arrival;\n"
                  "  %-32s %10s %9s %9s    held: arrival at the producer -> sent)\n",
                  "latency per hop", "count", "p50 ms", "p99 ms", "", "", "", "");
    for (const auto& s : r.stages) {
      if (s.residence.count == 0) continue;
      out += format("  %-32s %10" PRIu64 " %9.3f %9.3f\n", ("at " + s.id).c_str(), s.residence.count,
                    s.residence.p50_ms, s.residence.p99_ms);
    }
    for (const auto& e : r.edges) {
      if (e.latency.count == 0) continue;
      out += format("  %-32s %10" PRIu64 " %9.3f %9.3f\n", (e.from + " -> " + e.to).c_str(), e.latency.count,
                    e.latency.p50_ms, e.latency.p99_ms);
      if (e.held.count == 0) continue;
      out += format("  %-32s %10" PRIu64 " %9.3f %9.3f\n", ("  held for it at " + e.from).c_str(), e.held.count,
                    e.held.p50_ms, e.held.p99_ms);
    }
  }
  std::string clocks;
  for (const auto& u : r.units) {
    if (!u.clock_known || (u.clock_offset_ms == 0 && u.clock_error_ms == 0)) continue;
    clocks += format("%s%s %+.3f ms (+-%.3f)", clocks.empty() ? "" : ", ", u.id.c_str(), u.clock_offset_ms,
                     u.clock_error_ms);
  }
  if (!clocks.empty()) {
    out += "\n  clock offsets against the coordinator (corrected in capture and hop times): " + clocks + "\n";
  }
  if (!r.failovers.empty()) {
    std::uint64_t replayed = 0;
    for (const auto& e : r.edges) replayed += e.replayed;
    std::int64_t duplicates = 0;
    for (const auto& s : r.stages) {
      auto it = s.counters.find("duplicates_dropped");
      if (it != s.counters.end()) duplicates += it->second;
    }
    out += format("\n  failovers: %zu; envelopes replayed %" PRIu64 ", duplicates dropped %" PRId64 "\n",
                  r.failovers.size(), replayed, duplicates);
    for (const auto& f : r.failovers) {
      std::string moved;
      for (const auto& m : f.moved) moved += (moved.empty() ? "" : ", ") + m;
      std::string lost;
      for (std::size_t i = 0; i < f.lost.size(); ++i) {
        lost += (lost.empty() ? "" : ", ") + f.lost[i];
        if (i < f.lost_why.size()) lost += " (" + f.lost_why[i] + ")";
      }
      std::string first;
      if (f.first_output_ms >= 0) first = format("; first output %.1f ms after", f.first_output_ms);
      first += format("; replayed %" PRIu64 ", duplicates dropped %" PRIu64, f.replayed, f.duplicates_dropped);
      const std::string what = f.cause == "left" ? std::string("left") : format("dead (silent %" PRId64 " ms)", f.silent_ms);
      out += format("  %8.2f s  unit %s %s, epoch %u: %s%s%s%s\n", f.detected_s, f.unit.c_str(), what.c_str(), f.epoch, moved.empty() ? "nothing moved" : moved.c_str(),
                    first.c_str(), lost.empty() ? "" : "; lost with it (what they had not sent): ", lost.c_str());
    }
  }
  if (!r.moves.empty()) {
    out += format("\n  moves: %zu (placement that follows the load)\n", r.moves.size());
    out += format("  %8s  %-5s %-24s %-14s %9s %5s %11s %11s  %s\n", "at", "kind", "replica", "from -> to", "drain ms",
                  "keys", "p99 before", "p99 around", "why");
    constexpr std::size_t kShown = 20;
    for (std::size_t i = 0; i < r.moves.size(); ++i) {
      if (i == kShown && r.moves.size() > kShown + 1) {
        out += format("  ... %zu more in the report's moves[]\n", r.moves.size() - kShown - 1);
        i = r.moves.size() - 1;
      }
      const MoveReport& m = r.moves[i];
      auto ms = [](double v) { return v >= 0 ? format("%.2f", v) : std::string("-"); };
      out += format("  %7.2fs  %-5s %-24s %-14s %9.2f %5" PRIu64 " %11s %11s  %s\n", m.at_s, m.kind.c_str(),
                    (m.stage + "/" + std::to_string(m.replica)).c_str(), (m.from + " -> " + m.to).c_str(), m.drain_ms,
                    m.keys, ms(m.latency_p99_before_ms).c_str(), ms(m.latency_p99_around_ms).c_str(), m.why.c_str());
    }
  }
  for (const auto& c : r.consensus) {
    out += format("\n  consensus %s: %" PRIu64 " decisions, %" PRIu64 " wrong (of %" PRIu64 " checked), %" PRIu64
                  " without quorum, %" PRIu64 " corrections, %" PRIu64 " leader changes; added latency p50 %.3f ms, "
                  "p99 %.3f ms\n",
                  c.stage.c_str(), c.decisions, c.wrong, c.checked, c.without_quorum, c.corrections, c.leader_changes,
                  c.added_latency_p50_ms, c.added_latency_p99_ms);
  }
  return out;
}

SummaryTarget summary_target(bool quiet, bool stdout_is_data) {
  if (quiet) return SummaryTarget::nowhere;
  return stdout_is_data ? SummaryTarget::standard_error : SummaryTarget::standard_output;
}

bool writes_to_stdout(const config::PipelineSpec& spec, const Registry& registry) {
  for (const auto& stage : spec.stages) {
    const config::ParamDecl* set = nullptr;
    for (const auto& p : stage.params) {
      if (p.name == "path") set = &p;
    }
    if (set != nullptr) {
      const auto* text = std::get_if<std::string>(&set->value);
      if (text != nullptr && *text == "-") return true;
      continue;
    }
    StageSpec declared;
    if (!registry.describe(stage.type, declared).ok()) continue;
    const ParamInfo* info = declared.find_param("path");
    if (info == nullptr) continue;
    const auto* text = std::get_if<std::string>(&info->default_value);
    if (text != nullptr && *text == "-") return true;
  }
  return false;
}

}  // namespace swarmflow::cli
