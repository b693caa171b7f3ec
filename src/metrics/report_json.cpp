#include <swarmflow/report.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace swarmflow {

namespace {

/// Writes JSON straight into one string, laid out as nlohmann's dump(2)
/// lays it out (two spaces an indent, `"key": value`), numbers as it writes
/// them (integers exactly, doubles shortest with ".0" on integral ones,
/// null for NaN and infinities) and strings with invalid UTF-8 replaced by
/// U+FFFD: the report is read at every look of the web view, top and
/// /api/v1/state, so it is made without a tree of values.
class JsonOut {
 public:
  explicit JsonOut(std::string& out) : out_(out) {}

  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  /// The next member's key (in an object).
  void key(std::string_view k) {
    next_item();
    string(k);
    out_ += ": ";
    keyed_ = true;
  }
  template <class V>
  void field(std::string_view k, const V& v) {
    key(k);
    value(v);
  }
  void value(std::nullptr_t) {
    before_value();
    out_ += "null";
  }
  void value(bool b) {
    before_value();
    out_ += b ? "true" : "false";
  }
  void value(const std::string& s) {
    before_value();
    string(s);
  }
  void value(const char* s) {
    before_value();
    string(s);
  }
  void value(double d) {
    before_value();
    number(out_, d);
  }
  template <class I, class = std::enable_if_t<std::is_integral_v<I>>>
  void value(I i) {
    before_value();
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, i);
    out_.append(buf, r.ptr);
  }
  /// A double, or null when `known` is false.
  void value_or_null(bool known, double d) {
    if (known) {
      value(d);
    } else {
      value(nullptr);
    }
  }
  void strings(const std::vector<std::string>& v) {
    begin_array();
    for (const auto& x : v) value(x);
    end_array();
  }

  /// `d` as nlohmann's dump writes a double.
  static void number(std::string& out, double d) {
    if (!std::isfinite(d)) {
      out += "null";
      return;
    }
    if (d == 0) {
      out += std::signbit(d) ? "-0.0" : "0.0";
      return;
    }
    // The shortest digits that read back as `d`, and their exponent.
    char buf[40];
    const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    const char* p = buf;
    if (*p == '-') {
      out += '-';
      ++p;
    }
    char digits[24];
    int k = 0;
    for (; p < r.ptr && *p != 'e'; ++p) {
      if (*p != '.' && k < static_cast<int>(sizeof digits)) digits[k++] = *p;
    }
    int e10 = 0;
    if (p < r.ptr) std::from_chars(p + 1 + (p[1] == '+' ? 1 : 0), r.ptr, e10);
    // n: where the decimal point goes after the first n digits.
    const int n = e10 + 1;
    constexpr int kMinExp = -4;
    constexpr int kMaxExp = 15;
    if (k <= n && n <= kMaxExp) {  // 1234500.0
      out.append(digits, static_cast<std::size_t>(k));
      out.append(static_cast<std::size_t>(n - k), '0');
      out += ".0";
    } else if (0 < n && n <= kMaxExp) {  // 123.45
      out.append(digits, static_cast<std::size_t>(n));
      out += '.';
      out.append(digits + n, static_cast<std::size_t>(k - n));
    } else if (kMinExp < n && n <= 0) {  // 0.0012345
      out += "0.";
      out.append(static_cast<std::size_t>(-n), '0');
      out.append(digits, static_cast<std::size_t>(k));
    } else {  // 1.2345e+20, 1e-05
      out += digits[0];
      if (k > 1) {
        out += '.';
        out.append(digits + 1, static_cast<std::size_t>(k - 1));
      }
      out += 'e';
      const int e = n - 1;
      out += e < 0 ? '-' : '+';
      const int a = e < 0 ? -e : e;
      if (a < 10) out += '0';
      char eb[8];
      const auto er = std::to_chars(eb, eb + sizeof eb, a);
      out.append(eb, er.ptr);
    }
  }

