#include "metrics/histogram.hpp"

#include <algorithm>
#include <cmath>

namespace swarmflow::metrics {

namespace {

// Position of the highest set bit of a positive value.
int highest_bit(std::uint64_t v) { return 63 - __builtin_clzll(v); }

double to_ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

// Values below kSub have one bucket each. Above, a value whose highest bit is
// b falls in group b - kSubBits + 1, split into kSub buckets of width
// 2^(b - kSubBits); the bucket's relative width is at most 1 / kSub.
int LatencyHistogram::bucket_of(std::int64_t ns) {
  if (ns < kSub) return static_cast<int>(std::max<std::int64_t>(ns, 0));
  const auto v = static_cast<std::uint64_t>(ns);
  const int shift = highest_bit(v) - kSubBits;
  const int bucket = (shift + 1) * kSub + static_cast<int>((v >> shift) - kSub);
  return std::min(bucket, kBuckets - 1);
}

std::int64_t LatencyHistogram::upper_edge(int bucket) {
  if (bucket < kSub) return bucket;
  const int shift = bucket / kSub - 1;
  const std::int64_t sub = bucket % kSub;
  const std::int64_t lower = (kSub + sub) << shift;
  return lower + (std::int64_t{1} << shift) - 1;
}

void LatencyHistogram::record(std::int64_t ns) {
  ns = std::max<std::int64_t>(ns, 0);
  ++buckets_[static_cast<std::size_t>(bucket_of(ns))];
  ++count_;
  max_ = std::max(max_, ns);
  sum_ns_ += static_cast<double>(ns);
}

std::uint64_t LatencyHistogram::count_at_most(std::int64_t ns) const {
  if (ns < 0) return 0;
  // Every bucket before the one that holds `ns` lies wholly at or below it;
  // that one counts when its upper edge does. A plain sum over a prefix:
  // the report asks this for 13 bounds of every histogram at every look.
  const int holding = bucket_of(ns);
  const auto end = static_cast<std::size_t>(upper_edge(holding) <= ns ? holding + 1 : holding);
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < end; ++i) n += buckets_[i];
  return n;
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  for (std::size_t i = 0; i < buckets_.size(); ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  max_ = std::max(max_, other.max_);
  sum_ns_ += other.sum_ns_;
}

std::int64_t LatencyHistogram::quantile_ns(double q) const {
  if (count_ == 0) return 0;
  if (!(q > 0)) q = 0;
  q = std::min(q, 1.0);
  // The rank of the sample at q, 1-based: the smallest r with r >= q * count
  // (less a rounding error, so that 0.99 * 100 is rank 99, not 100).
  const double exact = q * static_cast<double>(count_);
  const auto rank = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(std::ceil(exact - exact * 1e-12)));
  std::uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[static_cast<std::size_t>(b)];
    if (seen >= rank) {
      // The last bucket is open-ended: only the maximum bounds it.
      if (b == kBuckets - 1) return max_;
      return std::min(upper_edge(b), max_);
    }
  }
  return max_;
}

LatencySummary LatencyHistogram::summary() const {
  LatencySummary s;
  s.count = count_;
  s.p50_ms = to_ms(quantile_ns(0.5));
  s.p99_ms = to_ms(quantile_ns(0.99));
  s.p999_ms = to_ms(quantile_ns(0.999));
  s.max_ms = to_ms(max_);
  return s;
}

void LatencyHistogram::add_bucket(int index, std::uint64_t count) {
  if (index < 0 || index >= kBuckets) return;
  buckets_[static_cast<std::size_t>(index)] += count;
  count_ += count;
  sum_ns_ += static_cast<double>(upper_edge(index)) * static_cast<double>(count);
}

}  // namespace swarmflow::metrics
