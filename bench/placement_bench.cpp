// swarmflow_bench_placement — placement that follows the load, beside static
// placement in the same run (docs/placement.md, docs/benchmarks.md).
//
// a. Efficiency: keyed sim.work (8 streams, 4 replicas at 2 ms) on 5
//    one-thread units, one unit slowed to 0.25 at 2 s: throughput over the
//    ideal of 2000/s, static and adaptive. Also 4 units with speeds
//    {1, 1, 0.5, 0.25}, against the best assignment of the 8 keys there is.
// b. Step change: after the unit slows, the time until throughput is back
//    at 90 % of the new ideal (a 250 ms window at or above it, and every
//    later one).
// c. Migration impact: a paced stream at half the replicas' capacity, a
//    replica moved --moves times with a quiet gap between moves; latency
//    (capture to the work stage's output) p99 in the windows with a move
//    against those without; lost, duplicated, reordered.
// d. Stability: the same steady load for --stable-s after convergence:
//    moves made then (must be 0).
// e. Scale: 32 emulated units (4 threads of 8 units each are simulated as
//    32 one-thread units, 64 replicas): a placement decision's time
//    (sampling into the view and the policy), p50/p99, and the placement
//    thread's CPU per unit in a running 32-unit pipeline.
//
// Exits 1 if a run fails or anything is lost, duplicated or reordered.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <swarmflow/log.hpp>
#include <swarmflow/swarmflow.hpp>

#include "bench_args.hpp"
#include "config/pipeline_spec.hpp"
#include "placement/rebalance.hpp"
#include "runtime/placer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  double seconds = 8;      ///< length of each efficiency run
  double slow_at_s = 2;    ///< when a unit slows down
  int moves = 200;         ///< moves in the migration run
  double stable_s = 60;    ///< length of the stability run after convergence
  int decisions = 20000;   ///< decisions timed at scale
  double scale_s = 4;      ///< length of each 32-unit run
  bool verbose = false;    ///< print each run's moves and rates
};

std::int64_t counter(const swarmflow::StageReport* s, const std::string& name) {
  if (s == nullptr) return 0;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

/// Nothing lost, duplicated or reordered: every envelope the source made
/// reached the sink once, in order, or was dropped at a full edge (a live
/// source on a machine too busy to keep its pace), counted there.
bool intact(const swarmflow::RunReport& r, const char* what) {
  const auto* sink = r.stage("sink");
  const auto* src = r.stage("src");
  std::int64_t dropped = 0;
  for (const auto& e : r.edges) dropped += static_cast<std::int64_t>(e.dropped);
  const std::int64_t made = src != nullptr ? static_cast<std::int64_t>(src->processed) : 0;
  const std::int64_t lost = made - counter(sink, "received") - dropped;
  const bool ok = r.ok && sink != nullptr && src != nullptr && lost == 0 && counter(sink, "duplicate") == 0 &&
                  counter(sink, "reordered") == 0;
  if (!ok || dropped > 0) {
    std::fprintf(stderr, "%s: lost %lld (and %lld dropped at full edges), duplicated %lld, reordered %lld (ok %d)\n",
                 what, static_cast<long long>(lost), static_cast<long long>(dropped),
                 static_cast<long long>(counter(sink, "duplicate")), static_cast<long long>(counter(sink, "reordered")),
                 r.ok ? 1 : 0);
  }
  return ok;
}

std::uint64_t sink_processed(const swarmflow::Runtime& rt) {
  const auto r = rt.report();
  const auto* sink = r.stage("sink");
  return sink != nullptr ? sink->processed : 0;
}

/// Throughput per 250 ms window of a running pipeline, for `seconds`;
/// `at` runs once when its time comes.
std::vector<double> windows(swarmflow::Runtime& rt, double seconds, double at_s, const std::function<void()>& at) {
  std::vector<double> rates;
  const auto start = Clock::now();
  std::uint64_t last = sink_processed(rt);
  auto next = start + std::chrono::milliseconds(250);
  bool done = false;
  while (Clock::now() - start < std::chrono::duration<double>(seconds)) {
    std::this_thread::sleep_until(next);
    next += std::chrono::milliseconds(250);
    const std::uint64_t now = sink_processed(rt);
    rates.push_back(static_cast<double>(now - last) / 0.25);
    last = now;
    if (!done && Clock::now() - start >= std::chrono::duration<double>(at_s)) {
      done = true;
      if (at) at();
    }
  }
  return rates;
}

double mean(const std::vector<double>& v, std::size_t from, std::size_t to) {
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t i = from; i < to && i < v.size(); ++i, ++n) sum += v[i];
  return n > 0 ? sum / static_cast<double>(n) : 0;
}