 private:
  void open(char c) {
    before_value();
    out_ += c;
    first_.push_back(true);
  }
  void close(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) newline();
    out_ += c;
  }
  void newline() {
    out_ += '\n';
    out_.append(2 * first_.size(), ' ');
  }
  /// Before a member or an element: the comma after the one before, a new line.
  void next_item() {
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
  void before_value() {
    if (keyed_) {
      keyed_ = false;
      return;
    }
    next_item();
  }
  /// `s` quoted and escaped; invalid UTF-8 becomes U+FFFD.
  void string(std::string_view s) {
    out_ += '"';
    static const char kHex[] = "0123456789abcdef";
    const auto* b = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t size = s.size();
    for (std::size_t i = 0; i < size;) {
      const unsigned char c = b[i];
      if (c < 0x80) {
        switch (c) {
          case '"': out_ += "\\\""; break;
          case '\\': out_ += "\\\\"; break;
          case '\b': out_ += "\\b"; break;
          case '\f': out_ += "\\f"; break;
          case '\n': out_ += "\\n"; break;
          case '\r': out_ += "\\r"; break;
          case '\t': out_ += "\\t"; break;
          default:
            if (c < 0x20) {
              out_ += "\\u00";
              out_ += kHex[c >> 4];
              out_ += kHex[c & 15];
            } else {
              out_ += static_cast<char>(c);
            }
        }
        ++i;
        continue;
      }
      const std::size_t len = utf8_length(b + i, size - i);
      if (len == 0) {
        out_ += "\xEF\xBF\xBD";
        ++i;
      } else {
        out_.append(s.data() + i, len);
        i += len;
      }
    }
    out_ += '"';
  }
  /// The length of the valid UTF-8 sequence of two to four bytes at `p`, or 0.
  static std::size_t utf8_length(const unsigned char* p, std::size_t left) {
    const unsigned char c = p[0];
    std::size_t len = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return 0;
    }
    if (left < len) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (std::size_t i = 2; i < len; ++i) {
      if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    }
    return len;
  }

  std::string& out_;
  std::vector<bool> first_;  ///< per open object or array: nothing in it yet
  bool keyed_ = false;       ///< a key was written: the value follows on its line
};

/// The `le` keys of the service buckets, as "%g" writes kServiceBucketsS ("1e-05", "0.005", "5").
struct LeKeys {
  std::string key[kServiceBuckets];
  LeKeys() {
    for (int b = 0; b < kServiceBuckets; ++b) {
      char bound[32];
      std::snprintf(bound, sizeof bound, "%g", kServiceBucketsS[b]);
      key[b] = bound;
    }
  }
};

void counters_json(JsonOut& j, const std::map<std::string, std::int64_t>& counters) {
  j.begin_object();
  for (const auto& [name, value] : counters) j.field(name, value);
  j.end_object();
}

std::int64_t counter_or(const StageReport& s, const std::string& name, std::int64_t fallback) {
  auto it = s.counters.find(name);
  return it == s.counters.end() ? fallback : it->second;
}

void summary_json(JsonOut& j, const LatencySummary& l) {
  j.begin_object();
  j.field("count", l.count);
  j.field("p50", l.p50_ms);
  j.field("p99", l.p99_ms);
  j.field("p999", l.p999_ms);
  j.field("max", l.max_ms);
  j.end_object();
}

void stage_json(JsonOut& j, const StageReport& s) {
  j.begin_object();
  j.field("type", s.type);
  j.field("replicas", s.replicas);
  j.field("processed", s.processed);
  j.field("errors", s.errors);
  j.field("restarts", s.restarts);
  j.field("dead_letters", s.dead_letters);
  j.key("counters");
  counters_json(j, s.counters);
  j.field("queued", s.queued);
  j.key("residence_ms");
  summary_json(j, s.residence);
  if (!s.histograms.empty()) {
    j.key("histograms");
    j.begin_object();
    std::string value_key;
    for (const auto& [name, v] : s.histograms) {
      j.key(name);
      j.begin_object();
      j.field("count", v.count);
      j.field("mean", v.mean);
      j.field("p50", v.p50);
      j.field("p99", v.p99);
      j.key("counts");
      j.begin_object();
      for (const auto& [value, n] : v.counts) {
        value_key.clear();
        JsonOut::number(value_key, value);
        j.field(value_key, n);
      }
      j.end_object();
      j.end_object();
    }
    j.end_object();
  }
  j.end_object();
}

