#include "sim/sim_stages.hpp"

#include <sstream>

namespace swarmflow::sim {

SequenceChecker::Verdict SequenceChecker::observe(std::uint64_t stream, std::uint64_t seq,
                                                  std::uint64_t* newly_missing) {
  // Bound on remembered gaps per stream, so memory stays bounded under heavy loss.
  constexpr std::size_t kMaxMissing = 1 << 16;
  *newly_missing = 0;
  StreamState& st = streams_[stream];
  if (seq == st.next) {
    ++st.next;
    return Verdict::in_order;
  }
  if (seq > st.next) {
    *newly_missing = seq - st.next;
    for (std::uint64_t s = st.next; s < seq && st.missing.size() < kMaxMissing; ++s) st.missing.insert(s);
    st.next = seq + 1;
    return Verdict::gap;
  }
  if (st.missing.erase(seq) != 0) return Verdict::late;
  return Verdict::duplicate;
}

std::string SequenceChecker::save() const {
  std::string out;
  for (const auto& [stream, st] : streams_) {
    out += std::to_string(stream) + " " + std::to_string(st.next);
    for (std::uint64_t m : st.missing) out += " " + std::to_string(m);
    out += "\n";
  }
  return out;
}

bool SequenceChecker::load(const std::string& text) {
  std::unordered_map<std::uint64_t, StreamState> streams;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::uint64_t stream = 0;
    StreamState st;
    if (!(in >> stream >> st.next)) return false;
    std::uint64_t m = 0;
    while (in >> m) st.missing.insert(m);
    if (!in.eof()) return false;
    streams[stream] = std::move(st);
  }
  streams_ = std::move(streams);
  return true;
}

bool SequenceChecker::take(std::uint64_t stream, std::string& out) {
  const auto it = streams_.find(stream);
  if (it == streams_.end()) return false;
  out = std::to_string(stream) + " " + std::to_string(it->second.next);
  for (std::uint64_t m : it->second.missing) out += " " + std::to_string(m);
  streams_.erase(it);
  return true;
}

bool SequenceChecker::give(std::uint64_t stream, const std::string& text) {
  SequenceChecker one;
  if (!one.load(text) || one.streams_.size() != 1 || one.streams_.begin()->first != stream) return false;
  streams_[stream] = std::move(one.streams_.begin()->second);
  return true;
}

bool SimSink::take_key(std::uint64_t key, std::string& out) { return checker_.take(key, out); }

Status SimSink::give_key(std::uint64_t key, const std::string& state) {
  if (!checker_.give(key, state)) {
    return Status::error("sim.sink: state of stream " + std::to_string(key) + " it cannot read", StatusCode::invalid_argument);
  }
  return {};
}

bool SimSink::snapshot(std::string& out) const {
  out = checker_.save();
  return true;
}

Status SimSink::restore(const std::string& state) {
  if (!checker_.load(state)) return Status::error("sim.sink: a snapshot it cannot read", StatusCode::invalid_argument);
  return {};
}

void SimSink::setup(StageSpec& s) {
  in_ = s.input<schema::Blob>("in", "blobs to check");
  s.param(service_us_, "service_us", "service time per envelope in microseconds", 0.0, {0.0, 1e8});
}

Status SimSink::start(StageContext& ctx) {
  received_ = &ctx.counter("received");
  lost_ = &ctx.counter("lost");
  duplicate_ = &ctx.counter("duplicate");
  reordered_ = &ctx.counter("reordered");
  return {};
}

Status SimSink::process(Inputs& in, Outputs&, StageContext& ctx) {
  const Envelope* e = in.envelope(in_);
  if (e == nullptr) return {};
  simulate_service(service_us_ / std::max(ctx.speed(), 1e-6));
  received_->fetch_add(1, std::memory_order_relaxed);
  std::uint64_t missing = 0;
  switch (checker_.observe(e->header().stream, e->header().seq, &missing)) {
    case SequenceChecker::Verdict::in_order:
      break;
    case SequenceChecker::Verdict::gap:
      // Only a later envelope reveals a gap: what a producer drops after the
      // last one this sink gets is counted by the edge, never here.
      lost_->fetch_add(static_cast<std::int64_t>(missing), std::memory_order_relaxed);
      break;
    case SequenceChecker::Verdict::late:
      // Counted as lost when the gap was seen; it came after all, out of order.
      lost_->fetch_sub(1, std::memory_order_relaxed);
      reordered_->fetch_add(1, std::memory_order_relaxed);
      break;
    case SequenceChecker::Verdict::duplicate:
      duplicate_->fetch_add(1, std::memory_order_relaxed);
      break;
  }
  return {};
}

}  // namespace swarmflow::sim