std::string keyed_yaml(const std::string& policy, const std::vector<double>& speeds, int replicas) {
  std::string y = "pipeline: placement-bench\nplacement: {policy: " + policy + "}\nunits:\n  - {id: io, threads: 2}\n";
  std::string work_units;
  for (std::size_t i = 0; i < speeds.size(); ++i) {
    y += "  - {id: w" + std::to_string(i) + ", threads: 1, speed: " + std::to_string(speeds[i]) + "}\n";
    work_units += (i == 0 ? "" : ", ") + std::string("w") + std::to_string(i);
  }
  y += "stages:\n"
       "  - {id: src, type: sim.source, params: {count: 0, streams: 8}, placement: {units: [io]}}\n"
       "  - {id: work, type: sim.work, replicas: " + std::to_string(replicas) +
       ", key: stream, inputs: {in: src/out}, params: {service_us: 2000}, placement: {units: [" + work_units +
       "], spread: true}}\n"
       "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}, placement: {units: [io]}}\n";
  return y;
}

struct Efficiency {
  bool ok = false;
  double before = 0;    ///< mean rate from 1 s to the slowdown
  double after = 0;     ///< mean rate over the last 3 s
  double overall = 0;   ///< mean rate over the whole run
  double recover_s = -1;  ///< from the slowdown to 90 % of the ideal, held
  std::size_t moves = 0;
};

Efficiency efficiency(const Options& o, const std::string& policy, const std::vector<double>& speeds,
                      bool slow_one) {
  Efficiency e;
  swarmflow::Runtime rt;
  std::vector<swarmflow::Diagnostic> diags;
  if (!rt.load_string(keyed_yaml(policy, speeds, 4), "placement-bench.yaml", &diags).ok()) {
    std::fprintf(stderr, "%s", swarmflow::format_diagnostics(diags).c_str());
    return e;
  }
  if (!rt.start().ok()) return e;
  // The unit of replica 0 slows down (it holds a replica whatever the hash did).
  std::string slowed;
  for (const auto& r : rt.report().replicas) {
    if (r.stage == "work" && r.replica == 0) slowed = r.unit;
  }
  const auto rates = windows(rt, o.seconds, o.slow_at_s, [&] {
    if (slow_one) (void)rt.set_unit_speed(slowed, 0.25);
  });
  rt.request_stop();
  e.ok = rt.wait().ok() && intact(rt.report(), "efficiency");
  const std::size_t slow_w = static_cast<std::size_t>(o.slow_at_s / 0.25);
  e.before = mean(rates, 4, slow_w);
  e.after = mean(rates, rates.size() > 12 ? rates.size() - 12 : 0, rates.size());
  e.overall = mean(rates, 0, rates.size());
  if (slow_one) {
    for (std::size_t i = slow_w; i < rates.size(); ++i) {
      bool held = true;
      for (std::size_t j = i; j < rates.size(); ++j) held = held && rates[j] >= 0.9 * 2000;
      if (held) {
        e.recover_s = static_cast<double>(i + 1 - slow_w) * 0.25;
        break;
      }
    }
  }
  e.moves = rt.report().moves.size();
  if (o.verbose) {
    std::printf("    %s, slowed %s; rates:", policy.c_str(), slowed.c_str());
    for (double r : rates) std::printf(" %.0f", r);
    std::printf("\n");
    for (const auto& m : rt.report().moves) {
      std::printf("    %6.2f s %s %s/%d %s -> %s keys %llu drain %.1f ms: %s\n", m.at_s, m.kind.c_str(), m.stage.c_str(),
                  m.replica, m.from.c_str(), m.to.c_str(), static_cast<unsigned long long>(m.keys), m.drain_ms,
                  m.why.c_str());
    }
  }
  return e;
}

