// The clock-offset estimate from four-time exchanges, on made-up clocks: the
// server's clock runs `offset` ahead of the client's, and each direction of
// a trip takes its own time.

#include <gtest/gtest.h>

#include "metrics/clock_offset.hpp"

namespace swarmflow::metrics {
namespace {

/// An exchange sent at client time `t0`, taking `up` to the server, `hold`
/// there and `down` back, with the server's clock `offset` ahead.
ClockSample exchange(std::int64_t t0, std::int64_t offset, std::int64_t up, std::int64_t hold, std::int64_t down) {
  ClockSample s;
  s.t0 = t0;
  s.t1 = t0 + up + offset;
  s.t2 = s.t1 + hold;
  s.t3 = t0 + up + hold + down;
  return s;
}

TEST(ClockOffset, NoSampleNoEstimate) { EXPECT_FALSE(ClockOffsetEstimator().estimate().valid); }

TEST(ClockOffset, ASymmetricTripGivesTheOffsetExactly) {
  ClockOffsetEstimator e;
  ASSERT_TRUE(e.add(exchange(1'000'000, 5'000'000, 40'000, 10'000, 40'000)));
  EXPECT_TRUE(e.estimate().valid);
  EXPECT_EQ(e.estimate().offset_ns, 5'000'000);
  EXPECT_EQ(e.estimate().delay_ns, 80'000);
}

TEST(ClockOffset, ABehindServerGivesANegativeOffset) {
  ClockOffsetEstimator e;
  ASSERT_TRUE(e.add(exchange(9'000'000'000'000, -7'000'000'000'000, 1'000, 0, 1'000)));
  EXPECT_EQ(e.estimate().offset_ns, -7'000'000'000'000);
}

TEST(ClockOffset, AnAsymmetricTripIsWrongByAtMostHalfItsDelay) {
  ClockOffsetEstimator e;
  ASSERT_TRUE(e.add(exchange(0, 2'000'000, 900'000, 0, 100'000)));
  const ClockEstimate est = e.estimate();
  EXPECT_NE(est.offset_ns, 2'000'000);
  EXPECT_LE(std::llabs(est.offset_ns - 2'000'000), est.delay_ns / 2);
}

TEST(ClockOffset, TheQuickestOfTheWindowIsTrusted) {
  ClockOffsetEstimator e(4);
  e.add(exchange(0, 3'000'000, 5'000'000, 0, 100'000));       // queued on the way up: off by ~2.45 ms
  e.add(exchange(10'000'000, 3'000'000, 20'000, 5'000, 20'000));  // quick and even
  e.add(exchange(20'000'000, 3'000'000, 100'000, 0, 4'000'000));  // queued on the way back
  EXPECT_EQ(e.estimate().offset_ns, 3'000'000);
  EXPECT_EQ(e.estimate().delay_ns, 40'000);
  // Once the quick one leaves the window, the best of the rest is trusted.
  for (int i = 0; i < 4; ++i) e.add(exchange(30'000'000 + i, 3'000'000, 200'000, 0, 300'000));
  EXPECT_EQ(e.estimate().delay_ns, 500'000);
  EXPECT_LE(std::llabs(e.estimate().offset_ns - 3'000'000), 250'000);
}

TEST(ClockOffset, ImpossibleTimesAreRefused) {
  ClockOffsetEstimator e;
  ClockSample back_in_time = exchange(1000, 0, 10, 0, 10);
  back_in_time.t3 = 500;
  EXPECT_FALSE(e.add(back_in_time));
  ClockSample answered_early = exchange(1000, 0, 10, 0, 10);
  answered_early.t2 = answered_early.t1 - 1;
  EXPECT_FALSE(e.add(answered_early));
  ClockSample held_too_long = exchange(1000, 0, 10, 0, 10);
  held_too_long.t2 = held_too_long.t1 + 1'000'000;
  EXPECT_FALSE(e.add(held_too_long));
  EXPECT_FALSE(e.estimate().valid);
}

}  // namespace
}  // namespace swarmflow::metrics
