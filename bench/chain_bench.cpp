// swarmflow_bench_chain — what swarmflow costs over raw CAF on a 4-stage chain.
//
// Both sides move the same payload: a std::shared_ptr to a finished 64-byte
// FlatBuffers Blob, made per message exactly as sim.source makes it. Both run
// in one caf::actor_system with the same number of worker threads.
//
//   raw CAF   source actor -> forwarder -> forwarder -> sink actor. The source
//             keeps at most `window` messages outstanding and the sink acks
//             every window/2, so no mailbox grows without bound.
//   swarmflow sim.source -> sim.work (service_us 0) -> sim.work -> sim.sink
//             from a YAML string, run by swarmflow::Runtime; queue capacity
//             `capacity`, overflow block.
//
// Throughput is measured under saturation (the source as fast as flow control
// allows); latency under a paced load, end to end and divided by the 3 hops.
// Never both in one measurement.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/swarmflow.hpp>

#include "bench_args.hpp"
#include "observe.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(swarmflow::PayloadPtr)

namespace {

using data_atom = caf::atom_constant<caf::atom("data")>;
using credit_atom = caf::atom_constant<caf::atom("credit")>;
using go_atom = caf::atom_constant<caf::atom("go")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;

// -- options ------------------------------------------------------------------

struct Options {
  std::int64_t n = 200000;         ///< messages per throughput run
  std::int64_t latency_n = 40000;  ///< messages per latency run
  double rate_hz = 20000;          ///< paced load of the latency runs
  int threads = 0;                 ///< CAF worker threads; 0 = the machine's cores (at least 2)
  int repeat = 3;                  ///< runs of each measurement; the median is reported
  int window = 1024;               ///< raw CAF: most messages outstanding
  int capacity = 64;               ///< swarmflow: queue capacity of every edge
  int payload_bytes = 64;
  std::string json_path;           ///< write the results as JSON here when set
  std::string only;                ///< "raw" or "swarmflow": run one side only (for profiling)
  int observe_cost = 0;            ///< pairs of swarmflow runs unobserved / observed (0: none)
  int look_ms = 100;               ///< observed runs: the report, JSON and /metrics text made every this often
};

bool parse(int argc, char** argv, Options& o) {
  using namespace swarmflow::bench;
  const std::vector<Flag> flags = {
      integer_flag("--n", "N", o.n, "messages per throughput run (default 200000)"),
      integer_flag("--latency-n", "N", o.latency_n, "messages per latency run (default 40000)"),
      number_flag("--rate", "HZ", o.rate_hz, "paced load of the latency runs, messages/s (default 20000)"),
      integer_flag("--threads", "T", o.threads, "CAF worker threads for both sides (default: cores, at least 2)"),
      integer_flag("--repeat", "R", o.repeat, "runs of each measurement, the median is reported (default 3)"),
      integer_flag("--window", "W", o.window, "raw CAF: most messages outstanding, acked every W/2 (default 1024)"),
      integer_flag("--capacity", "C", o.capacity, "swarmflow: queue capacity of every edge (default 64)"),
      integer_flag("--payload-bytes", "B", o.payload_bytes, "bytes of data per Blob (default 64)"),
      text_flag("--json", "FILE", o.json_path, "also write the results as JSON to FILE"),
      text_flag("--only", "SIDE", o.only, "run only `raw` or only `swarmflow` (to profile one side)"),
      integer_flag("--observe-cost", "R", o.observe_cost,
                   "also R pairs of throughput runs of swarmflow unobserved (no hop figures, nothing asks) and "
                   "observed (hop figures, report + JSON + /metrics text every --look-ms), back to back, alternating "
                   "which goes first; the median of the pairs' ratios and its spread (default 0)"),
      integer_flag("--look-ms", "MS", o.look_ms,
                   "observed runs make the report, its JSON and its /metrics text every MS ms (default 100; the web\n"
                   "view and top ask every 1000, Prometheus every 5000-15000)"),
  };
  if (!parse_flags(argc, argv, flags)) return false;
  if (!o.only.empty() && o.only != "raw" && o.only != "swarmflow") {
    std::fprintf(stderr, "--only takes raw or swarmflow\n");
    return false;
  }
  if (o.threads <= 0) o.threads = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  if (o.n <= 0 || o.latency_n <= 0 || o.rate_hz <= 0 || o.repeat <= 0 || o.window < 2 || o.capacity < 1 ||
      o.payload_bytes < 0 || o.look_ms <= 0) {
    std::fprintf(stderr, "every count, rate and size must be positive (window at least 2)\n");
    return false;
  }
  return true;
}

// -- results ------------------------------------------------------------------

/// End-to-end latency percentiles in milliseconds.
struct Latency {
  double p50 = 0;
  double p99 = 0;
  double p999 = 0;
  double max = 0;
};

struct RunResult {
  bool ok = false;
  double seconds = 0;
  std::int64_t received = 0;
  /// Dropped by flow control at a live (paced) swarmflow source that had no
  /// credit; counted by swarmflow, and by design not an error. Raw CAF never drops.
  std::int64_t dropped = 0;
  double source_lag_ms = 0;  ///< raw, paced: the most the source fell behind its schedule
  double cpu_s = 0;          ///< swarmflow: the process's CPU time over the run, every thread
  Latency latency;
  std::string problem;  ///< why the run is not ok, empty when it is
};

double percentile_ms(const std::vector<std::int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  const std::size_t i = std::min(sorted.size() - 1, rank > 0 ? rank - 1 : 0);
  return static_cast<double>(sorted[i]) / 1e6;
}

// -- the payload, exactly as sim.source makes it -----------------------------------

swarmflow::PayloadPtr make_blob(std::uint64_t seq, int payload_bytes) {
  flatbuffers::FlatBufferBuilder fbb(static_cast<std::size_t>(payload_bytes) + 64);
  std::uint8_t* bytes = nullptr;
  auto data = fbb.CreateUninitializedVector(static_cast<std::size_t>(payload_bytes), &bytes);
  if (payload_bytes > 0) std::memset(bytes, static_cast<int>(seq & 0xff), static_cast<std::size_t>(payload_bytes));
  fbb.Finish(swarmflow::schema::CreateBlob(fbb, 0, seq, data), swarmflow::schema::BlobIdentifier());
  return swarmflow::Payload::from_builder(fbb);
}

// -- raw CAF chain --------------------------------------------------------------

/// What the raw sink hands back when it has seen every message.
struct SinkResult {
  std::int64_t end_ns = 0;
  std::int64_t received = 0;
  std::int64_t misordered = 0;
  std::vector<std::int64_t> latencies_ns;
};

struct SinkState {
  std::int64_t expected = 0;
  std::int64_t ack_every = 1;
  bool record = false;
  caf::actor source;
  std::int64_t unacked = 0;
  std::uint64_t next_seq = 0;
  SinkResult result;
  std::shared_ptr<std::promise<SinkResult>> done;
};

caf::behavior raw_sink(caf::stateful_actor<SinkState>* self, std::int64_t expected, std::int64_t ack_every,
                       bool record, std::shared_ptr<std::promise<SinkResult>> done) {
  auto& st = self->state;
  st.expected = expected;
  st.ack_every = ack_every;
  st.record = record;
  st.done = std::move(done);
  if (record) st.result.latencies_ns.reserve(static_cast<std::size_t>(expected));
  return {
      [self](caf::actor source) { self->state.source = std::move(source); },
      [self](data_atom, const swarmflow::PayloadPtr& p, std::int64_t sent_ns) {
        auto& s = self->state;
        const std::int64_t now = swarmflow::steady_now_ns();
        if (s.record) s.result.latencies_ns.push_back(now - sent_ns);
        // Touch the payload as sim.sink does (it reads the header's sequence).
        const auto* blob = p->root<swarmflow::schema::Blob>();
        if (blob->seq() != s.next_seq) ++s.result.misordered;
        s.next_seq = blob->seq() + 1;
        ++s.result.received;
        if (++s.unacked >= s.ack_every) {
          self->send(s.source, credit_atom::value, s.unacked);
          s.unacked = 0;
        }
        if (s.result.received == s.expected) {
          s.result.end_ns = now;
          s.done->set_value(std::move(s.result));
        }
      },
  };
}

caf::behavior raw_forwarder(caf::event_based_actor* self, caf::actor next) {
  return {
      [self, next](data_atom a, swarmflow::PayloadPtr& p, std::int64_t sent_ns) {
        self->send(next, a, std::move(p), sent_ns);
      },
  };
}

struct SourceState {
  caf::actor first;
  std::int64_t n = 0;
  std::int64_t window = 0;
  int payload_bytes = 0;
  double rate_hz = 0;  ///< 0 = saturate
  std::int64_t sent = 0;
  std::int64_t outstanding = 0;
  std::int64_t start_ns = 0;
  bool tick_pending = false;
  std::shared_ptr<std::atomic<std::int64_t>> max_lag_ns;
};

/// Sends what the window (and, when paced, the clock) allows.
void raw_source_send(caf::stateful_actor<SourceState>* self) {
  auto& s = self->state;
  while (s.sent < s.n && s.outstanding < s.window) {
    if (s.rate_hz > 0) {
      const auto due = s.start_ns + static_cast<std::int64_t>(static_cast<double>(s.sent) * 1e9 / s.rate_hz);
      const std::int64_t now = swarmflow::steady_now_ns();
      if (due > now) {
        if (!s.tick_pending) {
          s.tick_pending = true;
          self->delayed_send(self, std::chrono::nanoseconds(due - now), tick_atom::value);
        }
        return;
      }
      if (now - due > s.max_lag_ns->load(std::memory_order_relaxed)) {
        s.max_lag_ns->store(now - due, std::memory_order_relaxed);
      }
    }
    auto payload = make_blob(static_cast<std::uint64_t>(s.sent), s.payload_bytes);
    self->send(s.first, data_atom::value, std::move(payload), swarmflow::steady_now_ns());
    ++s.sent;
    ++s.outstanding;
  }
}

caf::behavior raw_source(caf::stateful_actor<SourceState>* self, caf::actor first, std::int64_t n, std::int64_t window,
                         int payload_bytes, double rate_hz, std::shared_ptr<std::atomic<std::int64_t>> max_lag_ns) {
  auto& st = self->state;
  st.max_lag_ns = std::move(max_lag_ns);
  st.first = std::move(first);
  st.n = n;
  st.window = window;
  st.payload_bytes = payload_bytes;
  st.rate_hz = rate_hz;
  return {
      [self](go_atom) {
        self->state.start_ns = swarmflow::steady_now_ns();
        raw_source_send(self);
      },
      [self](credit_atom, std::int64_t k) {
        self->state.outstanding -= k;
        raw_source_send(self);
      },
      [self](tick_atom) {
        self->state.tick_pending = false;
        raw_source_send(self);
      },
  };
}

RunResult run_raw(const Options& o, std::int64_t n, double rate_hz, bool record) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", static_cast<std::size_t>(o.threads));
  caf::actor_system sys{cfg};
  auto done = std::make_shared<std::promise<SinkResult>>();
  auto finished = done->get_future();
  const std::int64_t ack_every = std::max(1, o.window / 2);
  auto sink = sys.spawn(raw_sink, n, ack_every, record, done);
  auto fwd2 = sys.spawn(raw_forwarder, sink);
  auto fwd1 = sys.spawn(raw_forwarder, fwd2);
  auto max_lag_ns = std::make_shared<std::atomic<std::int64_t>>(0);
  auto source =
      sys.spawn(raw_source, fwd1, n, static_cast<std::int64_t>(o.window), o.payload_bytes, rate_hz, max_lag_ns);
  // Enqueued before `go`, so the sink knows where to ack before any data arrives.
  caf::anon_send(sink, source);
  const std::int64_t t0 = swarmflow::steady_now_ns();
  caf::anon_send(source, go_atom::value);
  RunResult r;
  const auto wait = std::chrono::seconds(60) + std::chrono::seconds(static_cast<std::int64_t>(
                                                   static_cast<double>(n) / std::max(rate_hz, 1000.0)));
  if (finished.wait_for(wait) == std::future_status::ready) {
    SinkResult s = finished.get();
    r.ok = s.received == n && s.misordered == 0;
    if (!r.ok) r.problem = "received " + std::to_string(s.received) + ", misordered " + std::to_string(s.misordered);
    r.received = s.received;
    r.seconds = static_cast<double>(s.end_ns - t0) / 1e9;
    r.source_lag_ms = static_cast<double>(max_lag_ns->load()) / 1e6;
    if (record) {
      std::sort(s.latencies_ns.begin(), s.latencies_ns.end());
      r.latency = Latency{percentile_ms(s.latencies_ns, 0.50), percentile_ms(s.latencies_ns, 0.99),
                          percentile_ms(s.latencies_ns, 0.999),
                          s.latencies_ns.empty() ? 0.0 : static_cast<double>(s.latencies_ns.back()) / 1e6};
    }
  } else {
    r.problem = "did not finish in time";
  }
  for (const auto& a : {source, fwd1, fwd2, sink}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return r;
}

// -- swarmflow chain ------------------------------------------------------------

std::string chain_yaml(const Options& o, std::int64_t n, double rate_hz) {
  const std::string queue =
      "    queue: {capacity: " + std::to_string(o.capacity) + ", overflow: block}\n";
  return "pipeline: bench_chain\n"
         "units: 1\n"
         "stages:\n"
         "  - id: source\n"
         "    type: sim.source\n"
         "    params: {count: " + std::to_string(n) + ", payload_bytes: " + std::to_string(o.payload_bytes) +
         ", rate_hz: " + std::to_string(rate_hz) + "}\n"
         "  - id: work1\n"
         "    type: sim.work\n"
         "    inputs: {in: source/out}\n"
         "    params: {service_us: 0}\n" + queue +
         "  - id: work2\n"
         "    type: sim.work\n"
         "    inputs: {in: work1/out}\n"
         "    params: {service_us: 0}\n" + queue +
         "  - id: sink\n"
         "    type: sim.sink\n"
         "    inputs: {in: work2/out}\n" + queue;
}

std::int64_t counter(const swarmflow::StageReport* s, const char* name) {
  if (s == nullptr) return 0;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

/// How a swarmflow run is watched: `plain` as the rest of the benchmark,
/// `unobserved` without hop figures, `observed` with them and a Scraper.
enum class Watch { plain, unobserved, observed };

/// Mean time (and CPU time) of one look of the Scraper in observed runs, in µs.
double g_look_us_sum = 0;
double g_look_cpu_us_sum = 0;
int g_look_runs = 0;

RunResult run_swarmflow(const Options& o, std::int64_t n, double rate_hz, Watch watch = Watch::plain) {
  swarmflow::RuntimeOptions ro;
  ro.threads = o.threads;
  ro.hop_figures = watch != Watch::unobserved;
  swarmflow::Runtime runtime(ro);
  std::vector<swarmflow::Diagnostic> diagnostics;
  RunResult r;
  swarmflow::Status s = runtime.load_string(chain_yaml(o, n, rate_hz), "bench_chain.yaml", &diagnostics);
  if (!s.ok()) {
    std::fprintf(stderr, "the bench pipeline does not load:\n%s\n", swarmflow::format_diagnostics(diagnostics).c_str());
    return r;
  }
  {
    std::unique_ptr<swarmflow::bench::Scraper> scraper;
    const double cpu0 = swarmflow::bench::process_cpu_s();
    if (watch == Watch::observed) scraper = std::make_unique<swarmflow::bench::Scraper>(runtime, std::chrono::milliseconds(o.look_ms));
    s = runtime.run();
    if (scraper && scraper->scrapes() > 0) {
      g_look_us_sum += scraper->look_us();
      g_look_cpu_us_sum += scraper->look_cpu_us();
      ++g_look_runs;
    }
    scraper.reset();  // a look under way counts too
    r.cpu_s = swarmflow::bench::process_cpu_s() - cpu0;
  }
  const swarmflow::RunReport report = runtime.report();
  const auto* sink = report.stage("sink");
  std::uint64_t dropped = 0;
  for (const auto& e : report.edges) dropped += e.dropped;
  r.received = counter(sink, "received");
  r.dropped = static_cast<std::int64_t>(dropped);
  // Every envelope arrived once and in order, except those dropped (and counted) at the source.
  r.ok = s.ok() && report.ok && r.received + r.dropped == n && counter(sink, "lost") <= r.dropped &&
         counter(sink, "reordered") == 0 && counter(sink, "duplicate") == 0;
  if (!r.ok) {
    r.problem = "received " + std::to_string(r.received) + ", lost " + std::to_string(counter(sink, "lost")) +
                ", dropped " + std::to_string(dropped) + ", reordered " + std::to_string(counter(sink, "reordered")) +
                (s.ok() ? std::string() : ", " + s.message());
  }
  r.seconds = report.duration_s;
  if (sink != nullptr) {
    r.latency = Latency{sink->latency.p50_ms, sink->latency.p99_ms, sink->latency.p999_ms, sink->latency.max_ms};
  }
  if (!s.ok()) std::fprintf(stderr, "swarmflow run failed: %s\n", s.message().c_str());
  return r;
}

// -- reporting ------------------------------------------------------------------

/// The run whose value of `key` is the median (lower median for even counts).
template <class Key>
RunResult median_by(std::vector<RunResult> runs, Key key) {
  std::sort(runs.begin(), runs.end(), [&](const RunResult& a, const RunResult& b) { return key(a) < key(b); });
  return runs[(runs.size() - 1) / 2];
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

/// Messages per second of a run of n messages; 0 for a run that did not happen.
double per_s(std::int64_t n, const RunResult& r) { return r.seconds > 0 ? static_cast<double>(n) / r.seconds : 0; }

/// Messages per second of the process's CPU time (every thread); 0 when not measured.
double per_cpu_s(std::int64_t n, const RunResult& r) { return r.cpu_s > 0 ? static_cast<double>(n) / r.cpu_s : 0; }

/// "  [raw: ...] [swarmflow: ...]" for runs that are not ok, else empty.
std::string problems(const RunResult& raw, const RunResult& sf) {
  std::string p;
  if (!raw.ok) p += "  [raw: " + raw.problem + "]";
  if (!sf.ok) p += "  [swarmflow: " + sf.problem + "]";
  return p;
}

std::string command_line(int argc, char** argv) {
  std::string c;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) c += ' ';
    c += argv[i];
  }
  return c;
}

std::string json_latency(const Latency& l) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"p50_ms\": %.6f, \"p99_ms\": %.6f, \"p999_ms\": %.6f, \"max_ms\": %.6f, "
                "\"per_hop_p50_ms\": %.6f, \"per_hop_p99_ms\": %.6f, \"per_hop_p999_ms\": %.6f}",
                l.p50, l.p99, l.p999, l.max, l.p50 / 3, l.p99 / 3, l.p999 / 3);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  const std::string cmd = command_line(argc, argv);
  constexpr int kHops = 3;

  std::printf("swarmflow chain benchmark: 4 stages, %d-byte FlatBuffers Blob per message, %d CAF worker threads\n",
              o.payload_bytes, o.threads);
  std::printf("  raw CAF:   source -> forwarder -> forwarder -> sink, event-based actors in one actor_system;\n"
              "             message = (atom, shared_ptr<const Payload>, send time); the source keeps at most\n"
              "             %d messages outstanding and the sink acks every %d (bounded mailboxes)\n",
              o.window, std::max(1, o.window / 2));
  std::printf("  swarmflow: sim.source -> sim.work -> sim.work -> sim.sink via swarmflow::Runtime,\n"
              "             service_us 0, queue capacity %d, overflow block (credits acked every %d)\n",
              o.capacity, std::max(1, o.capacity / 2));
  std::printf("  throughput: N=%lld as fast as flow control allows; latency: N=%lld paced at %.0f msg/s;\n"
              "  each measured %d times alternating raw/swarmflow, median reported\n\n",
              static_cast<long long>(o.n), static_cast<long long>(o.latency_n), o.rate_hz, o.repeat);
  std::fflush(stdout);

  std::vector<RunResult> raw_tp, sf_tp, raw_lat, sf_lat;
  const bool run_raw_side = o.only != "swarmflow";
  const bool run_sf_side = o.only != "raw";
  RunResult skipped;  // stands for the side that --only leaves out
  skipped.ok = true;
  bool all_ok = true;
  for (int i = 0; i < o.repeat; ++i) {
    raw_tp.push_back(run_raw_side ? run_raw(o, o.n, 0, false) : skipped);
    sf_tp.push_back(run_sf_side ? run_swarmflow(o, o.n, 0) : skipped);
    std::printf("  throughput run %d: raw %.0f msg/s, swarmflow %.0f msg/s%s\n", i + 1, per_s(o.n, raw_tp.back()),
                per_s(o.n, sf_tp.back()), problems(raw_tp.back(), sf_tp.back()).c_str());
    std::fflush(stdout);
  }
  for (int i = 0; i < o.repeat; ++i) {
    raw_lat.push_back(run_raw_side ? run_raw(o, o.latency_n, o.rate_hz, true) : skipped);
    sf_lat.push_back(run_sf_side ? run_swarmflow(o, o.latency_n, o.rate_hz) : skipped);
    std::printf(
        "  latency run %d: p50 raw %.4f ms, swarmflow %.4f ms; raw source up to %.2f ms behind schedule, "
        "swarmflow dropped %lld at its live source%s\n",
        i + 1, raw_lat.back().latency.p50, sf_lat.back().latency.p50, raw_lat.back().source_lag_ms,
        static_cast<long long>(sf_lat.back().dropped), problems(raw_lat.back(), sf_lat.back()).c_str());
    std::fflush(stdout);
  }
  // What watching costs: pairs of the same saturated run unobserved and
  // observed, back to back, alternating which goes first; each pair's ratio.
  std::vector<RunResult> off_runs, on_runs;
  swarmflow::bench::PairedRatios wall_pairs, cpu_pairs;
  for (int i = 0; i < o.observe_cost; ++i) {
    if (i % 2 == 1) on_runs.push_back(run_swarmflow(o, o.n, 0, Watch::observed));
    off_runs.push_back(run_swarmflow(o, o.n, 0, Watch::unobserved));
    if (i % 2 == 0) on_runs.push_back(run_swarmflow(o, o.n, 0, Watch::observed));
    const RunResult& off = off_runs.back();
    const RunResult& on = on_runs.back();
    wall_pairs.add(per_s(o.n, on), per_s(o.n, off));
    cpu_pairs.add(per_cpu_s(o.n, on), per_cpu_s(o.n, off));
    std::printf("  observe-cost pair %d (%s first): unobserved %.0f msg/s, %.0f per CPU s; observed %.0f msg/s, "
                "%.0f per CPU s; ratio %.3f, per CPU s %.3f%s\n",
                i + 1, i % 2 == 1 ? "observed" : "unobserved", per_s(o.n, off), per_cpu_s(o.n, off), per_s(o.n, on),
                per_cpu_s(o.n, on), ratio(per_s(o.n, on), per_s(o.n, off)),
                ratio(per_cpu_s(o.n, on), per_cpu_s(o.n, off)), problems(off, on).c_str());
    std::fflush(stdout);
  }
  for (const auto* runs : {&off_runs, &on_runs}) {
    for (const auto& r : *runs) all_ok = all_ok && r.ok;
  }
  std::int64_t total_dropped = 0;
  for (const auto* runs : {&raw_tp, &sf_tp, &raw_lat, &sf_lat}) {
    for (const auto& r : *runs) {
      all_ok = all_ok && r.ok;
      total_dropped += r.dropped;
    }
  }

  auto by_seconds = [](const RunResult& r) { return r.seconds; };
  auto by_p50 = [](const RunResult& r) { return r.latency.p50; };
  const RunResult rt = median_by(raw_tp, by_seconds);
  const RunResult st = median_by(sf_tp, by_seconds);
  const RunResult rl = median_by(raw_lat, by_p50);
  const RunResult sl = median_by(sf_lat, by_p50);
  const double raw_mps = per_s(o.n, rt);
  const double sf_mps = per_s(o.n, st);

  std::printf("\nthroughput (saturated, N=%lld)          raw CAF      swarmflow   swarmflow/raw\n",
              static_cast<long long>(o.n));
  std::printf("  messages/s                      %12.0f   %12.0f   %8.2f\n", raw_mps, sf_mps, ratio(sf_mps, raw_mps));
  std::printf("  run time s                      %12.3f   %12.3f\n", rt.seconds, st.seconds);
  std::printf("\nlatency (paced %.0f msg/s, N=%lld), ms   raw CAF      swarmflow   swarmflow/raw\n", o.rate_hz,
              static_cast<long long>(o.latency_n));
  const struct {
    const char* name;
    double raw;
    double sf;
  } rows[] = {{"end-to-end p50", rl.latency.p50, sl.latency.p50},
              {"end-to-end p99", rl.latency.p99, sl.latency.p99},
              {"end-to-end p99.9", rl.latency.p999, sl.latency.p999},
              {"per hop p50", rl.latency.p50 / kHops, sl.latency.p50 / kHops},
              {"per hop p99", rl.latency.p99 / kHops, sl.latency.p99 / kHops},
              {"per hop p99.9", rl.latency.p999 / kHops, sl.latency.p999 / kHops}};
  for (const auto& row : rows) {
    std::printf("  %-30s %12.4f   %12.4f   %8.2f\n", row.name, row.raw, row.sf, ratio(row.sf, row.raw));
  }
  std::printf("  %-30s %12d   %12lld\n", "dropped at the source", 0, static_cast<long long>(sl.dropped));
  std::printf("  (a paced swarmflow source is live: what finds no credit is dropped and counted, the raw\n"
              "   source only ever sends late; the raw source fell up to %.2f ms behind schedule)\n",
              rl.source_lag_ms);
  if (o.observe_cost > 0) {
    const double off = per_s(o.n, median_by(off_runs, by_seconds));
    const double on = per_s(o.n, median_by(on_runs, by_seconds));
    const auto wall = wall_pairs.summary();
    const auto cpu = cpu_pairs.summary();
    std::printf("\nwhat watching costs (saturated, N=%lld, %d pairs)   unobserved     observed   observed/unobserved\n",
                static_cast<long long>(o.n), o.observe_cost);
    std::printf("  messages/s, medians of the runs %12.0f   %12.0f   %8.3f\n", off, on, ratio(on, off));
    std::printf("  per pair, messages/s:           %s\n", swarmflow::bench::PairedRatios::describe(wall).c_str());
    std::printf("  per pair, messages per CPU s:   %s\n", swarmflow::bench::PairedRatios::describe(cpu).c_str());
    std::printf("  (observed: hop figures recorded, and the report, its JSON and its /metrics text made every\n"
                "   %d ms; unobserved: neither; CPU s: the process's, every thread)\n", o.look_ms);
    std::printf("  target: observed >= 0.98 x unobserved: %s (median of the pairs' ratios %.3f; its 95%% CI %s 0.98)\n",
                wall.median >= 0.98 ? "met" : "NOT met", wall.median,
                wall.ci_low >= 0.98 ? "lies above" : (wall.ci_high < 0.98 ? "lies below" : "reaches below"));
    // The same cost from its parts, which the machine's noise moves less:
    // measuring a step, against the time the chain spends per step, and one
    // look, against the time between looks.
    const double step_ns = swarmflow::bench::hop_figures_ns_per_step(20'000'000);
    const double chain_step_ns = off > 0 ? 1e9 * o.threads / (off * kHops) : 0;
    const double look_us = g_look_runs > 0 ? g_look_us_sum / g_look_runs : 0;
    const double look_cpu_us = g_look_runs > 0 ? g_look_cpu_us_sum / g_look_runs : 0;
    std::printf("  from its parts: measuring a step %.2f ns (one in %llu recorded) = %.2f%% of the %.0f ns of worker\n"
                "  time the chain spends per step; one look %.0f us (%.0f us of CPU) every %d ms = %.2f%% of one core\n",
                step_ns, static_cast<unsigned long long>(swarmflow::runtime::kHopSampleEvery),
                chain_step_ns > 0 ? 100 * step_ns / chain_step_ns : 0, chain_step_ns, look_us, look_cpu_us, o.look_ms,
                look_cpu_us / (10.0 * o.look_ms));
  }
  std::printf("\n  target: swarmflow throughput >= 0.70 x raw CAF: %s (%.2f)\n",
              ratio(sf_mps, raw_mps) >= 0.7 ? "met" : "NOT met", ratio(sf_mps, raw_mps));
  std::printf("  every run delivered every message once and in order, but for counted drops at a live\n"
              "  source (%lld in all runs): %s\n",
              static_cast<long long>(total_dropped), all_ok ? "yes" : "NO");
  std::printf("command: %s\n", cmd.c_str());

  if (!o.json_path.empty()) {
    FILE* f = std::fopen(o.json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", o.json_path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\n  \"benchmark\": \"chain\",\n  \"command\": \"%s\",\n  \"threads\": %d,\n"
                 "  \"payload_bytes\": %d,\n  \"repeat\": %d,\n  \"hops\": %d,\n"
                 "  \"throughput\": {\"n\": %lld, \"raw_caf_msgs_per_s\": %.1f, \"swarmflow_msgs_per_s\": %.1f, "
                 "\"ratio\": %.4f, \"raw_window\": %d, \"swarmflow_capacity\": %d},\n"
                 "  \"latency\": {\"n\": %lld, \"rate_hz\": %.1f,\n    \"raw_caf\": %s,\n    \"swarmflow\": %s,\n"
                 "    \"ratio_p50\": %.4f, \"ratio_p99\": %.4f, \"ratio_p999\": %.4f,\n"
                 "    \"swarmflow_dropped_at_source\": %lld, \"raw_source_max_lag_ms\": %.4f},\n"
                 "  \"dropped_in_all_runs\": %lld,\n  \"all_delivered\": %s\n}\n",
                 json_escape(cmd).c_str(), o.threads, o.payload_bytes, o.repeat, kHops, static_cast<long long>(o.n),
                 raw_mps, sf_mps, ratio(sf_mps, raw_mps), o.window, o.capacity,
                 static_cast<long long>(o.latency_n), o.rate_hz, json_latency(rl.latency).c_str(),
                 json_latency(sl.latency).c_str(), ratio(sl.latency.p50, rl.latency.p50),
                 ratio(sl.latency.p99, rl.latency.p99), ratio(sl.latency.p999, rl.latency.p999),
                 static_cast<long long>(sl.dropped), rl.source_lag_ms, static_cast<long long>(total_dropped),
                 all_ok ? "true" : "false");
    std::fclose(f);
    std::printf("results written to %s\n", o.json_path.c_str());
  }
  return all_ok ? 0 : 1;
}
