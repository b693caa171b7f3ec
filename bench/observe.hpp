#pragma once
// What watching a run costs, for the benchmarks' --observe-cost: while a
// run lasts, a thread asks for the report, its JSON (/api/v1/state, top,
// the web view) and its Prometheus text (/metrics) every `period`, as the
// HTTP servers of --metrics and --web do when asked.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <swarmflow/swarmflow.hpp>

#include "metrics/prometheus.hpp"
#include "runtime/hop_figures.hpp"

namespace swarmflow::bench {

class Scraper {
 public:
  Scraper(const swarmflow::Runtime& runtime, std::chrono::milliseconds period) {
    thread_ = std::thread([this, &runtime, period] {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
        lock.unlock();
        const auto t0 = std::chrono::steady_clock::now();
        const swarmflow::RunReport report = runtime.report();
        bytes_ += report.to_json().size() + swarmflow::metrics::to_prometheus(report).size();
        busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        ++scrapes_;
        lock.lock();
      }
    });
  }
  ~Scraper() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Scraper(const Scraper&) = delete;
  Scraper& operator=(const Scraper&) = delete;
  int scrapes() const { return scrapes_.load(); }
  /// Mean time of one look (report, JSON and /metrics text), in µs.
  double look_us() const { return scrapes_ > 0 ? static_cast<double>(busy_ns_.load()) / scrapes_.load() / 1e3 : 0; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int> scrapes_{0};
  std::atomic<std::size_t> bytes_{0};
  std::atomic<std::int64_t> busy_ns_{0};
  std::thread thread_;
};

/// What measuring one step costs the replica's thread, in ns on average over
/// `steps` steps (one in kHopSampleEvery recorded, as a replica does).
inline double hop_figures_ns_per_step(std::int64_t steps) {
  swarmflow::runtime::SharedLatency residence;
  swarmflow::runtime::SharedLatency edge;
  swarmflow::EnvelopeHeader h;
  h.capture_ns = 1'000;
  h.add_hop(2'000);
  h.add_hop(3'000);
  const swarmflow::runtime::TraceStep who{};
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < steps; ++i) {
    h.seq = static_cast<std::uint64_t>(i);
    swarmflow::runtime::record_hops(&residence, &edge, nullptr, who, h, 3'000 + (i & 1023) * 997);
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  residence.flush();
  return static_cast<double>(ns) / static_cast<double>(steps) + 0 * static_cast<double>(residence.snapshot().count());
}

}  // namespace swarmflow::bench
