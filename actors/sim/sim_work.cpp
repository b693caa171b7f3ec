#include <chrono>
#include <stdexcept>
#include <thread>

#include "sim/sim_stages.hpp"

namespace swarmflow::sim {

void simulate_service(double us) {
  if (us <= 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(static_cast<std::int64_t>(us * 1e3));
  if (us >= 100) {
    std::this_thread::sleep_until(until);
    return;
  }
  while (std::chrono::steady_clock::now() < until) {
  }
}

namespace {
/// Answers a sim.work replica remembers for re-sync.
constexpr std::size_t kAnswersKept = 4096;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

std::uint64_t sim_answer(std::uint64_t stream, std::uint64_t seq) { return mix(mix(stream) ^ seq) >> 1; }

void SimWork::setup(StageSpec& s) {
  in_ = s.input<schema::Blob>("in", "blobs to work on");
  agreed_ = s.optional_input<schema::VoteDecision>(
      "agreed", "a voter's decisions (a feedback edge): a replica that answered otherwise takes the agreed answer");
  out_ = s.output<schema::Blob>("out", "the same blobs, after the work");
  s.param(service_us_, "service_us", "mean service time per envelope in microseconds", 0.0, {0.0, 1e8});
  s.param(jitter_us_, "jitter_us", "uniform jitter added to the service time, +/- microseconds", 0.0,
          {0.0, 1e8});
  s.param(fail_every_, "fail_every", "throw on every n-th envelope, 0 = never", 0, {0.0, {}});
  s.param(answer_confidence_, "answer_confidence",
          "answer with this confidence: vote_key the right answer for (stream, seq); 0 = pass the header on", 0.0,
          {0.0, 1.0});
  s.param(fault_replica_, "fault_replica", "the replica the faults below apply to, -1 = none", -1, {-1.0, 1023.0});
  s.param(lie_every_, "lie_every", "the faulty replica answers wrongly on every k-th envelope, 0 = never", 0,
          {0.0, {}});
  s.param(lie_confidence_, "lie_confidence", "the confidence the faulty replica claims when it lies", 0.99,
          {0.0, 1.0});
  s.param(slow_us_, "slow_us", "service time the faulty replica adds per envelope, microseconds", 0.0, {0.0, 1e8});
  s.param(crash_after_, "crash_after",
          "the faulty replica answers nothing after this many envelopes (a hung replica), 0 = never", 0, {0.0, {}});
}

Status SimWork::start(StageContext& ctx) {
  seen_ = 0;
  rng_.seed(0x5eed + static_cast<std::uint64_t>(ctx.replica()));
  faulty_ = fault_replica_ >= 0 && fault_replica_ == ctx.replica();
  answers_.clear();
  answer_ring_.assign(kAnswersKept, 0);
  answer_next_ = 0;
  lies_ = &ctx.counter("lies");
  silenced_ = &ctx.counter("silenced");
  resynced_ = &ctx.counter("resynced");
  return {};
}

Status SimWork::process(Inputs& in, Outputs& out, StageContext& ctx) {
  if (const auto* decision = in.get(agreed_)) {
    resync(*decision);
    return {};
  }
  const Envelope* e = in.envelope(in_);
  if (e == nullptr) return {};
  ++seen_;
  if (fail_every_ > 0 && seen_ % fail_every_ == 0) {
    throw std::runtime_error("sim.work: scheduled failure");
  }
  double us = service_us_ + (faulty_ ? slow_us_ : 0.0);
  if (jitter_us_ > 0) {
    std::uniform_real_distribution<double> d(-jitter_us_, jitter_us_);
    us = std::max(0.0, us + d(rng_));
  }
  simulate_service(us / std::max(ctx.speed(), 1e-6));
  if (faulty_ && crash_after_ > 0 && seen_ > crash_after_) {
    silenced_->fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  if (answer_confidence_ <= 0) {
    out.forward(out_, *e);
    return {};
  }
  EnvelopeHeader h = e->header();
  h.vote_key = sim_answer(h.stream, h.seq);
  h.confidence = static_cast<float>(answer_confidence_);
  if (faulty_ && lie_every_ > 0 && seen_ % lie_every_ == 0) {
    h.vote_key = h.vote_key + 1 + static_cast<std::uint64_t>(seen_ % 7);
    h.confidence = static_cast<float>(lie_confidence_);
    lies_->fetch_add(1, std::memory_order_relaxed);
  }
  const std::uint64_t id = mix(h.stream) ^ h.seq;
  if (answers_.size() >= kAnswersKept) answers_.erase(answer_ring_[answer_next_]);
  answers_[id] = h.vote_key;
  answer_ring_[answer_next_] = id;
  answer_next_ = (answer_next_ + 1) % kAnswersKept;
  out.forward(out_, e->with_header(h));
  return {};
}

void SimWork::resync(const schema::VoteDecision& decision) {
  auto it = answers_.find(mix(decision.stream()) ^ decision.seq());
  if (it == answers_.end() || it->second == decision.vote_key()) return;
  // A sim replica's whole state is its answer: it takes the agreed one.
  it->second = decision.vote_key();
  resynced_->fetch_add(1, std::memory_order_relaxed);
}

}  // namespace swarmflow::sim
