// swarmflow_bench_chaos — a cluster of unit processes under repeated SIGKILLs.
//
// The coordinator and u0 run in this process (swarmflow::Runtime): a source
// that waits for credit (so nothing is dropped at the source), a relay and a
// sink, all pinned to u0. A keyed work stage has two replicas per work unit
// (w1..wN, each a `swarmflow unit` process). Every --interval-ms a random
// work unit is SIGKILLed; once the coordinator has failed it over, the unit is
// started again and rejoins. At the end the source is stopped and the run
// drains. Printed:
// - detection: kill -> the coordinator declares the unit dead;
// - failover: kill -> the first envelope, at the relay, of a stream whose
//   replica was on the killed unit (its replacement's first output);
// - availability: the share of 100 ms windows in which the sink made progress;
// - lost, duplicate and reordered envelopes at the sink, which must be 0.
// The benchmark exits 1 when any of those is not 0 or a kill was not failed over.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <swarmflow/swarmflow.hpp>

#include "bench_args.hpp"
#include "bench_process.hpp"
#include "runtime/routing.hpp"

namespace {

struct Options {
  int units = 4;            ///< work units
  int kills = 20;
  int interval_ms = 1500;   ///< between kills
  int service_us = 200;     ///< work per envelope
  std::string cli = SWARMFLOW_CLI;
  std::string json_path;
};

bool parse(int argc, char** argv, Options& o) {
  using namespace swarmflow::bench;
  const std::vector<Flag> flags = {
      integer_flag("--units", "N", o.units, "work unit processes, two work replicas each (default 4)"),
      integer_flag("--kills", "K", o.kills, "SIGKILLs, one at a time (default 20)"),
      integer_flag("--interval-ms", "MS", o.interval_ms, "time between kills (default 1500)"),
      integer_flag("--service-us", "US", o.service_us, "work per envelope in microseconds (default 200)"),
      text_flag("--cli", "PATH", o.cli, "the swarmflow command that runs the units (default: the one built)"),
      text_flag("--json", "FILE", o.json_path, "also write the results as JSON to FILE"),
  };
  if (!parse_flags(argc, argv, flags)) return false;
  if (o.units < 2 || o.kills < 1 || o.interval_ms < 300 || o.service_us < 0) {
    std::fprintf(stderr, "--units must be at least 2, --kills at least 1, --interval-ms at least 300\n");
    return false;
  }
  return true;
}

pid_t spawn_unit(const Options& o, const std::string& file, const std::string& id, const std::string& err) {
  return swarmflow::bench::spawn_process({o.cli, "unit", file, "--id", id}, err);
}

double percentile_ms(std::vector<std::int64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return static_cast<double>(v[std::min(v.size() - 1, rank > 0 ? rank - 1 : 0)]) / 1e6;
}

/// What the relay saw: per stream the last sequence number, and when each
/// stream last produced.
struct Seen {
  std::mutex mutex;
  std::map<std::uint64_t, std::uint64_t> last_seq;
  std::map<std::uint64_t, std::int64_t> last_ns;
  std::uint64_t duplicates = 0;
  std::uint64_t reordered = 0;
  std::atomic<std::uint64_t> count{0};
};

constexpr int kStreams = 64;

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  std::string dir = (std::filesystem::temp_directory_path() / "swarmflow-chaos-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return 1;
  const int replicas = 2 * o.units;
  const std::string file = dir + "/chaos.yaml";
  {
    std::ofstream y(file);
    y << "pipeline: chaos\ncoordinator: \"ipc://" << dir << "/c.sock\"\nunits:\n"
      << "  - {id: u0, endpoint: \"ipc://" << dir << "/u0.sock\"}\n";
    for (int w = 1; w <= o.units; ++w) y << "  - {id: w" << w << ", endpoint: \"ipc://" << dir << "/w" << w << ".sock\"}\n";
    y << "stages:\n"
      << "  - {id: source, type: sim.source, params: {count: 0, streams: " << kStreams
      << "}, placement: {units: [u0]}}\n"
      << "  - {id: work, type: sim.work, replicas: " << replicas << ", key: stream, inputs: {in: source/out},\n"
      << "     params: {service_us: " << o.service_us << "}, placement: {units: [";
    for (int w = 1; w <= o.units; ++w) y << (w > 1 ? ", " : "") << "w" << w;
    y << "], spread: true}}\n"
      << "  - {id: relay, type: sim.work, inputs: {in: work/out}, placement: {units: [u0]}}\n"
      << "  - {id: sink, type: sim.sink, inputs: {in: relay/out}, placement: {units: [u0]}}\n";
  }
  std::vector<pid_t> pids(static_cast<std::size_t>(o.units + 1), -1);
  for (int w = 1; w <= o.units; ++w) {
    pids[static_cast<std::size_t>(w)] = spawn_unit(o, file, "w" + std::to_string(w), dir + "/w" + std::to_string(w) + ".err");
  }
  swarmflow::RuntimeOptions options;
  options.units = {"u0"};
  options.join_timeout_ms = 20000;
  swarmflow::Runtime rt(options);
  std::vector<swarmflow::Diagnostic> diagnostics;
  if (!rt.load_file(file, &diagnostics).ok()) {
    std::fprintf(stderr, "%s\n", swarmflow::format_diagnostics(diagnostics).c_str());
    return 1;
  }
  Seen seen;
  rt.subscribe("relay/out", [&seen](const swarmflow::Envelope& e) {
    const auto& h = e.header();
    const std::int64_t now = swarmflow::steady_now_ns();
    std::lock_guard<std::mutex> lock(seen.mutex);
    auto it = seen.last_seq.find(h.stream);
    if (it != seen.last_seq.end() && h.seq <= it->second) {
      ++(h.seq == it->second ? seen.duplicates : seen.reordered);
    } else {
      seen.last_seq[h.stream] = h.seq;
    }
    seen.last_ns[h.stream] = now;
    seen.count.fetch_add(1, std::memory_order_relaxed);
  });
  if (swarmflow::Status s = rt.start(); !s.ok()) {
    std::fprintf(stderr, "start: %s\n", s.message().c_str());
    for (pid_t p : pids) {
      if (p > 0) swarmflow::bench::reap(p);
    }
    return 1;
  }
  const std::int64_t start_ns =
      swarmflow::steady_now_ns() - static_cast<std::int64_t>(rt.report().duration_s * 1e9);

  // Availability: 100 ms windows in which the sink made progress.
  std::atomic<bool> sampling{true};
  std::atomic<int> windows{0};
  std::atomic<int> progressed{0};
  std::thread sampler([&] {
    std::uint64_t last = seen.count.load();
    while (sampling.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const std::uint64_t now = seen.count.load();
      ++windows;
      if (now > last) ++progressed;
      last = now;
    }
  });

  std::mt19937_64 rng(7);
  const swarmflow::runtime::ConsistentHashRing ring(replicas);
  std::vector<std::int64_t> detection;
  std::vector<std::int64_t> failover;
  int missed = 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(o.interval_ms));
  for (int k = 0; k < o.kills; ++k) {
    std::uniform_int_distribution<int> pick(1, o.units);
    const int w = pick(rng);
    const std::string id = "w" + std::to_string(w);
    const std::size_t failovers_before = rt.report().failovers.size();
    const std::int64_t kill_ns = swarmflow::steady_now_ns();
    swarmflow::bench::reap(pids[static_cast<std::size_t>(w)]);
    // Wait for the coordinator to fail it over.
    swarmflow::FailoverReport f;
    bool found = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!found && std::chrono::steady_clock::now() < deadline) {
      const auto r = rt.report();
      if (r.finished) break;
      if (r.failovers.size() > failovers_before) {
        f = r.failovers.back();
        found = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!found || f.unit != id) {
      ++missed;
      std::fprintf(stderr, "kill %d of %s: %s\n", k + 1, id.c_str(), found ? ("failed over " + f.unit).c_str() : "not failed over");
      if (rt.report().finished) break;
    } else {
      detection.push_back(start_ns + static_cast<std::int64_t>(f.detected_s * 1e9) - kill_ns);
      // Streams whose replica was on the killed unit: the first envelope of one
      // after the kill is the replacement's first output.
      std::set<int> moved;
      for (const auto& m : f.moved) moved.insert(std::stoi(m.substr(m.find('/') + 1)));
      std::vector<std::uint64_t> streams;
      for (std::uint64_t s = 0; s < kStreams; ++s) {
        if (moved.count(ring.replica_for(s)) > 0) streams.push_back(s);
      }
      bool resumed = streams.empty();
      while (!resumed && std::chrono::steady_clock::now() < deadline) {
        {
          std::lock_guard<std::mutex> lock(seen.mutex);
          std::int64_t first = 0;
          for (std::uint64_t s : streams) {
            auto it = seen.last_ns.find(s);
            if (it != seen.last_ns.end() && it->second > kill_ns && (first == 0 || it->second < first)) first = it->second;
          }
          if (first != 0) {
            failover.push_back(first - kill_ns);
            resumed = true;
          }
        }
        if (!resumed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!resumed) ++missed;
    }
    // Started again: it rejoins without replicas and may take work at the next failover.
    pids[static_cast<std::size_t>(w)] = spawn_unit(o, file, id, dir + "/" + id + ".err");
    std::this_thread::sleep_for(std::chrono::milliseconds(o.interval_ms));
  }
  rt.request_stop();
  const swarmflow::Status s = rt.wait();
  sampling.store(false);
  sampler.join();
  for (pid_t p : pids) {
    if (p > 0) swarmflow::bench::reap(p);
  }
  const swarmflow::RunReport r = rt.report();
  std::uint64_t lost = 0;
  std::uint64_t dup = 0;
  std::uint64_t reordered = 0;
  std::uint64_t received = 0;
  if (const auto* sink = r.stage("sink")) {
    auto get = [&](const char* name) {
      auto it = sink->counters.find(name);
      return it == sink->counters.end() ? std::uint64_t{0} : static_cast<std::uint64_t>(it->second);
    };
    lost = get("lost");
    dup = get("duplicate");
    reordered = get("reordered");
    received = get("received");
  }
  std::uint64_t sent = 0;
  if (const auto* e = r.edge("source/out", "work/in")) sent = e->sent;
  const double availability = windows.load() > 0 ? static_cast<double>(progressed.load()) / windows.load() : 0;
  std::printf("chaos: %d work units (%d keyed replicas), %zu kills every %d ms, run %.1f s: %s\n", o.units, replicas,
              detection.size() + static_cast<std::size_t>(missed), o.interval_ms, r.duration_s,
              s.ok() ? "ok" : s.message().c_str());
  std::printf("  detection ms (kill -> declared dead):       p50 %.1f  p99 %.1f  (%zu)\n",
              percentile_ms(detection, 0.5), percentile_ms(detection, 0.99), detection.size());
  std::printf("  failover ms (kill -> replacement's output): p50 %.1f  p99 %.1f  (%zu)\n",
              percentile_ms(failover, 0.5), percentile_ms(failover, 0.99), failover.size());
  std::printf("  availability (100 ms windows with progress at the sink): %.3f of %d\n", availability, windows.load());
  std::printf("  source sent %llu, sink received %llu: lost %llu, duplicate %llu, reordered %llu (relay: duplicate %llu, "
              "reordered %llu); kills not failed over: %d\n",
              static_cast<unsigned long long>(sent), static_cast<unsigned long long>(received),
              static_cast<unsigned long long>(lost), static_cast<unsigned long long>(dup),
              static_cast<unsigned long long>(reordered), static_cast<unsigned long long>(seen.duplicates),
              static_cast<unsigned long long>(seen.reordered), missed);
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << "{\"kills\": " << detection.size() + static_cast<std::size_t>(missed) << ", \"missed\": " << missed
        << ", \"detection_p50_ms\": " << percentile_ms(detection, 0.5)
        << ", \"detection_p99_ms\": " << percentile_ms(detection, 0.99)
        << ", \"failover_p50_ms\": " << percentile_ms(failover, 0.5)
        << ", \"failover_p99_ms\": " << percentile_ms(failover, 0.99) << ", \"availability\": " << availability
        << ", \"sent\": " << sent << ", \"received\": " << received << ", \"lost\": " << lost
        << ", \"duplicate\": " << dup << ", \"reordered\": " << reordered << "}\n";
  }
  std::filesystem::remove_all(dir);
  const bool clean = s.ok() && missed == 0 && lost == 0 && dup == 0 && reordered == 0 && received == sent &&
                     seen.duplicates == 0 && seen.reordered == 0;
  return clean ? 0 : 1;
}
