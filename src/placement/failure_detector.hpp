#pragma once
// Failure detection: phi-accrual (Hayashibara et al., "The phi accrual failure
// detector", 2004) over a sliding window of heartbeat inter-arrival times, as
// Akka's PhiAccrualFailureDetector computes it. Pure: no CAF, no ZeroMQ; the
// caller gives the time, in ns of a steady clock, so it is tested on
// simulated time.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include <swarmflow/status.hpp>

#include "config/pipeline_spec.hpp"

namespace swarmflow::placement {

/// Whether `settings` can drive a detector: every time positive and finite
/// (the acceptable pause may be 0), a window of at least 2 intervals. The
/// error names the first setting that is not.
Status validate(const config::FailureDecl& settings);

/// The suspicion that a peer has failed, from the heartbeats heard from it.
///
/// phi(now) = -log10(P(a heartbeat comes later than now)), where the interval
/// between heartbeats is taken as normally distributed with the mean of the
/// window plus `acceptable_pause_ms` and its standard deviation, but at least
/// `min_std_ms`. phi 1 means a 10% chance that the peer is only late, phi 8
/// one in 10^8. The peer is suspected when phi reaches `phi_threshold`.
/// Before the first heartbeat it is never suspected; from the first until
/// intervals are measured, `heartbeat_ms` (+-25%) stands in for them.
class FailureDetector {
 public:
  /// Throws std::invalid_argument when `validate(settings)` fails.
  explicit FailureDetector(const config::FailureDecl& settings);

  /// A heartbeat (or any message) from the peer arrived at `now_ns`.
  void heartbeat(std::int64_t now_ns);

  /// The suspicion at `now_ns`: 0 before the first heartbeat, then growing
  /// with the silence since the last one, without bound.
  double phi(std::int64_t now_ns) const;
  /// phi is below the threshold.
  bool available(std::int64_t now_ns) const { return phi(now_ns) < settings_.phi_threshold; }
  bool suspected(std::int64_t now_ns) const { return !available(now_ns); }

  /// Whether any heartbeat has arrived.
  bool heard() const { return last_ns_.has_value(); }
  /// Time since the last heartbeat (0 before the first).
  std::int64_t silence_ns(std::int64_t now_ns) const { return last_ns_ ? now_ns - *last_ns_ : 0; }
  /// The silence at which phi reaches the threshold with the intervals seen
  /// so far: when a peer that stops now will be declared dead.
  std::int64_t suspicion_after_ns() const;

  /// Mean and standard deviation of the intervals in the window, in ms.
  double mean_ms() const { return mean_ms_; }
  double std_ms() const { return std_ms_; }
  const config::FailureDecl& settings() const { return settings_; }

 private:
  void add_interval(double ms);
  /// phi of a silence of `silence_ms`.
  double phi_of(double silence_ms) const;

  config::FailureDecl settings_;
  std::optional<std::int64_t> last_ns_;
  std::deque<double> intervals_ms_;
  double sum_ = 0;
  double sum_squares_ = 0;
  std::uint64_t added_ = 0;
  double mean_ms_ = 0;
  double std_ms_ = 0;
};

/// A unit declared dead, and what it was declared on.
struct DeadUnit {
  std::size_t unit = 0;
  std::int64_t silent_ns = 0;  ///< since its last message
  double phi = 0;
};

/// One detector per unit, by unit index, as the coordinator keeps them.
/// A unit is watched from its first message until it is retired (it left as
/// planned) or declared dead, which happens once.
class FailureDetectors {
 public:
  FailureDetectors(const config::FailureDecl& settings, std::size_t units);

  /// A message from `unit` arrived at `now_ns`.
  void heartbeat(std::size_t unit, std::int64_t now_ns);
  /// `unit` has finished and may go quiet: it is no longer watched.
  void retire(std::size_t unit);
  /// `unit` was declared dead and is heard again at `now_ns` (restarted):
  /// it is watched again from scratch, with no history.
  void rejoin(std::size_t unit, std::int64_t now_ns);
  /// The units suspected at `now_ns` that were not declared dead before;
  /// from now on they are.
  std::vector<DeadUnit> declare_dead(std::int64_t now_ns);
  bool dead(std::size_t unit) const { return dead_[unit]; }
  const FailureDetector& detector(std::size_t unit) const { return detectors_[unit]; }
  std::size_t size() const { return detectors_.size(); }

 private:
  std::vector<FailureDetector> detectors_;
  std::vector<bool> retired_;
  std::vector<bool> dead_;
};

}  // namespace swarmflow::placement
