#pragma once
// A latency histogram with bounded memory: log-linear buckets over
// nanoseconds, 64 linear sub-buckets per power of two (~1.6% relative
// precision), from 0 to 2^44 ns (about 4.9 hours); larger values share the
// last bucket. Not thread-safe; merge per-thread copies.

#include <array>
#include <cstddef>
#include <cstdint>

#include <swarmflow/report.hpp>

namespace swarmflow::metrics {

class LatencyHistogram {
 public:
  /// Records one value in nanoseconds; negative values count as 0.
  void record(std::int64_t ns);
  /// Empties it (the buckets in use only: cheaper than a new one).
  void clear();
  /// Adds all of `other`'s samples.
  void merge(const LatencyHistogram& other);
  std::uint64_t count() const { return count_; }
  /// The value at quantile q in [0, 1], in nanoseconds (upper edge of its bucket,
  /// never above the largest value recorded).
  std::int64_t quantile_ns(double q) const;
  std::int64_t max_ns() const { return max_; }
  /// p50/p99/p99.9/max in milliseconds.
  LatencySummary summary() const;
  /// summary(), and count_at_most(bounds_ns[i]) into at_most[i] for each of
  /// the `n` bounds (ascending), in one pass over the buckets in use: what a
  /// report asks of every histogram at every look.
  LatencySummary summarize(const std::int64_t* bounds_ns, std::size_t n, std::uint64_t* at_most) const;
  /// Samples at most `ns` (exact at bucket edges, else to the bucket: a
  /// sample counts when its bucket's upper edge is at most `ns`).
  std::uint64_t count_at_most(std::int64_t ns) const;
  /// The sum of the samples, in nanoseconds (those added by bucket count at
  /// their bucket's upper edge).
  double sum_ns() const { return sum_ns_; }

  /// Visits every non-empty bucket as (index, count), to send a histogram to
  /// another process; `add_bucket` rebuilds it there.
  template <class F>
  void for_each_bucket(F&& f) const {
    for (int i = 0; i < top_; ++i) {
      if (buckets_[static_cast<std::size_t>(i)] != 0) f(i, buckets_[static_cast<std::size_t>(i)]);
    }
  }
  /// Adds `count` samples to bucket `index` (ignored when out of range).
  void add_bucket(int index, std::uint64_t count);
  /// Raises the recorded maximum to at least `ns`.
  void observe_max(std::int64_t ns) { max_ = ns > max_ ? ns : max_; }
  /// The largest value bucket `index` holds (its upper edge), ns: the
  /// maximum of a histogram rebuilt from buckets alone.
  static std::int64_t bucket_edge_ns(int index) { return upper_edge(index); }

 private:
  static constexpr int kSubBits = 6;       // 64 linear sub-buckets per power of two
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kMaxBits = 44;      // values below 2^44 ns have their own bucket
  // Groups of kSub buckets: one for the exact range [0, kSub), one per power of two above.
  static constexpr int kPowers = kMaxBits - kSubBits + 1;
  static constexpr int kBuckets = kPowers * kSub;
  static int bucket_of(std::int64_t ns);
  static std::int64_t upper_edge(int bucket);

  std::array<std::uint64_t, kBuckets> buckets_{};
  int top_ = 0;  ///< buckets at and above this are empty: reads and merges stop here
  std::uint64_t count_ = 0;
  std::int64_t max_ = 0;
  double sum_ns_ = 0;
};

}  // namespace swarmflow::metrics
