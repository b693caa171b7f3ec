// swarmflow_bench_failure_detection — how long after a unit process is
// SIGKILLed the coordinator declares it dead, at the pipeline's default
// `failure:` settings (or those given with --failure).
//
// Each round: a unit process (`swarmflow unit`, u1) and the coordinator with
// u0 in this process (swarmflow::Runtime), on ipc sockets; a paced source on
// u0 feeds a sink on u1. Once u1 has acknowledged envelopes (more have been
// sent than one queue's credit), it is killed at a random point of its
// heartbeat cycle. The coordinator's failure detector ends the run; the time
// from the kill to that abort (the report's end of run; this process and the
// unit read the same CLOCK_MONOTONIC) is one sample. A round in which the
// run ends any other way is a failure, and the benchmark exits 1.

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
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <swarmflow/swarmflow.hpp>

#include "bench_args.hpp"
#include "bench_process.hpp"

namespace {

struct Options {
  int n = 30;                     ///< rounds (kills)
  std::string cli = SWARMFLOW_CLI;
  std::string failure;            ///< a `failure:` map, e.g. "{acceptable_pause_ms: 150}"; empty = defaults
  int heartbeat_ms = 25;          ///< the kill lands at a random point of this cycle
  int run_ms = 1000;              ///< how long the run lasts before the kill
  int hog = 0;                    ///< threads spinning in this process during the rounds
  std::string json_path;
};

bool parse(int argc, char** argv, Options& o) {
  using namespace swarmflow::bench;
  const std::vector<Flag> flags = {
      integer_flag("--n", "N", o.n, "rounds, one SIGKILLed unit process each (default 30)"),
      text_flag("--cli", "PATH", o.cli, "the swarmflow command that runs the unit (default: the one built)"),
      text_flag("--failure", "MAP", o.failure,
                "the pipeline's failure: section as a YAML map, e.g. '{acceptable_pause_ms: 150}'\n"
                "(default: none, so the defaults)"),
      integer_flag("--heartbeat-ms", "MS", o.heartbeat_ms,
                   "the heartbeat interval in --failure, over which the kill time is spread (default 25)"),
      integer_flag("--run-ms", "MS", o.run_ms,
                   "how long data flows before the kill, so the detector has a history (default 1000)"),
      integer_flag("--hog", "T", o.hog, "threads that spin in this process meanwhile, to load the machine (default 0)"),
      text_flag("--json", "FILE", o.json_path, "also write the results as JSON to FILE"),
  };
  if (!parse_flags(argc, argv, flags)) return false;
  if (o.n <= 0 || o.heartbeat_ms <= 0 || o.hog < 0 || o.run_ms < 0) {
    std::fprintf(stderr, "--n and --heartbeat-ms must be positive, --hog and --run-ms 0 or more\n");
    return false;
  }
  return true;
}

double percentile_ms(const std::vector<std::int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  const std::size_t i = std::min(sorted.size() - 1, rank > 0 ? rank - 1 : 0);
  return static_cast<double>(sorted[i]) / 1e6;
}

pid_t spawn_unit(const Options& o, const std::string& file, const std::string& err) {
  return swarmflow::bench::spawn_process({o.cli, "unit", file, "--id", "u1"}, err);
}

/// One round: the time from the kill to the coordinator declaring u1 dead,
/// in ns; -1 (with `problem` set) when the round went otherwise.
std::int64_t round_once(const Options& o, std::mt19937_64& rng, std::string* problem) {
  std::string dir = (std::filesystem::temp_directory_path() / "swarmflow-fd-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {  // mode 0700, as ipc sockets want
    *problem = "mkdtemp failed";
    return -1;
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  const std::string file = dir + "/fd.yaml";
  std::ofstream(file) << "pipeline: fd\ncoordinator: \"ipc://" << dir << "/c.sock\"\nunits:\n"
                      << "  - {id: u0, endpoint: \"ipc://" << dir << "/u0.sock\"}\n"
                      << "  - {id: u1, endpoint: \"ipc://" << dir << "/u1.sock\"}\n"
                      << (o.failure.empty() ? "" : "failure: " + o.failure + "\n")
                      << "stages:\n"
                      << "  - {id: source, type: sim.source, params: {count: 0, rate_hz: 1000},\n"
                      << "     placement: {units: [u0]}}\n"
                      << "  - {id: sink, type: sim.sink, inputs: {in: source/out}, queue: {capacity: 8},\n"
                      << "     placement: {units: [u1]}}\n";
  const pid_t unit = spawn_unit(o, file, dir + "/u1.err");
  if (unit < 0) {
    *problem = "cannot start " + o.cli;
    return -1;
  }
  auto reap = [&] { swarmflow::bench::reap(unit); };
  swarmflow::RuntimeOptions options;
  options.units = {"u0"};
  options.join_timeout_ms = 10000;
  swarmflow::Runtime rt(options);
  std::vector<swarmflow::Diagnostic> diagnostics;
  if (swarmflow::Status s = rt.load_file(file, &diagnostics); !s.ok()) {
    *problem = swarmflow::format_diagnostics(diagnostics);
    reap();
    return -1;
  }
  if (swarmflow::Status s = rt.start(); !s.ok()) {
    *problem = "start: " + s.message();
    reap();
    return -1;
  }
  // The run's start on this process's steady clock: the live report's
  // duration is measured up to the moment it is made.
  const std::int64_t before = swarmflow::steady_now_ns();
  const std::int64_t start_ns = before - static_cast<std::int64_t>(rt.report().duration_s * 1e9);
  // Wait until u1 has acknowledged envelopes: more sent than one queue holds.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    const auto r = rt.report();
    if (!r.edges.empty() && r.edges[0].sent > 32) break;
    if (r.finished || std::chrono::steady_clock::now() > deadline) {
      *problem = "no data reached u1";
      reap();
      rt.abort("benchmark round failed");
      rt.wait();
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Let it run, then kill it at a random point of its heartbeat cycle.
  std::uniform_int_distribution<int> phase_us(0, o.heartbeat_ms * 1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(o.run_ms) + std::chrono::microseconds(phase_us(rng)));
  if (rt.report().finished) {
    *problem = "the run ended before the kill (a false suspicion?): " + rt.wait().message();
    reap();
    return -1;
  }
  const std::int64_t kill_ns = swarmflow::steady_now_ns();
  reap();
  const swarmflow::Status s = rt.wait();
  if (s.ok() || s.message().find("unit 'u1' is dead") == std::string::npos) {
    *problem = "the run ended otherwise: " + (s.ok() ? std::string("ok") : s.message());
    return -1;
  }
  const std::int64_t end_ns = start_ns + static_cast<std::int64_t>(rt.report().duration_s * 1e9);
  return end_ns - kill_ns;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < o.hog; ++i) {
    hogs.emplace_back([&stop] {
      volatile std::uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  }
  std::mt19937_64 rng(42);
  std::vector<std::int64_t> samples;
  int failed = 0;
  for (int i = 0; i < o.n; ++i) {
    std::string problem;
    const std::int64_t ns = round_once(o, rng, &problem);
    if (ns < 0) {
      ++failed;
      std::fprintf(stderr, "round %d: %s\n", i + 1, problem.c_str());
      continue;
    }
    samples.push_back(ns);
  }
  stop.store(true);
  for (auto& t : hogs) t.join();
  std::sort(samples.begin(), samples.end());
  const double p50 = percentile_ms(samples, 0.50);
  const double p99 = percentile_ms(samples, 0.99);
  const double min = samples.empty() ? 0 : static_cast<double>(samples.front()) / 1e6;
  const double max = samples.empty() ? 0 : static_cast<double>(samples.back()) / 1e6;
  std::printf("failure detection, SIGKILLed unit process, failure: %s, %d hog thread%s\n",
              o.failure.empty() ? "defaults" : o.failure.c_str(), o.hog, o.hog == 1 ? "" : "s");
  std::printf("  rounds %zu (failed %d)   kill -> declared dead, ms: min %.1f  p50 %.1f  p99 %.1f  max %.1f\n",
              samples.size(), failed, min, p50, p99, max);
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << "{\"rounds\": " << samples.size() << ", \"failed\": " << failed << ", \"min_ms\": " << min
        << ", \"p50_ms\": " << p50 << ", \"p99_ms\": " << p99 << ", \"max_ms\": " << max << "}\n";
  }
  return failed == 0 ? 0 : 1;
}
