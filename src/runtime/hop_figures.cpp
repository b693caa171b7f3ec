#include "runtime/hop_figures.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace swarmflow::runtime {

void SharedLatency::flush() {
  if (count_ == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < count_; ++i) shared_.record(pending_[i]);
  count_ = 0;
}

void SharedLatency::merge(const metrics::LatencyHistogram& other) {
  std::lock_guard<std::mutex> lock(mutex_);
  shared_.merge(other);
}

metrics::LatencyHistogram SharedLatency::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shared_;
}

void TraceBuffer::add(const TraceStep& step) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (steps_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  steps_.push_back(step);
}

std::vector<TraceStep> TraceBuffer::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return steps_;
}

std::uint64_t TraceBuffer::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

void record_sampled_hops(SharedLatency* residence, SharedLatency* edge, SharedLatency* held, TraceBuffer* trace,
                         const TraceStep& who, const EnvelopeHeader& h, std::int64_t end_ns) {
  const std::int64_t arrived = h.hop_ns[h.hop_count - 1];
  const std::int64_t from = h.hop_count >= 2 ? h.hop_ns[h.hop_count - 2] : h.capture_ns;
  if (residence != nullptr) residence->record(end_ns - arrived, end_ns);
  if (h.sent_ns != 0) {
    if (edge != nullptr) edge->record(arrived - h.sent_ns, end_ns);
    if (held != nullptr && from != 0) held->record(h.sent_ns - from, end_ns);
  }
  if (trace != nullptr) {
    TraceStep step = who;
    step.stream = h.stream;
    step.seq = h.seq;
    step.arrived_ns = arrived;
    step.ended_ns = end_ns;
    step.from_ns = from;
    trace->add(step);
  }
}

void shift_times(EnvelopeHeader& h, std::int64_t shift_ns) {
  if (h.capture_ns != 0) h.capture_ns += shift_ns;
  if (h.sent_ns != 0) h.sent_ns += shift_ns;
  for (std::uint8_t i = 0; i < h.hop_count && i < kMaxHops; ++i) h.hop_ns[i] += shift_ns;
}

std::string trace_json(const std::vector<TraceStep>& steps, const std::vector<std::string>& stage_names,
                       const std::vector<std::string>& unit_names, std::int64_t shift_ns, std::uint64_t dropped) {
  using Json = nlohmann::ordered_json;
  Json events = Json::array();
  const auto name_of = [](const std::vector<std::string>& names, int i) {
    return i >= 0 && static_cast<std::size_t>(i) < names.size() ? names[static_cast<std::size_t>(i)]
                                                                   : std::to_string(i);
  };
  // Processes and threads named once: a process per unit, a thread per replica.
  std::vector<std::pair<int, int>> named;
  for (const TraceStep& s : steps) {
    const std::pair<int, int> who{s.unit, s.node * 1000 + s.replica};
    bool seen = false;
    for (const auto& n : named) seen = seen || n == who;
    if (seen) continue;
    if (std::none_of(named.begin(), named.end(), [&](const auto& n) { return n.first == s.unit; })) {
      events.push_back(Json{{"ph", "M"}, {"name", "process_name"}, {"pid", s.unit}, {"tid", 0},
                            {"args", {{"name", "unit " + name_of(unit_names, s.unit)}}}});
    }
    named.push_back(who);
    events.push_back(Json{{"ph", "M"}, {"name", "thread_name"}, {"pid", s.unit}, {"tid", who.second},
                          {"args", {{"name", name_of(stage_names, s.node) + "/" + std::to_string(s.replica)}}}});
  }
  for (const TraceStep& s : steps) {
    Json args = {{"stream", s.stream}, {"seq", s.seq}};
    if (s.from_ns != 0) args["hop_us"] = static_cast<double>(s.arrived_ns - s.from_ns) / 1e3;
    events.push_back(Json{{"ph", "X"},
                          {"name", name_of(stage_names, s.node)},
                          {"cat", "step"},
                          {"pid", s.unit},
                          {"tid", s.node * 1000 + s.replica},
                          {"ts", static_cast<double>(s.arrived_ns + shift_ns) / 1e3},
                          {"dur", static_cast<double>(s.ended_ns - s.arrived_ns) / 1e3},
                          {"args", std::move(args)}});
  }
  Json j = Json::object();
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  j["otherData"] = {{"producer", "swarmflow"}, {"dropped_steps", dropped}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace swarmflow::runtime