void edge_json(JsonOut& j, const EdgeReport& e) {
  j.begin_object();
  j.field("from", e.from);
  j.field("to", e.to);
  j.field("sent", e.sent);
  j.field("delivered", e.delivered);
  j.field("dropped", e.dropped);
  j.field("too_large", e.too_large);
  j.field("refused", e.refused);
  j.field("peak_in_flight", e.peak_in_flight);
  j.field("peak_retained", e.peak_retained);
  j.field("replayed", e.replayed);
  j.field("overflow", e.overflow);
  j.key("latency_ms");
  summary_json(j, e.latency);
  j.key("held_ms");
  summary_json(j, e.held);
  j.end_object();
}

void sink_json(JsonOut& j, const StageReport& s) {
  j.begin_object();
  j.field("received", counter_or(s, "received", static_cast<std::int64_t>(s.processed)));
  j.field("lost", counter_or(s, "lost", 0));
  j.field("duplicate", counter_or(s, "duplicate", 0));
  j.field("reordered", counter_or(s, "reordered", 0));
  j.key("latency_ms");
  j.begin_object();
  j.field("p50", s.latency.p50_ms);
  j.field("p99", s.latency.p99_ms);
  j.field("p999", s.latency.p999_ms);
  j.field("max", s.latency.max_ms);
  j.end_object();
  j.key("counters");
  counters_json(j, s.counters);
  j.end_object();
}

void unit_json(JsonOut& j, const UnitReport& u) {
  j.begin_object();
  j.field("replicas", u.replicas);
  j.field("sent", u.sent);
  j.field("received", u.received);
  j.field("rejected", u.rejected);
  j.field("unknown_peer", u.unknown_peer);
  j.field("send_failed", u.send_failed);
  j.field("refused_handshakes", u.refused_handshakes);
  j.field("load_reports", u.load_reports);
  j.field("utilisation", u.utilisation);
  j.field("speed", u.speed);
  j.key("clock_offset_ms");
  j.value_or_null(u.clock_known, u.clock_offset_ms);
  j.key("clock_error_ms");
  j.value_or_null(u.clock_known, u.clock_error_ms);
  j.key("rejected_by_reason");
  j.begin_object();
  for (const auto& [reason, n] : u.rejected_by_reason) j.field(reason, n);
  j.end_object();
  j.end_object();
}

/// The ultrasound example's scores (docs/ultrasound.md): ultrasound.report
/// keeps them as integer counters; here they become the run report's
/// top-level `ultrasound` object, left out when the run has no such stage.
void ultrasound_json(JsonOut& j, const std::vector<StageReport>& stages) {
  const StageReport* r = nullptr;
  for (const StageReport& s : stages) {
    if (s.type == "ultrasound.report") r = &s;
  }
  if (r == nullptr) return;
  auto get = [&](const std::string& name) { return static_cast<double>(counter_or(*r, name, 0)); };
  auto ratio = [&j](double a, double b) { j.value_or_null(b > 0, b > 0 ? a / b : 0.0); };
  j.key("ultrasound");
  j.begin_object();
  j.field("frames", counter_or(*r, "frames", 0));
  j.field("scored_frames", counter_or(*r, "scored_frames", 0));
  j.field("lesions", counter_or(*r, "lesions_truth", 0));
  j.key("dice_mean");
  ratio(get("dice_sum_ppm") / 1e6, get("lesions_truth"));
  j.key("dice_by_type");
  j.begin_object();
  const std::string prefix = "lesions_truth.";
  for (const auto& [name, n] : r->counters) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string type = name.substr(prefix.size());
    j.key(type);
    ratio(get("dice_sum_ppm." + type) / 1e6, static_cast<double>(n));
  }
  j.end_object();
  j.key("flow_error_mean");
  ratio(get("flow_error_sum_ppm") / 1e6, get("vessels_truth"));
  j.key("report_facts_correct");
  ratio(get("facts_right"), get("facts"));
  j.field("latency_p50_ms", get("latency_p50_us") / 1000);
  j.field("latency_p99_ms", get("latency_p99_us") / 1000);
  j.end_object();
}

}  // namespace

