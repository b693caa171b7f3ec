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

namespace swarmflow::bench {

class Scraper {
 public:
  Scraper(const swarmflow::Runtime& runtime, std::chrono::milliseconds period) {
    thread_ = std::thread([this, &runtime, period] {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
        lock.unlock();
        const swarmflow::RunReport report = runtime.report();
        bytes_ += report.to_json().size() + swarmflow::metrics::to_prometheus(report).size();
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

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int> scrapes_{0};
  std::atomic<std::size_t> bytes_{0};
  std::thread thread_;
};

}  // namespace swarmflow::bench
