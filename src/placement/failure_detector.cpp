#include "placement/failure_detector.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace swarmflow::placement {

namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }

/// log(1 + e^z) without overflow for large z or loss for very negative z.
double softplus(double z) { return z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z)); }

}  // namespace

Status validate(const config::FailureDecl& s) {
  auto bad = [](const std::string& what) { return Status::error(what, StatusCode::invalid_argument); };
  if (s.heartbeat_ms <= 0) return bad("failure.heartbeat_ms must be positive, got " + std::to_string(s.heartbeat_ms));
  if (!positive(s.phi_threshold)) return bad("failure.phi_threshold must be positive, got " + std::to_string(s.phi_threshold));
  if (!positive(s.min_std_ms)) return bad("failure.min_std_ms must be positive, got " + std::to_string(s.min_std_ms));
  if (s.acceptable_pause_ms < 0) {
    return bad("failure.acceptable_pause_ms must be 0 or more, got " + std::to_string(s.acceptable_pause_ms));
  }
  if (s.window < 2) return bad("failure.window must be at least 2 intervals, got " + std::to_string(s.window));
  return {};
}

// -- FailureDetector ----------------------------------------------------------

FailureDetector::FailureDetector(const config::FailureDecl& settings) : settings_(settings) {
  if (Status s = validate(settings_); !s.ok()) throw std::invalid_argument(s.message());
}

void FailureDetector::heartbeat(std::int64_t now_ns) {
  if (!last_ns_) {
    // No interval yet: the expected one stands in, as two samples mean +- 25%
    // (Akka's first-heartbeat estimate), until real ones push them out.
    const double expected = static_cast<double>(settings_.heartbeat_ms);
    add_interval(expected * 0.75);
    add_interval(expected * 1.25);
  } else {
    // A clock that went back (it should not) counts as no time at all.
    add_interval(static_cast<double>(std::max<std::int64_t>(0, now_ns - *last_ns_)) / 1e6);
  }
  last_ns_ = now_ns;
}

void FailureDetector::add_interval(double ms) {
  intervals_ms_.push_back(ms);
  sum_ += ms;
  sum_squares_ += ms * ms;
  if (intervals_ms_.size() > static_cast<std::size_t>(settings_.window)) {
    const double old = intervals_ms_.front();
    intervals_ms_.pop_front();
    sum_ -= old;
    sum_squares_ -= old * old;
  }
  // Running sums drift as values leave them; they are made afresh once a
  // window, which keeps a heartbeat O(1) on average.
  if (++added_ % static_cast<std::uint64_t>(settings_.window) == 0) {
    sum_ = 0;
    sum_squares_ = 0;
    for (double v : intervals_ms_) {
      sum_ += v;
      sum_squares_ += v * v;
    }
  }
  const double n = static_cast<double>(intervals_ms_.size());
  mean_ms_ = sum_ / n;
  std_ms_ = std::sqrt(std::max(0.0, sum_squares_ / n - mean_ms_ * mean_ms_));
}

double FailureDetector::phi_of(double silence_ms) const {
  const double mean = mean_ms_ + static_cast<double>(settings_.acceptable_pause_ms);
  const double std = std::max(std_ms_, settings_.min_std_ms);
  const double y = (silence_ms - mean) / std;
  // The logistic approximation of the normal distribution's tail that Akka
  // uses (error below 1e-4): P(later) = 1 / (1 + e^z), so phi = log10(1 + e^z).
  const double z = y * (1.5976 + 0.070566 * y * y);
  return softplus(z) / std::log(10.0);
}

double FailureDetector::phi(std::int64_t now_ns) const {
  if (!last_ns_) return 0.0;
  return phi_of(static_cast<double>(silence_ns(now_ns)) / 1e6);
}

std::int64_t FailureDetector::suspicion_after_ns() const {
  // phi_of grows with the silence: bisect for where it meets the threshold.
  double low = 0;
  double high = 1;
  while (phi_of(high) < settings_.phi_threshold && high < 1e12) high *= 2;
  for (int i = 0; i < 64 && high - low > 1e-6; ++i) {
    const double mid = (low + high) / 2;
    (phi_of(mid) < settings_.phi_threshold ? low : high) = mid;
  }
  return static_cast<std::int64_t>(std::ceil(high * 1e6));
}

// -- FailureDetectors ---------------------------------------------------------

FailureDetectors::FailureDetectors(const config::FailureDecl& settings, std::size_t units)
    : detectors_(units, FailureDetector(settings)), retired_(units, false), dead_(units, false) {}

void FailureDetectors::heartbeat(std::size_t unit, std::int64_t now_ns) { detectors_[unit].heartbeat(now_ns); }

void FailureDetectors::retire(std::size_t unit) { retired_[unit] = true; }

void FailureDetectors::rejoin(std::size_t unit, std::int64_t now_ns) {
  detectors_[unit] = FailureDetector(detectors_[unit].settings());
  dead_[unit] = false;
  retired_[unit] = false;
  detectors_[unit].heartbeat(now_ns);
}

std::vector<DeadUnit> FailureDetectors::declare_dead(std::int64_t now_ns) {
  std::vector<DeadUnit> out;
  for (std::size_t u = 0; u < detectors_.size(); ++u) {
    const FailureDetector& d = detectors_[u];
    if (retired_[u] || dead_[u] || !d.heard()) continue;
    const double phi = d.phi(now_ns);
    if (phi < d.settings().phi_threshold) continue;
    dead_[u] = true;
    out.push_back(DeadUnit{u, d.silence_ns(now_ns), phi});
  }
  return out;
}

}  // namespace swarmflow::placement