/// The most envelopes per second 8 equal keys can reach over replicas of
/// these capacities (envelopes per second each): the slowest replica for its
/// share paces the source.
double best_assignment(const std::vector<double>& capacity) {
  const int n = static_cast<int>(capacity.size());
  double best = 0;
  int total = 1;
  for (int i = 0; i < 8; ++i) total *= n;
  for (int a = 0; a < total; ++a) {
    std::vector<int> keys(static_cast<std::size_t>(n), 0);
    int x = a;
    for (int k = 0; k < 8; ++k, x /= n) ++keys[static_cast<std::size_t>(x % n)];
    double rate = 1e18;
    for (int r = 0; r < n; ++r) {
      if (keys[static_cast<std::size_t>(r)] > 0) rate = std::min(rate, capacity[static_cast<std::size_t>(r)] * 8.0 / keys[static_cast<std::size_t>(r)]);
    }
    best = std::max(best, rate);
  }
  return best;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

struct Migration {
  bool ok = false;
  int moves = 0;
  double p50_quiet = 0, p99_quiet = 0, p50_moving = 0, p99_moving = 0;
  double drain_p50_ms = 0, drain_p99_ms = 0;
};

Migration migration(const Options& o) {
  Migration m;
  swarmflow::Runtime rt;
  std::vector<swarmflow::Diagnostic> diags;
  // 4 replicas at 500 us: 8000/s of capacity; 4000/s is half. The paced
  // source hands its envelopes to a relay, which waits for credit instead of
  // dropping (a paced source is live: it drops what cannot go at once).
  const std::string yaml =
      "pipeline: migration-bench\nunits:\n  - {id: io, threads: 2}\n  - {id: w0, threads: 1}\n"
      "  - {id: w1, threads: 1}\n  - {id: w2, threads: 1}\n  - {id: w3, threads: 1}\n  - {id: w4, threads: 1}\n"
      "stages:\n"
      "  - {id: src, type: sim.source, params: {count: 0, streams: 16, rate_hz: 4000}, placement: {units: [io]}}\n"
      "  - {id: relay, type: sim.work, inputs: {in: src/out}, params: {service_us: 0}, queue: {capacity: 256},"
      " placement: {units: [io]}}\n"
      "  - {id: work, type: sim.work, replicas: 4, key: stream, inputs: {in: relay/out}, params: {service_us: 500},"
      " queue: {capacity: 64}, placement: {units: [w0, w1, w2, w3, w4], spread: true}}\n"
      "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}, placement: {units: [io]}}\n";
  if (!rt.load_string(yaml, "migration-bench.yaml", &diags).ok()) {
    std::fprintf(stderr, "%s", swarmflow::format_diagnostics(diags).c_str());
    return m;
  }
  struct Sample {
    std::int64_t at;
    std::int64_t latency;
  };
  std::vector<Sample> samples(static_cast<std::size_t>(o.moves) * 400 + 100000);
  std::atomic<std::size_t> next{0};
  (void)rt.subscribe("work/out", [&](const swarmflow::Envelope& e) {
    const std::int64_t now = swarmflow::steady_now_ns();
    const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
    if (i < samples.size()) samples[i] = Sample{now, now - e.header().capture_ns};
  });
  if (!rt.start().ok()) return m;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<std::pair<std::int64_t, std::int64_t>> moving;  // [start, end + margin]
  std::vector<std::pair<std::int64_t, std::int64_t>> quiet;
  const char* units[] = {"w0", "w1", "w2", "w3", "w4"};
  int made = 0;
  for (int i = 0; made < o.moves && i < o.moves * 3; ++i) {
    const std::int64_t q0 = swarmflow::steady_now_ns();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    quiet.emplace_back(q0, swarmflow::steady_now_ns());
    const std::uint64_t before = rt.moves_completed();
    const std::int64_t t0 = swarmflow::steady_now_ns();
    if (!rt.move_replica("work", i % 4, units[(i * 3 + 1) % 5]).ok()) continue;
    while (rt.moves_completed() == before) std::this_thread::sleep_for(std::chrono::microseconds(200));
    // What was held during the drain finishes a little after it.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    moving.emplace_back(t0, swarmflow::steady_now_ns());
    ++made;
  }
  rt.request_stop();
  m.ok = rt.wait().ok() && intact(rt.report(), "migration");
  m.moves = made;
  std::vector<double> in_moves, in_quiet;
  const std::size_t n = std::min(next.load(), samples.size());
  std::size_t mi = 0, qi = 0;
  std::vector<Sample> sorted(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(n));
  std::sort(sorted.begin(), sorted.end(), [](const Sample& a, const Sample& b) { return a.at < b.at; });
  for (const Sample& s : sorted) {
    while (mi < moving.size() && moving[mi].second < s.at) ++mi;
    while (qi < quiet.size() && quiet[qi].second < s.at) ++qi;
    const double ms = static_cast<double>(s.latency) / 1e6;
    if (mi < moving.size() && moving[mi].first <= s.at) {
      in_moves.push_back(ms);
    } else if (qi < quiet.size() && quiet[qi].first <= s.at) {
      in_quiet.push_back(ms);
    }
  }
  m.p50_quiet = quantile(in_quiet, 0.5);
  m.p99_quiet = quantile(in_quiet, 0.99);
  m.p50_moving = quantile(in_moves, 0.5);
  m.p99_moving = quantile(in_moves, 0.99);
  std::vector<double> drains;
  for (const auto& mv : rt.report().moves) drains.push_back(mv.drain_ms);
  m.drain_p50_ms = quantile(drains, 0.5);
  m.drain_p99_ms = quantile(drains, 0.99);
  return m;
}

struct Stability {
  bool ok = false;
  std::size_t converging = 0;  ///< moves in the first 3 s
  std::size_t after = 0;       ///< moves after them
};

Stability stability(const Options& o) {
  Stability s;
  swarmflow::Runtime rt;
  std::vector<swarmflow::Diagnostic> diags;
  if (!rt.load_string(keyed_yaml("adaptive", {1, 1, 1, 1, 1}, 4), "stability.yaml", &diags).ok()) return s;
  if (!rt.start().ok()) return s;
  std::this_thread::sleep_for(std::chrono::seconds(3));
  s.converging = rt.report().moves.size();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.stable_s));
  s.after = rt.report().moves.size() - s.converging;
  rt.request_stop();
  s.ok = rt.wait().ok() && intact(rt.report(), "stability");
  return s;
}

