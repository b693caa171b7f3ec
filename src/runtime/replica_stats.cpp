#include "runtime/replica_stats.hpp"

namespace swarmflow::runtime {

std::atomic<std::int64_t>& ReplicaStats::counter(std::string_view name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = counters_.find(name);
  if (it == counters_.end()) {
    it = counters_.emplace(std::string(name), std::make_unique<std::atomic<std::int64_t>>(0)).first;
  }
  return *it->second;
}

std::map<std::string, std::int64_t> ReplicaStats::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, std::int64_t> out;
  for (const auto& [name, value] : counters_) out[name] = value->load(std::memory_order_relaxed);
  return out;
}

void ReplicaStats::record_latency(std::int64_t ns) {
  std::lock_guard<std::mutex> lock(latency_mutex_);
  latency_.record(ns);
}

void ReplicaStats::merge_latency(const metrics::LatencyHistogram& other) {
  std::lock_guard<std::mutex> lock(latency_mutex_);
  latency_.merge(other);
}

void ReplicaStats::merge_latency_into(metrics::LatencyHistogram& out) const {
  std::lock_guard<std::mutex> lock(latency_mutex_);
  out.merge(latency_);
}

metrics::LatencyHistogram ReplicaStats::latency() const {
  std::lock_guard<std::mutex> lock(latency_mutex_);
  return latency_;
}

}  // namespace swarmflow::runtime
