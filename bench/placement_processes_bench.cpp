// swarmflow_bench_placement_processes — placement with unit processes.
//
// The coordinator and u0 run in this process (swarmflow::Runtime); the other
// units are `swarmflow unit` processes, several units each (--id w1,w2,...).
//
// a. Control plane. --processes unit processes of --units-per units each,
//    one light keyed replica per unit (sim.work at 20 us, fed 10/s a
//    replica), the source and the sink on u0, run --seconds under static and
//    then adaptive placement. The CPU each unit process spends (utime +
//    stime from /proc) over the run after a warm-up, per unit: heartbeats,
//    load reports every placement.interval_ms, live figures, and the little
//    work there is. The target is under 1% of a core per unit.
// b. Moves across processes. A paced keyed stream (4000/s, 16 streams) into
//    4 replicas at 500 us (half load) on a1, a2 (process A) and b1, b2
//    (process B); replica 0 is moved --moves times between the spare units
//    a3 (A) and b3 (B), one move every --gap-ms: each move crosses
//    processes. Printed: the drain (from its start to its successor taking
//    work), each move's sink p99 around it against the interval before it,
//    and lost, duplicated and reordered envelopes at the sink, which must be
//    0 (the live source's drops, counted at its edge, are printed apart).
// The benchmark exits 1 when anything is lost, duplicated or reordered, or a
// move was not made.

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <swarmflow/swarmflow.hpp>

#include "bench_args.hpp"
#include "bench_process.hpp"

namespace {

struct Options {
  int processes = 4;
  int units_per = 8;
  int seconds = 8;
  int moves = 100;
  int gap_ms = 150;
  std::string cli = SWARMFLOW_CLI;
  bool only_moves = false;
  bool only_control = false;
};

bool parse(int argc, char** argv, Options& o) {
  using namespace swarmflow::bench;
  const std::vector<Flag> flags = {
      integer_flag("--processes", "P", o.processes, "a: unit processes (default 4)"),
      integer_flag("--units-per", "U", o.units_per, "a: units in each (default 8)"),
      integer_flag("--seconds", "S", o.seconds, "a: seconds measured per policy, after 2 s of warm-up (default 8)"),
      integer_flag("--moves", "M", o.moves, "b: moves across processes (default 100)"),
      integer_flag("--gap-ms", "MS", o.gap_ms, "b: time from one move's end to the next's start (default 150)"),
      text_flag("--cli", "PATH", o.cli, "the swarmflow command that runs the units (default: the one built)"),
      switch_flag("--moves-only", o.only_moves, "run b alone"),
      switch_flag("--control-only", o.only_control, "run a alone"),
  };
  if (!parse_flags(argc, argv, flags)) return false;
  if (o.processes < 1 || o.units_per < 1 || o.seconds < 1 || o.moves < 1 || o.gap_ms < 0) {
    std::fprintf(stderr, "--processes, --units-per, --seconds and --moves must be at least 1\n");
    return false;
  }
  return true;
}

/// CPU time of process `pid` so far (user + system), seconds.
double cpu_s(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  double utime = 0;
  double stime = 0;
  // Fields 3.. after the name: state is field 3; utime is 14, stime 15.
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stod(f);
    if (i == 15) stime = std::stod(f);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank > 0 ? rank - 1 : 0)];
}

