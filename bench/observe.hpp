#pragma once
// What watching a run costs, for the benchmarks' --observe-cost: while a
// run lasts, a thread asks for the report, its JSON (/api/v1/state, top,
// the web view) and its Prometheus text (/metrics) every `period`, as the
// HTTP servers of --metrics and --web do when asked; and the statistics of
// paired on/off trials that make a cost of 2% visible on a noisy machine.

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

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
        const double cpu0 = thread_cpu_s();
        const swarmflow::RunReport report = runtime.report();
        bytes_ += report.to_json().size() + swarmflow::metrics::to_prometheus(report).size();
        busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        cpu_ns_ += static_cast<std::int64_t>((thread_cpu_s() - cpu0) * 1e9);
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
  /// Mean CPU time of one look, in µs (less moved by other processes than look_us).
  double look_cpu_us() const { return scrapes_ > 0 ? static_cast<double>(cpu_ns_.load()) / scrapes_.load() / 1e3 : 0; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int> scrapes_{0};
  std::atomic<std::size_t> bytes_{0};
  std::atomic<std::int64_t> busy_ns_{0};
  std::atomic<std::int64_t> cpu_ns_{0};
  std::thread thread_;

  static double thread_cpu_s() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
  }
};

/// CPU time of the whole process (every thread), in seconds.
inline double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

/// The cost of watching from paired trials: each pair is one unobserved and
/// one observed run back to back (which goes first alternates), so a slow
/// spell of the machine (other builds) mostly falls on both halves of a
/// pair and cancels in its ratio. Of the per-pair ratios it reports the
/// median, the quartiles, and a 95% bootstrap interval of the median
/// (resampling the pairs; fixed seed, so the same ratios give the same
/// interval).
class PairedRatios {
 public:
  struct Summary {
    std::size_t pairs = 0;
    double median = 0;
    double q1 = 0;       ///< 25th percentile of the ratios
    double q3 = 0;       ///< 75th
    double ci_low = 0;   ///< 2.5th percentile of the bootstrapped medians
    double ci_high = 0;  ///< 97.5th
  };

  /// Adds one pair's ratio, `observed / unobserved`; pairs with a missing side are left out.
  void add(double observed, double unobserved) {
    if (observed > 0 && unobserved > 0) ratios_.push_back(observed / unobserved);
  }
  const std::vector<double>& ratios() const { return ratios_; }

  Summary summary() const {
    Summary s;
    s.pairs = ratios_.size();
    if (ratios_.empty()) return s;
    s.median = quantile(ratios_, 0.5);
    s.q1 = quantile(ratios_, 0.25);
    s.q3 = quantile(ratios_, 0.75);
    std::mt19937_64 rng(20261202);
    std::uniform_int_distribution<std::size_t> pick(0, ratios_.size() - 1);
    std::vector<double> medians;
    std::vector<double> sample(ratios_.size());
    for (int b = 0; b < kResamples; ++b) {
      for (auto& x : sample) x = ratios_[pick(rng)];
      medians.push_back(quantile(sample, 0.5));
    }
    s.ci_low = quantile(medians, 0.025);
    s.ci_high = quantile(medians, 0.975);
    return s;
  }

  /// "median 0.993, IQR 0.981-1.006, 95% CI of the median 0.985-1.001, 20 pairs"
  static std::string describe(const Summary& s) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "median %.3f, IQR %.3f-%.3f, 95%% CI of the median %.3f-%.3f, %zu pairs", s.median,
                  s.q1, s.q3, s.ci_low, s.ci_high, s.pairs);
    return buf;
  }

  /// The q-quantile of `v` (linear between the two nearest ranks).
  static double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double at = q * static_cast<double>(v.size() - 1);
    const auto i = static_cast<std::size_t>(at);
    const double f = at - static_cast<double>(i);
    return i + 1 < v.size() ? v[i] + f * (v[i + 1] - v[i]) : v[i];
  }

 private:
  static constexpr int kResamples = 4000;
  std::vector<double> ratios_;
};

/// What measuring one step costs the replica's thread, in ns on average over
/// `steps` steps (one in kHopSampleEvery recorded, as a replica does).
inline double hop_figures_ns_per_step(std::int64_t steps) {
  swarmflow::runtime::SharedLatency residence;
  swarmflow::runtime::SharedLatency edge;
  swarmflow::runtime::SharedLatency held;
  swarmflow::EnvelopeHeader h;
  h.capture_ns = 1'000;
  h.add_hop(2'000);
  h.add_hop(3'000);
  const swarmflow::runtime::TraceStep who{};
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < steps; ++i) {
    h.seq = static_cast<std::uint64_t>(i);
    // One in kHopSampleEvery carries a send time, as producers stamp them.
    h.sent_ns = (i % static_cast<std::int64_t>(swarmflow::runtime::kHopSampleEvery)) == 0 ? 2'500 : 0;
    swarmflow::runtime::record_hops(&residence, &edge, &held, nullptr, who, h, 3'000 + (i & 1023) * 997);
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  residence.flush();
  return static_cast<double>(ns) / static_cast<double>(steps) + 0 * static_cast<double>(residence.snapshot().count());
}

}  // namespace swarmflow::bench