struct Scale {
  double decide_p50_us = 0, decide_p99_us = 0;
  double cpu_per_unit = 0;  ///< placement thread CPU / wall time / units
  bool ok = false;
};

Scale scale(const Options& o) {
  Scale sc;
  // Decisions on a 32-unit, 64-replica view with random loads.
  swarmflow::config::PipelineSpec spec;
  for (int u = 0; u < 32; ++u) {
    swarmflow::config::UnitDecl d;
    d.id = "u" + std::to_string(u);
    d.threads = 1;
    spec.units.push_back(d);
  }
  swarmflow::config::StageDecl src;
  src.id = "src";
  spec.stages.push_back(src);
  for (int s = 0; s < 8; ++s) {
    swarmflow::config::StageDecl st;
    st.id = "s" + std::to_string(s);
    st.replicas = st.max_replicas = 8;
    st.keyed = true;
    st.inputs.resize(1);
    spec.stages.push_back(st);
  }
  swarmflow::placement::Rebalancer policy(spec, swarmflow::placement::PolicySettings{});
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::vector<swarmflow::runtime::ReplicaSample>> before(spec.stages.size()), after(spec.stages.size());
  std::vector<std::vector<int>> unit_of(spec.stages.size());
  std::vector<std::vector<double>> queued(spec.stages.size()), service(spec.stages.size());
  unit_of[0] = {0};
  before[0].resize(1);
  after[0].resize(1);
  queued[0] = {0};
  service[0] = {0};
  for (std::size_t s = 1; s < spec.stages.size(); ++s) {
    for (int r = 0; r < 8; ++r) {
      unit_of[s].push_back(static_cast<int>((s * 8 + static_cast<std::size_t>(r)) % 32));
      before[s].emplace_back();
      after[s].emplace_back();
      queued[s].push_back(0);
      service[s].push_back(1e6);
    }
  }
  std::vector<double> speed(32, 1.0);
  std::vector<int> threads(32, 1);
  std::vector<double> times;
  std::int64_t now = 1'000'000'000;
  for (int i = 0; i < o.decisions; ++i) {
    for (std::size_t s = 1; s < spec.stages.size(); ++s) {
      for (auto& x : after[s]) {
        x.busy_ns += static_cast<std::int64_t>(unit(rng) * 250e6);
        x.arrivals += static_cast<std::uint64_t>(unit(rng) * 250);
        x.key_busy_ns.clear();
        for (std::uint64_t k = 0; k < 4; ++k) x.key_busy_ns.emplace_back(k, static_cast<std::int64_t>(unit(rng) * 60e6));
      }
    }
    const auto t0 = Clock::now();
    const auto view = swarmflow::runtime::load_view(before, after, 250'000'000, unit_of, speed, threads, queued, service);
    const auto moves = policy.decide(view, now);
    const auto t1 = Clock::now();
    (void)moves;
    times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    before = after;
    now += 250'000'000;
  }
  sc.decide_p50_us = quantile(times, 0.5);
  sc.decide_p99_us = quantile(times, 0.99);

  // A running pipeline of 32 one-thread units, adaptive: the process's CPU
  // with placement deciding, against the same run static.
  auto run_cpu = [&](const std::string& policy_name) -> double {
    std::string y = "pipeline: scale\nplacement: {policy: " + policy_name + "}\nunits:\n";
    for (int u = 0; u < 32; ++u) y += "  - {id: u" + std::to_string(u) + ", threads: 1}\n";
    y += "stages:\n  - {id: src, type: sim.source, params: {count: 0, streams: 64, rate_hz: 2000}, placement: {units: [u0]}}\n"
         "  - {id: work, type: sim.work, replicas: 31, key: stream, inputs: {in: src/out}, params: {service_us: 1000},"
         " placement: {spread: true}}\n"
         "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}, placement: {units: [u0]}}\n";
    swarmflow::Runtime rt;
    std::vector<swarmflow::Diagnostic> diags;
    if (!rt.load_string(y, "scale.yaml", &diags).ok() || !rt.start().ok()) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    timespec c0{}, c1{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    const auto w0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(o.scale_s));
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    const double wall = std::chrono::duration<double>(Clock::now() - w0).count();
    rt.request_stop();
    sc.ok = rt.wait().ok();
    const double cpu = static_cast<double>(c1.tv_sec - c0.tv_sec) + static_cast<double>(c1.tv_nsec - c0.tv_nsec) / 1e9;
    return cpu / wall;
  };
  const double with = run_cpu("adaptive");
  const double without = run_cpu("static");
  sc.cpu_per_unit = (with - without) / 32;
  return sc;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const std::vector<swarmflow::bench::Flag> flags = {
      swarmflow::bench::number_flag("--seconds", "S", o.seconds, "length of each efficiency run (default 8)"),
      swarmflow::bench::number_flag("--slow-at", "S", o.slow_at_s, "when a unit slows to 0.25 (default 2)"),
      swarmflow::bench::integer_flag("--moves", "N", o.moves, "moves in the migration run (default 200)"),
      swarmflow::bench::number_flag("--stable-s", "S", o.stable_s, "steady run after convergence (default 60)"),
      swarmflow::bench::integer_flag("--decisions", "N", o.decisions, "decisions timed at scale (default 20000)"),
      swarmflow::bench::number_flag("--scale-s", "S", o.scale_s, "length of each 32-unit run (default 4)"),
      swarmflow::bench::switch_flag("--verbose", o.verbose, "print each run's moves and rates per 250 ms"),
  };
  if (!swarmflow::bench::parse_flags(argc, argv, flags)) return 2;
  swarmflow::log::Options log_options;
  log_options.level = swarmflow::log::Level::warn;
  (void)swarmflow::log::configure(log_options);
  bool ok = true;

  std::printf("a/b. keyed sim.work, 8 streams, 4 replicas at 2 ms, 5 one-thread units; replica 0's unit slows to 0.25 at %.1f s; ideal 2000/s\n",
              o.slow_at_s);
  std::printf("  %-9s %12s %12s %12s %12s %6s\n", "", "before", "after", "overall", "recovery", "moves");
  for (const char* policy : {"static", "adaptive"}) {
    const Efficiency e = efficiency(o, policy, {1, 1, 1, 1, 1}, true);
    ok = ok && e.ok;
    char recovery[32];
    if (e.recover_s >= 0) {
      std::snprintf(recovery, sizeof recovery, "%.2f s", e.recover_s);
    } else {
      std::snprintf(recovery, sizeof recovery, "never");
    }
    std::printf("  %-9s %6.0f %5.3f %6.0f %5.3f %6.0f %5.3f %12s %6zu\n", policy, e.before, e.before / 2000, e.after,
                e.after / 2000, e.overall, e.overall / 2000, recovery, e.moves);
  }
  const std::vector<double> speeds = {1, 1, 0.5, 0.25};
  std::vector<double> capacity;
  for (double s : speeds) capacity.push_back(500 * s);
  const double best = best_assignment(capacity);
  std::printf("a. 4 units with speeds {1, 1, 0.5, 0.25}: best assignment of the 8 keys %.0f/s\n", best);
  for (const char* policy : {"static", "adaptive"}) {
    Options shorter = o;
    const Efficiency e = efficiency(shorter, policy, speeds, false);
    ok = ok && e.ok;
    std::printf("  %-9s last 3 s %6.0f/s = %5.3f of the best, %zu moves\n", policy, e.after, e.after / best, e.moves);
  }

  const Migration m = migration(o);
  ok = ok && m.ok;
  std::printf("c. %d moves of a keyed replica under a paced stream at half capacity (latency, capture to work output)\n",
              m.moves);
  std::printf("  without a move: p50 %.3f ms p99 %.3f ms\n", m.p50_quiet, m.p99_quiet);
  std::printf("  with a move:    p50 %.3f ms p99 %.3f ms   added p99 %.3f ms\n", m.p50_moving, m.p99_moving,
              m.p99_moving - m.p99_quiet);
  std::printf("  drain: p50 %.2f ms p99 %.2f ms; lost, duplicated and reordered: %s\n", m.drain_p50_ms, m.drain_p99_ms,
              m.ok ? "0" : "SOME (see above)");

  const Stability st = stability(o);
  ok = ok && st.ok;
  std::printf("d. steady load: %zu moves while converging (3 s), %zu in the %.0f s after\n", st.converging, st.after,
              o.stable_s);

  const Scale sc = scale(o);
  ok = ok && sc.ok;
  std::printf("e. 32 units, 64 replicas: a decision (view + policy) p50 %.1f us p99 %.1f us; placement CPU %.3f %% per unit\n",
              sc.decide_p50_us, sc.decide_p99_us, sc.cpu_per_unit * 100);
  return ok ? 0 : 1;
}
