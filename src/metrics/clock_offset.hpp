#pragma once
// How far apart two processes' steady clocks are, from the four times of a
// request and its answer (as NTP does): the unit sends at t0 (its clock), the
// coordinator receives at t1 and answers at t2 (its clock), the unit receives
// at t3. Then offset = ((t1 - t0) + (t2 - t3)) / 2 is the coordinator's clock
// minus the unit's, wrong by at most half the round trip
// delay = (t3 - t0) - (t2 - t1). Of the last few samples the one with the
// least delay is trusted (NTP's clock filter): queueing only ever lengthens
// a trip, and it makes the two directions unequal. Pure code.

#include <cstddef>
#include <cstdint>
#include <deque>

namespace swarmflow::metrics {

/// One exchange's four times, in ns.
struct ClockSample {
  std::int64_t t0 = 0;  ///< request sent (client's clock)
  std::int64_t t1 = 0;  ///< request received (server's clock)
  std::int64_t t2 = 0;  ///< answer sent (server's clock)
  std::int64_t t3 = 0;  ///< answer received (client's clock)
};

struct ClockEstimate {
  bool valid = false;         ///< a sample has been taken
  std::int64_t offset_ns = 0;  ///< server's clock minus client's
  std::int64_t delay_ns = 0;   ///< round trip of the sample it rests on; the offset is within +- delay_ns / 2
};

class ClockOffsetEstimator {
 public:
  /// Trusts the best of the last `window` samples (at least 1).
  explicit ClockOffsetEstimator(std::size_t window = 8);
  /// Takes a sample; false (and ignored) when its times cannot be: the
  /// answer came back before the request left (t3 < t0) or was sent before
  /// the request arrived (t2 < t1), or it took longer to answer than the
  /// round trip lasted.
  bool add(const ClockSample& s);
  ClockEstimate estimate() const;

 private:
  std::size_t window_;
  std::deque<ClockEstimate> samples_;
};

}  // namespace swarmflow::metrics
