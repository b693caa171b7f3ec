#pragma once
// Live statistics of replicas and edges: atomics written by the replica that
// owns them and read by the progress line, load reports and the run report
// without stopping anything. No actors here.

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <swarmflow/report.hpp>

#include "metrics/histogram.hpp"
#include "runtime/hop_figures.hpp"

namespace swarmflow::runtime {

/// Statistics of one replica.
struct ReplicaStats {
  std::atomic<std::uint64_t> processed{0};
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> restarts{0};
  std::atomic<std::uint64_t> dead_letters{0};
  std::atomic<std::uint64_t> queued{0};
  std::atomic<std::uint64_t> queue_peak{0};
  std::atomic<std::int64_t> busy_ns{0};     ///< time spent in the stage's steps (counted as each ends)
  std::atomic<std::int64_t> step_since_ns{0};  ///< start of the step under way, 0 between steps
  /// Time spent in steps until `now_ns`, the step under way included, so
  /// that samples taken more often than a long step ends see it as busy.
  std::int64_t busy_until(std::int64_t now_ns) const {
    const std::int64_t since = step_since_ns.load(std::memory_order_relaxed);
    return busy_ns.load(std::memory_order_relaxed) + (since > 0 && now_ns > since ? now_ns - since : 0);
  }
  std::atomic<std::int64_t> service_ns{0};  ///< smoothed time of one step

  /// Time per step, by bucket of kServiceBucketsS (+Inf last); one writer.
  std::array<std::atomic<std::uint64_t>, kServiceBuckets + 1> service_buckets{};
  std::atomic<std::int64_t> service_sum_ns{0};
  void record_service(std::int64_t ns) {
    const double s = static_cast<double>(ns) * 1e-9;
    int b = 0;
    while (b < kServiceBuckets && s > kServiceBucketsS[b]) ++b;
    service_buckets[static_cast<std::size_t>(b)].fetch_add(1, std::memory_order_relaxed);
    service_sum_ns.fetch_add(ns, std::memory_order_relaxed);
  }

  /// Arrival -> end of step, per envelope (hop_figures.hpp).
  SharedLatency residence;

  /// A keyed stage's time per key, cumulative (placement's key loads). Its
  /// replica publishes it every so often; readers copy it.
  struct KeyFigures {
    std::vector<std::pair<std::uint64_t, std::int64_t>> busy_ns;  ///< (key, time in its steps)
    bool overflow = false;  ///< more keys than are tracked: not reassignable
  };
  void publish_keys(KeyFigures figures) {
    std::lock_guard<std::mutex> lock(keys_mutex_);
    keys_ = std::move(figures);
  }
  KeyFigures keys() const {
    std::lock_guard<std::mutex> lock(keys_mutex_);
    return keys_;
  }
  /// Its stage keeps a state it can hand over (snapshot() returned true).
  std::atomic<bool> stateful{false};
  /// Its stage keeps its state per key of its `key:` field (Stage::state_key):
  /// its keys can go to other replicas with their state.
  std::atomic<bool> state_per_key{false};
  /// ... and can list the keys it holds state for (Stage::held_keys): a
  /// replica of it can be removed, its keys handed over.
  std::atomic<bool> lists_keys{false};
  /// Its inputs ended and its stage stopped: nothing left to move.
  std::atomic<bool> finished{false};
  /// The placement epoch its host has taken up (a move begins only once
  /// every host has taken up the one before).
  std::atomic<std::uint32_t> epoch{0};
  /// In the coordinator's process, for a replica on a unit process: its
  /// figures above (busy time, queue, service time, flags, keys) are those
  /// its unit's last load report gave, and these its inputs taken there so far.
  std::atomic<std::uint64_t> remote_arrivals{0};
  std::atomic<int> remote_unit{-2};  ///< the unit whose report those are (-2: none yet)
  void took_up(std::uint32_t e) {
    std::uint32_t was = epoch.load(std::memory_order_relaxed);
    while (was < e && !epoch.compare_exchange_weak(was, e, std::memory_order_release)) {
    }
  }

  std::atomic<std::int64_t>& counter(std::string_view name);
  std::map<std::string, std::int64_t> counters() const;
  void record_latency(std::int64_t ns);
  void merge_latency(const metrics::LatencyHistogram& other);
  metrics::LatencyHistogram latency() const;
  /// Adds the latency histogram to `out` (no copy of the whole histogram).
  void merge_latency_into(metrics::LatencyHistogram& out) const;

 private:
  mutable std::mutex mutex_;  ///< the counters' map
  mutable std::mutex latency_mutex_;  ///< latency_: a sink takes it per envelope, a look only to merge
  mutable std::mutex keys_mutex_;
  KeyFigures keys_;
  std::map<std::string, std::unique_ptr<std::atomic<std::int64_t>>, std::less<>> counters_;
  metrics::LatencyHistogram latency_;
};

/// Statistics of one edge at one producer replica / one consumer replica.
struct EdgeSideStats {
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> too_large{0};  ///< of dropped: payload over transport.max_message_bytes
  std::atomic<std::uint64_t> waiting{0};
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<std::uint64_t> refused{0};  ///< consumer side: payload refused by this unit's transport, acknowledged
  std::atomic<std::uint64_t> peak_in_flight{0};
  std::atomic<std::uint64_t> peak_retained{0};  ///< producer side: most kept for replay for one replica
  std::atomic<std::uint64_t> replayed{0};  ///< producer side: sent again to a consumer replica placed anew
  /// Consumer side: sent by the producer -> arrival here, the way over the edge (hop_figures.hpp).
  SharedLatency hops;
  /// Consumer side: arrival at the producer (or capture) -> sent by it, the
  /// producer's hold on what it sent on this edge (hop_figures.hpp).
  SharedLatency held;
};

}  // namespace swarmflow::runtime