std::string RunReport::to_json() const {
  std::string out;
  out.reserve(8192);
  JsonOut j(out);
  j.begin_object();
  j.field("pipeline", pipeline);
  j.field("ok", ok);
  j.field("finished", finished);
  j.field("duration_s", duration_s);
  if (!error.empty()) j.field("error", error);
  j.key("stages");
  j.begin_object();
  for (const StageReport& s : stages) {
    j.key(s.id);
    stage_json(j, s);
  }
  j.end_object();
  j.key("edges");
  j.begin_array();
  for (const EdgeReport& e : edges) edge_json(j, e);
  j.end_array();
  j.key("sinks");
  j.begin_object();
  for (const StageReport& s : stages) {
    if (!s.sink) continue;
    j.key(s.id);
    sink_json(j, s);
  }
  j.end_object();
  j.key("units");
  j.begin_object();
  for (const UnitReport& u : units) {
    j.key(u.id);
    unit_json(j, u);
  }
  j.end_object();
  j.key("coordinator");
  j.begin_object();
  j.field("refused_handshakes", coordinator.refused_handshakes);
  j.field("stale_refused", coordinator.stale_refused);
  j.end_object();
  j.key("failovers");
  j.begin_array();
  for (const FailoverReport& f : failovers) {
    j.begin_object();
    j.field("unit", f.unit);
    j.field("cause", f.cause);
    j.field("detected_s", f.detected_s);
    j.field("silent_ms", f.silent_ms);
    j.field("epoch", f.epoch);
    j.key("moved");
    j.strings(f.moved);
    j.key("lost");
    j.strings(f.lost);
    j.key("first_output_ms");
    j.value_or_null(f.first_output_ms >= 0, f.first_output_ms);
    j.field("replayed", f.replayed);
    j.field("duplicates_dropped", f.duplicates_dropped);
    j.key("lost_why");
    j.strings(f.lost_why);
    j.end_object();
  }
  j.end_array();
  j.key("moves");
  j.begin_array();
  for (const MoveReport& m : moves) {
    j.begin_object();
    j.field("at_s", m.at_s);
    j.field("kind", m.kind);
    j.field("stage", m.stage);
    j.field("replica", m.replica);
    j.field("from", m.from);
    j.field("to", m.to);
    j.field("why", m.why);
    j.field("epoch", m.epoch);
    j.field("drain_ms", m.drain_ms);
    j.field("keys", m.keys);
    j.key("latency_p99_before_ms");
    j.value_or_null(m.latency_p99_before_ms >= 0, m.latency_p99_before_ms);
    j.key("latency_p99_around_ms");
    j.value_or_null(m.latency_p99_around_ms >= 0, m.latency_p99_around_ms);
    j.end_object();
  }
  j.end_array();
  j.key("consensus");
  j.begin_object();
  for (const ConsensusReport& c : consensus) {
    j.key(c.stage);
    j.begin_object();
    j.field("decisions", c.decisions);
    j.field("wrong", c.wrong);
    j.field("checked", c.checked);
    j.field("without_quorum", c.without_quorum);
    j.field("corrections", c.corrections);
    j.field("fast", c.fast);
    j.field("leader_changes", c.leader_changes);
    j.field("late_votes", c.late_votes);
    j.key("added_latency_ms");
    j.begin_object();
    j.field("p50", c.added_latency_p50_ms);
    j.field("p99", c.added_latency_p99_ms);
    j.end_object();
    j.end_object();
  }
  j.end_object();
  j.key("replicas");
  j.begin_array();
  static const LeKeys les;
  for (const ReplicaReport& x : replicas) {
    j.begin_object();
    j.field("stage", x.stage);
    j.field("replica", x.replica);
    j.field("unit", x.unit);
    j.field("processed", x.processed);
    j.field("errors", x.errors);
    j.field("restarts", x.restarts);
    j.field("dead_letters", x.dead_letters);
    j.field("queued", x.queued);
    if (x.standby) j.field("standby", true);
    j.key("service_s");
    j.begin_object();
    std::uint64_t n = 0;
    for (const auto b : x.service_buckets) n += b;
    j.field("count", n);
    j.field("sum_s", x.service_sum_s);
    j.key("le");
    j.begin_object();
    n = 0;
    for (std::size_t b = 0; b < x.service_buckets.size(); ++b) {
      n += x.service_buckets[b];
      if (b < static_cast<std::size_t>(kServiceBuckets)) j.field(les.key[b], n);
    }
    j.end_object();
    j.end_object();
    j.end_object();
  }
  j.end_array();
  ultrasound_json(j, stages);
  j.end_object();
  return out;
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
