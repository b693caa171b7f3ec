#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "metrics/histogram.hpp"

namespace swarmflow::metrics {
namespace {

constexpr std::int64_t kUs = 1000;
constexpr std::int64_t kMs = 1000 * kUs;

TEST(Histogram, UniformMicrosecondsGiveP50AndP99WithinTwoPercent) {
  LatencyHistogram h;
  for (std::int64_t us = 1; us <= 10000; ++us) h.record(us * kUs);
  EXPECT_EQ(h.count(), 10000U);
  EXPECT_NEAR(static_cast<double>(h.quantile_ns(0.5)), 5.0 * kMs, 0.02 * 5.0 * kMs);
  EXPECT_NEAR(static_cast<double>(h.quantile_ns(0.99)), 9.9 * kMs, 0.02 * 9.9 * kMs);
  EXPECT_NEAR(static_cast<double>(h.quantile_ns(0.999)), 9.99 * kMs, 0.02 * 9.99 * kMs);
  EXPECT_EQ(h.quantile_ns(1.0), 10 * kMs);
  EXPECT_EQ(h.max_ns(), 10 * kMs);

  const LatencySummary s = h.summary();
  EXPECT_EQ(s.count, 10000U);
  EXPECT_NEAR(s.p50_ms, 5.0, 0.1);
  EXPECT_NEAR(s.p99_ms, 9.9, 0.198);
  EXPECT_NEAR(s.p999_ms, 9.99, 0.2);
  EXPECT_DOUBLE_EQ(s.max_ms, 10.0);
}

TEST(Histogram, QuantilesAreNonDecreasingAndNeverAboveMax) {
  LatencyHistogram h;
  for (std::int64_t v = 1; v < 5000; v += 7) h.record(v * v);
  std::int64_t last = 0;
  for (int i = 0; i <= 1000; ++i) {
    const std::int64_t q = h.quantile_ns(i / 1000.0);
    EXPECT_GE(q, last);
    EXPECT_LE(q, h.max_ns());
    last = q;
  }
  EXPECT_EQ(h.quantile_ns(1.0), h.max_ns());
}

TEST(Histogram, SingleValueIsReportedExactly) {
  LatencyHistogram h;
  h.record(1234567);
  EXPECT_EQ(h.quantile_ns(0.0), 1234567);
  EXPECT_EQ(h.quantile_ns(0.5), 1234567);
  EXPECT_EQ(h.quantile_ns(1.0), 1234567);
}

TEST(Histogram, RelativeErrorStaysBelowTwoPercentAcrossTheRange) {
  const std::vector<std::int64_t> values = {0,        1,         63,          64,          65,
                                            100,      999,       1000,        12345,       kMs,
                                            987654321, 10 * 1000 * kMs, 1'000'000 * kMs, 10'000'000 * kMs};
  for (std::int64_t v : values) {
    LatencyHistogram h;
    h.record(v);
    h.record(std::numeric_limits<std::int64_t>::max());
    // Rank 1 of 2: the upper edge of v's bucket, bounded by the larger value.
    const std::int64_t q = h.quantile_ns(0.5);
    EXPECT_GE(q, v) << v;
    EXPECT_LE(static_cast<double>(q), static_cast<double>(v) * 1.02 + 1) << v;
  }
}

TEST(Histogram, MergeEqualsRecordingEverythingInOne) {
  LatencyHistogram all;
  LatencyHistogram odd;
  LatencyHistogram even;
  for (std::int64_t us = 1; us <= 10000; ++us) {
    all.record(us * kUs);
    (us % 2 == 0 ? even : odd).record(us * kUs);
  }
  LatencyHistogram merged;
  merged.merge(odd);
  merged.merge(even);
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.max_ns(), all.max_ns());
  for (double q : {0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    EXPECT_EQ(merged.quantile_ns(q), all.quantile_ns(q)) << q;
  }
}

TEST(Histogram, MergeOfAnEmptyHistogramChangesNothing) {
  LatencyHistogram h;
  h.record(5 * kMs);
  h.merge(LatencyHistogram{});
  EXPECT_EQ(h.count(), 1U);
  EXPECT_EQ(h.quantile_ns(0.5), 5 * kMs);
}

TEST(Histogram, EmptyHistogramReportsZeros) {
  const LatencyHistogram h;
  EXPECT_EQ(h.count(), 0U);
  EXPECT_EQ(h.max_ns(), 0);
  EXPECT_EQ(h.quantile_ns(0.5), 0);
  EXPECT_EQ(h.quantile_ns(1.0), 0);
  const LatencySummary s = h.summary();
  EXPECT_EQ(s.count, 0U);
  EXPECT_EQ(s.p50_ms, 0.0);
  EXPECT_EQ(s.p99_ms, 0.0);
  EXPECT_EQ(s.p999_ms, 0.0);
  EXPECT_EQ(s.max_ms, 0.0);
}

TEST(Histogram, HugeValuesShareTheLastBucketAndKeepTheMax) {
  LatencyHistogram h;
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  for (int i = 0; i < 98; ++i) h.record(kMs);
  h.record(huge / 2);
  h.record(huge);
  EXPECT_EQ(h.count(), 100U);
  EXPECT_EQ(h.max_ns(), huge);
  EXPECT_EQ(h.quantile_ns(1.0), huge);
  EXPECT_EQ(h.quantile_ns(0.995), huge);
  EXPECT_LE(h.quantile_ns(0.98), kMs * 102 / 100);
  EXPECT_GE(h.quantile_ns(0.99), 1'000'000 * kMs);
}

TEST(Histogram, NegativeValuesCountAsZero) {
  LatencyHistogram h;
  h.record(-5);
  h.record(-1);
  EXPECT_EQ(h.count(), 2U);
  EXPECT_EQ(h.max_ns(), 0);
  EXPECT_EQ(h.quantile_ns(1.0), 0);
}

TEST(Histogram, OutOfRangeQuantilesAreClamped) {
  LatencyHistogram h;
  for (std::int64_t us = 1; us <= 100; ++us) h.record(us * kUs);
  EXPECT_EQ(h.quantile_ns(-1.0), h.quantile_ns(0.0));
  EXPECT_EQ(h.quantile_ns(2.0), h.max_ns());
}

TEST(Histogram, CountAtMostCountsASampleOnceItsWholeBucketIsAtOrBelow) {
  LatencyHistogram h;
  for (std::int64_t v = 0; v < 64; ++v) h.record(v);  // one bucket each
  h.record(1024);                                      // the bucket 1024..1039
  h.record(std::int64_t{1} << 50);                     // the last, open-ended bucket
  EXPECT_EQ(h.count_at_most(-1), 0u);
  EXPECT_EQ(h.count_at_most(0), 1u);
  EXPECT_EQ(h.count_at_most(10), 11u);
  EXPECT_EQ(h.count_at_most(63), 64u);
  EXPECT_EQ(h.count_at_most(1024), 64u) << "its bucket reaches above 1024";
  EXPECT_EQ(h.count_at_most(1038), 64u);
  EXPECT_EQ(h.count_at_most(1039), 65u) << "its bucket's upper edge";
  EXPECT_EQ(h.count_at_most(5'000'000'000), 65u);
  EXPECT_EQ(h.count_at_most(std::numeric_limits<std::int64_t>::max()), 66u);
  // Never more for a smaller bound.
  std::uint64_t before = 0;
  for (std::int64_t ns = 0; ns < 5000; ns += 7) {
    const std::uint64_t n = h.count_at_most(ns);
    ASSERT_GE(n, before) << ns;
    before = n;
  }
}

}  // namespace
}  // namespace swarmflow::metrics
