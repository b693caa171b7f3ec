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

void SimWork::setup(StageSpec& s) {
  in_ = s.input<schema::Blob>("in", "blobs to work on");
  out_ = s.output<schema::Blob>("out", "the same blobs, after the work");
  s.param(service_us_, "service_us", "mean service time per envelope in microseconds", 0.0, {0.0, 1e8});
  s.param(jitter_us_, "jitter_us", "uniform jitter added to the service time, +/- microseconds", 0.0,
          {0.0, 1e8});
  s.param(fail_every_, "fail_every", "throw on every n-th envelope, 0 = never", 0, {0.0, {}});
}

Status SimWork::start(StageContext& ctx) {
  seen_ = 0;
  rng_.seed(0x5eed + static_cast<std::uint64_t>(ctx.replica()));
  return {};
}

Status SimWork::process(Inputs& in, Outputs& out, StageContext& ctx) {
  const Envelope* e = in.envelope(in_);
  if (e == nullptr) return {};
  ++seen_;
  if (fail_every_ > 0 && seen_ % fail_every_ == 0) {
    throw std::runtime_error("sim.work: scheduled failure");
  }
  double us = service_us_;
  if (jitter_us_ > 0) {
    std::uniform_real_distribution<double> d(-jitter_us_, jitter_us_);
    us = std::max(0.0, us + d(rng_));
  }
  simulate_service(us / std::max(ctx.speed(), 1e-6));
  out.forward(out_, *e);
  return {};
}

}  // namespace swarmflow::sim
