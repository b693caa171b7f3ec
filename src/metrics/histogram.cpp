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
  const int b = bucket_of(ns);
  ++buckets_[static_cast<std::size_t>(b)];
  top_ = std::max(top_, b + 1);
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
  const auto end = static_cast<std::size_t>(std::min(upper_edge(holding) <= ns ? holding + 1 : holding, top_));
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < end; ++i) n += buckets_[i];
  return n;
}

void LatencyHistogram::clear() {
  std::fill(buckets_.begin(), buckets_.begin() + top_, 0);
  top_ = 0;
  count_ = 0;
  max_ = 0;
  sum_ns_ = 0;
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  for (std::size_t i = 0; i < static_cast<std::size_t>(other.top_); ++i) buckets_[i] += other.buckets_[i];
  top_ = std::max(top_, other.top_);
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
  for (int b = 0; b < top_; ++b) {
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

LatencySummary LatencyHistogram::summarize(const std::int64_t* bounds_ns, std::size_t n, std::uint64_t* at_most) const {
  LatencySummary s;
  s.count = count_;
  s.max_ms = to_ms(max_);
  // The sums of the groups of kSub buckets in use, in one straight pass
  // (no branch per bucket: a look must not pay a mispredicted branch for
  // each of a few thousand buckets); then each bound and quantile adds up
  // whole groups and scans within one.
  const auto* buckets = buckets_.data();
  std::uint64_t group[kPowers] = {};
  const int groups = (top_ + kSub - 1) / kSub;
  for (int g = 0; g < groups; ++g) {
    std::uint64_t sum = 0;
    const int from = g * kSub;
    const int to = std::min(from + kSub, top_);
    for (int b = from; b < to; ++b) sum += buckets[b];
    group[g] = sum;
  }
  // Samples in buckets [0, end): count_at_most's sum.
  auto below = [&](int end) {
    end = std::min(end, top_);
    std::uint64_t sum = 0;
    const int whole = end / kSub;
    for (int g = 0; g < whole; ++g) sum += group[g];
    for (int b = whole * kSub; b < end; ++b) sum += buckets[b];
    return sum;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t ns = bounds_ns[i];
    if (ns < 0) {
      at_most[i] = 0;
      continue;
    }
    const int holding = bucket_of(ns);
    at_most[i] = below(upper_edge(holding) <= ns ? holding + 1 : holding);
  }
  // quantile_ns's value: the upper edge of the bucket where the running sum reaches the rank.
  auto value_at = [&](double q) -> std::int64_t {
    if (count_ == 0) return 0;
    const double exact = q * static_cast<double>(count_);
    const auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(exact - exact * 1e-12)));
    std::uint64_t seen = 0;
    for (int g = 0; g < groups; ++g) {
      if (seen + group[g] < rank) {
        seen += group[g];
        continue;
      }
      for (int b = g * kSub; b < top_; ++b) {
        seen += buckets[b];
        if (seen >= rank) return b == kBuckets - 1 ? max_ : std::min(upper_edge(b), max_);
      }
    }
    return max_;
  };
  s.p50_ms = to_ms(value_at(0.5));
  s.p99_ms = to_ms(value_at(0.99));
  s.p999_ms = to_ms(value_at(0.999));
  return s;
}

void LatencyHistogram::add_bucket(int index, std::uint64_t count) {
  if (index < 0 || index >= kBuckets) return;
  buckets_[static_cast<std::size_t>(index)] += count;
  top_ = std::max(top_, index + 1);
  count_ += count;
  sum_ns_ += static_cast<double>(upper_edge(index)) * static_cast<double>(count);
}

}  // namespace swarmflow::metrics