/// Waits for unit processes to leave after the run (they are told to), then
/// makes sure they are gone.
void reap_all(const std::vector<pid_t>& pids) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (pid_t p : pids) {
    if (p <= 0) continue;
    int status = 0;
    while (waitpid(p, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    swarmflow::bench::reap(p);
  }
}

std::string units_of(const std::string& prefix, int first, int count) {
  std::string out;
  for (int i = first; i < first + count; ++i) out += (out.empty() ? "" : ",") + prefix + std::to_string(i);
  return out;
}

std::unique_ptr<swarmflow::Runtime> start_here(const std::string& file) {
  swarmflow::RuntimeOptions options;
  options.units = {"u0"};
  options.join_timeout_ms = 30000;
  auto rt = std::make_unique<swarmflow::Runtime>(options);
  std::vector<swarmflow::Diagnostic> diagnostics;
  if (!rt->load_file(file, &diagnostics).ok()) {
    std::fprintf(stderr, "%s\n", swarmflow::format_diagnostics(diagnostics).c_str());
    return nullptr;
  }
  if (swarmflow::Status s = rt->start(); !s.ok()) {
    std::fprintf(stderr, "start: %s\n", s.message().c_str());
    return nullptr;
  }
  return rt;
}

struct ControlFigure {
  std::vector<double> per_process;  ///< CPU share of one core
  double per_unit = 0;
  double here = 0;  ///< this process (coordinator, u0: source and sink)
};

/// a, under one policy.
bool control_plane(const Options& o, const std::string& dir, const std::string& policy, ControlFigure* out) {
  const int units = o.processes * o.units_per;
  const std::string file = dir + "/control-" + policy + ".yaml";
  {
    std::ofstream y(file);
    y << "pipeline: control\nplacement: {policy: " << policy << "}\ncoordinator: \"ipc://" << dir << "/c-" << policy
      << ".sock\"\nunits:\n  - {id: u0, endpoint: \"ipc://" << dir << "/u0-" << policy << ".sock\", threads: 1}\n";
    for (int w = 1; w <= units; ++w) {
      y << "  - {id: w" << w << ", endpoint: \"ipc://" << dir << "/w" << w << "-" << policy << ".sock\", threads: 1}\n";
    }
    y << "stages:\n"
      << "  - {id: src, type: sim.source, params: {count: 0, streams: " << 2 * units << ", rate_hz: " << 10 * units
      << "}, placement: {units: [u0]}}\n"
      << "  - {id: work, type: sim.work, replicas: " << units << ", key: stream, inputs: {in: src/out},\n"
      << "     params: {service_us: 20}, placement: {units: [" << units_of("w", 1, units) << "], spread: true}}\n"
      << "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}, placement: {units: [u0]}}\n";
  }
  std::vector<pid_t> pids;
  for (int p = 0; p < o.processes; ++p) {
    pids.push_back(swarmflow::bench::spawn_process(
        {o.cli, "unit", file, "--id", units_of("w", 1 + p * o.units_per, o.units_per)},
        dir + "/control-" + policy + "-" + std::to_string(p) + ".err"));
  }
  auto rt = start_here(file);
  if (!rt) {
    reap_all(pids);
    return false;
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  std::vector<double> before;
  for (pid_t p : pids) before.push_back(cpu_s(p));
  const double here_before = cpu_s(getpid());
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(o.seconds));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double total = 0;
  for (std::size_t i = 0; i < pids.size(); ++i) {
    const double share = (cpu_s(pids[i]) - before[i]) / wall;
    out->per_process.push_back(share);
    total += share;
  }
  out->here = (cpu_s(getpid()) - here_before) / wall;
  out->per_unit = total / units;
  rt->request_stop();
  const swarmflow::Status s = rt->wait();
  reap_all(pids);
  if (!s.ok()) std::fprintf(stderr, "control (%s): %s\n", policy.c_str(), s.message().c_str());
  return s.ok();
}

/// b.
int moves_across(const Options& o, const std::string& dir) {
  const std::string file = dir + "/moves.yaml";
  {
    std::ofstream y(file);
    y << "pipeline: moves\nplacement: {policy: static, interval_ms: 100}\ncoordinator: \"ipc://" << dir
      << "/m.sock\"\nunits:\n  - {id: u0, endpoint: \"ipc://" << dir << "/mu0.sock\", threads: 2}\n";
    for (const char* u : {"a1", "a2", "a3", "b1", "b2", "b3"}) {
      y << "  - {id: " << u << ", endpoint: \"ipc://" << dir << "/m" << u << ".sock\", threads: 1}\n";
    }
    y << "stages:\n"
      << "  - {id: src, type: sim.source, params: {count: 0, streams: 16, rate_hz: 4000}, placement: {units: [u0]}}\n"
      << "  - {id: work, type: sim.work, replicas: 4, key: stream, inputs: {in: src/out},\n"
      << "     params: {service_us: 500}, placement: {units: [a1, a2, b1, b2, a3, b3], spread: true}}\n"
      << "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}, placement: {units: [u0]}}\n";
  }
  std::vector<pid_t> pids;
  pids.push_back(swarmflow::bench::spawn_process({o.cli, "unit", file, "--id", "a1,a2,a3"}, dir + "/a.err"));
  pids.push_back(swarmflow::bench::spawn_process({o.cli, "unit", file, "--id", "b1,b2,b3"}, dir + "/b.err"));
  auto rt = start_here(file);
  if (!rt) {
    reap_all(pids);
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  int missed = 0;
  for (int i = 0; i < o.moves; ++i) {
    const std::uint64_t done = rt->moves_completed();
    const std::size_t made = rt->report().moves.size();
    if (swarmflow::Status s = rt->move_replica("work", 0, i % 2 == 0 ? "b3" : "a3"); !s.ok()) {
      std::fprintf(stderr, "move %d: %s\n", i, s.message().c_str());
      ++missed;
      continue;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (rt->moves_completed() == done && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    if (rt->report().moves.size() == made) ++missed;
    std::this_thread::sleep_for(std::chrono::milliseconds(o.gap_ms));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  rt->request_stop();
  const swarmflow::Status s = rt->wait();
  reap_all(pids);
  const swarmflow::RunReport r = rt->report();
  std::vector<double> drain;
  std::vector<double> added;
  std::vector<double> before;
  for (const auto& m : r.moves) {
    drain.push_back(m.drain_ms);
    if (m.latency_p99_before_ms >= 0 && m.latency_p99_around_ms >= 0) {
      added.push_back(m.latency_p99_around_ms - m.latency_p99_before_ms);
      before.push_back(m.latency_p99_before_ms);
    }
  }
  std::int64_t lost = 0;
  std::int64_t duplicate = 0;
  std::int64_t reordered = 0;
  std::uint64_t received = 0;
  for (const auto& st : r.stages) {
    if (st.id != "sink") continue;
    for (const auto& [name, value] : st.counters) {
      if (name == "lost") lost = value;
      if (name == "duplicate") duplicate = value;
      if (name == "reordered") reordered = value;
      if (name == "received") received = static_cast<std::uint64_t>(value);
    }
  }
  std::uint64_t dropped = 0;
  for (const auto& e : r.edges) dropped += e.dropped;
  std::printf("\nb. moves across processes: work/0 between a3 (process A) and b3 (process B), %zu of %d made%s\n",
              r.moves.size(), o.moves, s.ok() ? "" : (" — run failed: " + s.message()).c_str());
  std::printf("   drain p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", quantile(drain, 0.5), quantile(drain, 0.99),
              quantile(drain, 1.0));
  std::printf("   sink p99 in the interval before a move: median %.2f ms; around a move minus before: median %+.2f ms, "
              "p90 %+.2f ms (%zu moves with both)\n",
              quantile(before, 0.5), quantile(added, 0.5), quantile(added, 0.9), added.size());
  std::printf("   sink: %llu received; lost %lld, duplicated %lld, reordered %lld; dropped at the live source's edge %llu\n",
              static_cast<unsigned long long>(received), static_cast<long long>(lost),
              static_cast<long long>(duplicate), static_cast<long long>(reordered),
              static_cast<unsigned long long>(dropped));
  // A drop after a stream's last envelope leaves no gap; every gap is a counted drop.
  const bool intact = s.ok() && duplicate == 0 && reordered == 0 && static_cast<std::uint64_t>(lost) <= dropped;
  if (!intact || missed > 0) {
    std::printf("   FAILED: %s\n", missed > 0 ? "a move was not made" : "lost, duplicated or reordered");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  std::string dir = (std::filesystem::temp_directory_path() / "swarmflow-placement-processes-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return 1;
  int rc = 0;
  if (!o.only_moves) {
    std::printf("a. control plane: %d unit processes x %d units, one replica a unit, %d s after 2 s of warm-up\n",
                o.processes, o.units_per, o.seconds);
    for (const char* policy : {"static", "adaptive"}) {
      ControlFigure f;
      if (!control_plane(o, dir, policy, &f)) {
        rc = 1;
        continue;
      }
      std::string each;
      for (double p : f.per_process) {
        char b[32];
        std::snprintf(b, sizeof b, "%s%.2f%%", each.empty() ? "" : ", ", 100 * p);
        each += b;
      }
      std::printf("   %-8s per unit %.3f%% of a core (unit processes: %s; coordinator with u0: %.2f%%)\n", policy,
                  100 * f.per_unit, each.c_str(), 100 * f.here);
    }
  }
  if (!o.only_control && moves_across(o, dir) != 0) rc = 1;
  std::error_code ec;
  if (rc == 0) std::filesystem::remove_all(dir, ec);
  return rc;
}
