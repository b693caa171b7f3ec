#include "metrics/clock_offset.hpp"

#include <algorithm>

namespace swarmflow::metrics {

ClockOffsetEstimator::ClockOffsetEstimator(std::size_t window) : window_(std::max<std::size_t>(1, window)) {}

bool ClockOffsetEstimator::add(const ClockSample& s) {
  const std::int64_t round_trip = s.t3 - s.t0;
  const std::int64_t answer = s.t2 - s.t1;
  if (round_trip < 0 || answer < 0 || answer > round_trip) return false;
  ClockEstimate e;
  e.valid = true;
  // Halves first: the sum of two large clock readings must not overflow.
  e.offset_ns = (s.t1 - s.t0) / 2 + (s.t2 - s.t3) / 2;
  e.delay_ns = round_trip - answer;
  samples_.push_back(e);
  if (samples_.size() > window_) samples_.pop_front();
  return true;
}

ClockEstimate ClockOffsetEstimator::estimate() const {
  if (samples_.empty()) return {};
  return *std::min_element(samples_.begin(), samples_.end(),
                           [](const ClockEstimate& a, const ClockEstimate& b) { return a.delay_ns < b.delay_ns; });
}

}  // namespace swarmflow::metrics
