// The histograms stages keep with StageContext::observe: values to two
// significant digits, kept as named counters so they travel, sum and
// restore like them.

#include <algorithm>
#include <cmath>
#include <string>

#include <swarmflow/report.hpp>
#include <swarmflow/stage.hpp>

namespace swarmflow {

namespace value_buckets {

int bucket(double value) {
  if (!(value > 0)) return 0;  // also NaN
  int e = static_cast<int>(std::floor(std::log10(value))) - 1;
  e = std::clamp(e, -10, 89);
  double m = std::round(value / std::pow(10.0, e));
  if (m >= 100) {
    m = 10;
    e = std::min(e + 1, 89);
  }
  m = std::clamp(m, 10.0, 99.0);
  return 100 * (e + 10) + static_cast<int>(m);
}

double value(int bucket) {
  if (bucket <= 0) return 0;
  return static_cast<double>(bucket % 100) * std::pow(10.0, bucket / 100 - 10);
}

ValueSummary summarize(const std::map<int, std::uint64_t>& counts, double sum) {
  ValueSummary s;
  for (const auto& [b, n] : counts) s.count += n;
  if (s.count == 0) return s;
  s.mean = sum / static_cast<double>(s.count);
  auto quantile = [&](double q) {
    const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(s.count)));
    std::uint64_t seen = 0;
    for (const auto& [b, n] : counts) {
      seen += n;
      if (seen >= std::max<std::uint64_t>(rank, 1)) return value(b);
    }
    return value(counts.rbegin()->first);
  };
  s.p50 = quantile(0.50);
  s.p99 = quantile(0.99);
  for (const auto& [b, n] : counts) s.counts.emplace_back(value(b), n);
  return s;
}

}  // namespace value_buckets

void StageContext::observe(std::string_view name, double value) {
  std::string key = "hist.";
  key += name;
  key += '.';
  const std::size_t base = key.size();
  key += std::to_string(value_buckets::bucket(value));
  counter(key).fetch_add(1, std::memory_order_relaxed);
  key.resize(base);
  key += "sum_milli";
  const double v = std::isfinite(value) ? std::clamp(value, -1e12, 1e12) : 0.0;
  counter(key).fetch_add(std::llround(v * 1000.0), std::memory_order_relaxed);
}

}  // namespace swarmflow
