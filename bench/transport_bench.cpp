// swarmflow_bench_transport — what swarmflow costs over raw ZeroMQ between two units.
//
// Both sides move the same messages: a FlatBuffers Blob made per message
// exactly as sim.source makes it (payload_bytes of data, filled), 64 bytes or
// one 1080p RGB frame (1920 x 1080 x 3 = 6 220 800 bytes), over the same kind
// of endpoint, in the same run.
//
//   raw ZeroMQ  PUSH (sender thread) -> PULL (receiver thread) in a context of
//               its own with one I/O thread. Messages of 4 KiB or more go out
//               without a copy (zmq_msg_init_data, the deleter drops the
//               payload's reference), smaller ones are copied into the message.
//               The send time travels in the Blob's first data bytes. On tcp
//               it runs twice: plaintext, and CURVE (no ZAP handler, so libzmq
//               admits any client key), which is what swarmflow is compared with.
//   swarmflow   sim.source pinned to unit u0 -> sim.sink pinned to unit u1, run
//               by swarmflow::Runtime in this process: inproc (`units: 2`), ipc
//               (ipc:// endpoints in a private temporary directory) or tcp
//               (127.0.0.1, CURVE with a key pair made by write_key_pair).
//
// Throughput is measured under saturation (the sender as fast as backpressure
// allows); latency under a paced load, from the moment the message is made to
// its receipt (raw) or the end of the sink's step (swarmflow). Never both in
// one measurement.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <zmq.h>

#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/swarmflow.hpp>

#include "bench_args.hpp"
#include "observe.hpp"

namespace {

/// Messages at least this large are sent without a copy.
constexpr int kZeroCopyMinBytes = 4096;
constexpr int kFrameBytes = 1920 * 1080 * 3;

// -- options ------------------------------------------------------------------

struct Options {
  std::int64_t n = 100000;            ///< small messages per throughput run
  std::int64_t frames_n = 300;        ///< frames per throughput run
  std::int64_t latency_n = 5000;      ///< small messages per latency run
  std::int64_t frames_latency_n = 60; ///< frames per latency run
  double rate_hz = 10000;             ///< paced load of small messages
  double frames_rate_hz = 30;         ///< paced load of frames (a 1080p30 camera)
  int small_bytes = 64;
  int frame_bytes = kFrameBytes;
  int capacity = 1000;                ///< swarmflow queue capacity, small messages: raw's high-water mark
  int frames_capacity = 4;            ///< swarmflow queue capacity, frames
  int raw_hwm = 1000;                 ///< raw ZeroMQ high-water marks, small messages (ZeroMQ's default)
  int raw_io_threads = 1;             ///< raw ZeroMQ I/O threads; 1 = as swarmflow's process context
  int threads = 0;                    ///< CAF worker threads per unit; 0 = the runtime's default
  int repeat = 7;                     ///< throughput runs of each 64-byte case; the median is reported
  int frames_repeat = 5;              ///< throughput runs of each frame case; the median is reported
  bool malloc_defaults = false;       ///< both sides on the C library's default malloc settings
  std::string json_path;
  std::set<std::string> only;         ///< restrictions: sides, transports, sizes
  bool observe_cost = false;          ///< also swarmflow unobserved / observed, per row
  int observe_pairs = 20;             ///< pairs of unobserved / observed runs per row
  int look_ms = 100;                  ///< observed runs: the report, JSON and /metrics text made every this often
};

const std::vector<std::string> kSides = {"raw", "swarmflow"};
const std::vector<std::string> kTransports = {"inproc", "ipc", "tcp"};
const std::vector<std::string> kSizes = {"small", "frames"};

bool parse(int argc, char** argv, Options& o) {
  using namespace swarmflow::bench;
  std::string only;
  const std::vector<Flag> flags = {
      integer_flag("--n", "N", o.n, "64-byte messages per throughput run (default 100000)"),
      integer_flag("--frames-n", "N", o.frames_n, "1080p frames per throughput run (default 300)"),
      integer_flag("--latency-n", "N", o.latency_n, "64-byte messages per latency run (default 5000)"),
      integer_flag("--frames-latency-n", "N", o.frames_latency_n, "frames per latency run (default 60)"),
      number_flag("--rate", "HZ", o.rate_hz, "paced load of 64-byte messages, msg/s (default 10000)"),
      number_flag("--frames-rate", "HZ", o.frames_rate_hz, "paced load of frames, frames/s (default 30)"),
      integer_flag("--capacity", "C", o.capacity,
                   "swarmflow queue capacity for 64-byte messages (default 1000, the\n"
                   "same bound on queued messages as the raw high-water mark)"),
      integer_flag("--frames-capacity", "C", o.frames_capacity,
                   "swarmflow queue capacity for frames, also the raw high-water\n"
                   "marks for frames (default 4)"),
      integer_flag("--raw-hwm", "H", o.raw_hwm, "raw ZeroMQ SNDHWM/RCVHWM for 64-byte messages (default 1000)"),
      integer_flag("--raw-io-threads", "K", o.raw_io_threads,
                   "raw ZeroMQ I/O threads (default 1, as swarmflow's one context per\n"
                   "process; 2 lets sender and receiver encrypt/decrypt in parallel)"),
      integer_flag("--threads", "T", o.threads, "CAF worker threads per unit (default: the runtime's, cores / units)"),
      integer_flag("--repeat", "R", o.repeat, "throughput runs per 64-byte case, the median is reported (default 7)"),
      integer_flag("--frames-repeat", "R", o.frames_repeat,
                   "throughput runs per frame case, the median is reported (default 5)"),
      switch_flag("--malloc-defaults", o.malloc_defaults,
                  "run both sides on glibc's default malloc settings; by default both run\n"
                  "with freed frame-sized blocks kept in the heap, as the runtime sets it\n"
                  "(swarmflow::keep_freed_frames_in_heap)"),
      text_flag("--only", "LIST", only,
                "comma-separated: raw, swarmflow, inproc, ipc, tcp, small, frames;\n"
                "e.g. --only tcp,frames or --only swarmflow (to profile one side)"),
      text_flag("--json", "FILE", o.json_path, "also write the results as JSON to FILE"),
      switch_flag("--observe-cost", o.observe_cost,
                  "also run each row's swarmflow throughput unobserved (no hop figures, nothing asks) and observed\n"
                  "(hop figures, report + JSON + /metrics text every --look-ms) in pairs, back to back, alternating\n"
                  "which goes first; the median of the pairs' ratios and its spread"),
      integer_flag("--observe-pairs", "P", o.observe_pairs, "pairs per row for --observe-cost (default 20)"),
      integer_flag("--look-ms", "MS", o.look_ms,
                   "observed runs make the report, its JSON and its /metrics text every MS ms (default 100; the web\n"
                   "view and top ask every 1000, Prometheus every 5000-15000)"),
  };
  if (!parse_flags(argc, argv, flags)) return false;
  for (std::size_t start = 0; !only.empty() && start <= only.size();) {
    const std::size_t comma = std::min(only.find(',', start), only.size());
    const std::string item = only.substr(start, comma - start);
    auto in = [&](const std::vector<std::string>& group) {
      return std::find(group.begin(), group.end(), item) != group.end();
    };
    if (!in(kSides) && !in(kTransports) && !in(kSizes)) {
      std::fprintf(stderr, "--only takes raw, swarmflow, inproc, ipc, tcp, small, frames; got '%s'\n", item.c_str());
      return false;
    }
    o.only.insert(item);
    start = comma + 1;
  }
  if (o.n <= 0 || o.frames_n <= 0 || o.latency_n <= 0 || o.frames_latency_n <= 0 || o.rate_hz <= 0 ||
      o.frames_rate_hz <= 0 || o.capacity < 1 || o.frames_capacity < 1 || o.raw_hwm < 1 || o.raw_io_threads < 1 ||
      o.repeat <= 0 || o.frames_repeat <= 0 || o.threads < 0 || o.observe_pairs <= 0 || o.look_ms <= 0) {
    std::fprintf(stderr, "every count, rate and capacity must be positive\n");
    return false;
  }
  return true;
}

/// Whether `--only` lets `item` of `group` run (an empty group means all).
bool selected(const Options& o, const std::vector<std::string>& group, const std::string& item) {
  bool any = false;
  for (const auto& g : group) any = any || o.only.count(g) > 0;
  return !any || o.only.count(item) > 0;
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
  bool ran = false;
  double seconds = 0;
  std::int64_t received = 0;
  /// Dropped by flow control at a live (paced) swarmflow source that had no
  /// credit; counted by swarmflow, and by design not an error. Raw never drops.
  std::int64_t dropped = 0;
  double sender_lag_ms = 0;  ///< raw, paced: the most the sender fell behind its schedule
  double cpu_s = 0;          ///< swarmflow: the process's CPU time over the run, every thread
  Latency latency;
  std::string problem;  ///< why the run is not ok, empty when it is

  double per_s() const { return seconds > 0 ? static_cast<double>(received) / seconds : 0; }
  double per_cpu_s() const { return cpu_s > 0 ? static_cast<double>(received) / cpu_s : 0; }
};

double percentile_ms(const std::vector<std::int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  const std::size_t i = std::min(sorted.size() - 1, rank > 0 ? rank - 1 : 0);
  return static_cast<double>(sorted[i]) / 1e6;
}

// -- the payload, exactly as sim.source makes it -----------------------------

/// A Blob of `payload_bytes` filled bytes, laid out as sim.source's replica 0
/// makes it (stream 0, which FlatBuffers leaves out); `stamp_ns` rides in the
/// first 8 bytes of the data. (A non-zero stream makes the table 8 bytes
/// longer, and then the builder outgrows its initial payload + 64 bytes and
/// copies the whole buffer once more.)
swarmflow::PayloadPtr make_blob(std::uint64_t seq, std::int64_t stamp_ns, int payload_bytes) {
  flatbuffers::FlatBufferBuilder fbb(static_cast<std::size_t>(payload_bytes) + 64);
  std::uint8_t* bytes = nullptr;
  auto data = fbb.CreateUninitializedVector(static_cast<std::size_t>(payload_bytes), &bytes);
  if (payload_bytes > 0) std::memset(bytes, static_cast<int>(seq & 0xff), static_cast<std::size_t>(payload_bytes));
  if (payload_bytes >= static_cast<int>(sizeof stamp_ns)) std::memcpy(bytes, &stamp_ns, sizeof stamp_ns);
  fbb.Finish(swarmflow::schema::CreateBlob(fbb, 0, seq, data), swarmflow::schema::BlobIdentifier());
  return swarmflow::Payload::from_builder(fbb);
}

/// The send time make_blob put into `blob`.
std::int64_t stamp_of(const swarmflow::schema::Blob* blob) {
  std::int64_t stamp = 0;
  if (blob->data() != nullptr && blob->data()->size() >= sizeof stamp) {
    std::memcpy(&stamp, blob->data()->data(), sizeof stamp);
  }
  return stamp;
}

/// Milliseconds to make one payload of `bytes` (median of a few): both sides
/// pay it per message, so it bounds what either can reach.
double make_cost_ms(int bytes) {
  std::vector<double> t;
  for (int i = 0; i < 15; ++i) {
    const std::int64_t a = swarmflow::steady_now_ns();
    auto p = make_blob(static_cast<std::uint64_t>(i), a, bytes);
    p.reset();
    t.push_back(static_cast<double>(swarmflow::steady_now_ns() - a) / 1e6);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void free_payload(void*, void* hint) { delete static_cast<swarmflow::PayloadPtr*>(hint); }

// -- where the two sides meet -----------------------------------------------

/// A private directory (ipc sockets, key files) and the keys, for the whole run.
struct Env {
  std::string dir;
  std::string key_path;  ///< swarmflow's key pair, shared by both local tcp units
  // Raw CURVE keys (Z85).
  char server_public[41] = {};
  char server_secret[41] = {};
  char client_public[41] = {};
  char client_secret[41] = {};
  int next_id = 0;

  Env() = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  /// Removes the directory with the sockets and keys, however main returns.
  ~Env() {
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  }

  std::string fresh(const std::string& name) { return name + std::to_string(next_id++); }
};

/// `count` tcp ports on 127.0.0.1 that were free a moment ago.
std::vector<int> free_tcp_ports(int count) {
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      std::perror("free port");
      std::exit(1);
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

// -- raw ZeroMQ PUSH -> PULL ----------------------------------------------------

struct RawCase {
  std::string transport;  ///< inproc, ipc, tcp
  bool curve = false;
  int bytes = 0;
  std::int64_t n = 0;
  double rate_hz = 0;  ///< 0 = saturate
  int hwm = 1000;
  int io_threads = 1;
};

struct ReceiverResult {
  std::int64_t received = 0;
  std::int64_t misordered = 0;
  std::int64_t end_ns = 0;
  std::vector<std::int64_t> latencies_ns;
  std::string problem;
};

void set_int(void* socket, int option, int value) { zmq_setsockopt(socket, option, &value, sizeof value); }

RunResult run_raw(Env& env, const RawCase& c) {
  RunResult r;
  r.ran = true;
  void* ctx = zmq_ctx_new();
  zmq_ctx_set(ctx, ZMQ_IO_THREADS, c.io_threads);
  void* pull = zmq_socket(ctx, ZMQ_PULL);
  void* push = zmq_socket(ctx, ZMQ_PUSH);
  set_int(pull, ZMQ_RCVHWM, c.hwm);
  set_int(push, ZMQ_SNDHWM, c.hwm);
  set_int(pull, ZMQ_RCVTIMEO, 30000);  // a run that loses messages ends, not hangs
  set_int(push, ZMQ_SNDTIMEO, 30000);
  set_int(pull, ZMQ_LINGER, 0);
  set_int(push, ZMQ_LINGER, 0);
  if (c.curve) {
    set_int(pull, ZMQ_CURVE_SERVER, 1);
    zmq_setsockopt(pull, ZMQ_CURVE_SECRETKEY, env.server_secret, 40);
    zmq_setsockopt(push, ZMQ_CURVE_SERVERKEY, env.server_public, 40);
    zmq_setsockopt(push, ZMQ_CURVE_PUBLICKEY, env.client_public, 40);
    zmq_setsockopt(push, ZMQ_CURVE_SECRETKEY, env.client_secret, 40);
  }
  std::string endpoint;
  if (c.transport == "inproc") endpoint = "inproc://" + env.fresh("raw");
  if (c.transport == "ipc") endpoint = "ipc://" + env.dir + "/" + env.fresh("raw");
  if (c.transport == "tcp") endpoint = "tcp://127.0.0.1:*";
  if (zmq_bind(pull, endpoint.c_str()) != 0) {
    r.problem = "cannot bind " + endpoint + ": " + zmq_strerror(zmq_errno());
  } else {
    char bound[256] = {};
    std::size_t bound_len = sizeof bound;
    zmq_getsockopt(pull, ZMQ_LAST_ENDPOINT, bound, &bound_len);
    if (zmq_connect(push, bound) != 0) r.problem = std::string("cannot connect: ") + zmq_strerror(zmq_errno());
  }
  if (!r.problem.empty()) {
    zmq_close(push);
    zmq_close(pull);
    zmq_ctx_term(ctx);
    return r;
  }

  const bool record = c.rate_hz > 0;
  ReceiverResult rr;
  std::thread receiver([&] {
    if (record) rr.latencies_ns.reserve(static_cast<std::size_t>(c.n));
    std::vector<std::uint64_t> aligned;  // for small messages ZeroMQ hands over unaligned
    std::uint64_t next_seq = 0;
    for (std::int64_t i = 0; i < c.n; ++i) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, pull, 0) < 0) {
        rr.problem = std::string("receive: ") + zmq_strerror(zmq_errno());
        zmq_msg_close(&m);
        break;
      }
      const auto* data = static_cast<const std::uint8_t*>(zmq_msg_data(&m));
      const std::size_t size = zmq_msg_size(&m);
      if (reinterpret_cast<std::uintptr_t>(data) % 8 != 0) {
        aligned.resize((size + 7) / 8);
        std::memcpy(aligned.data(), data, size);
        data = reinterpret_cast<const std::uint8_t*>(aligned.data());
      }
      const auto* blob = flatbuffers::GetRoot<swarmflow::schema::Blob>(data);
      if (blob->seq() != next_seq) ++rr.misordered;
      next_seq = blob->seq() + 1;
      const std::int64_t now = swarmflow::steady_now_ns();
      if (record) rr.latencies_ns.push_back(now - stamp_of(blob));
      zmq_msg_close(&m);
      ++rr.received;
      rr.end_ns = now;
    }
  });

  std::string send_problem;
  std::int64_t start_ns = 0;
  std::int64_t max_lag_ns = 0;
  std::thread sender([&] {
    start_ns = swarmflow::steady_now_ns();
    for (std::int64_t i = 0; i < c.n; ++i) {
      if (record) {
        const auto due = start_ns + static_cast<std::int64_t>(static_cast<double>(i) * 1e9 / c.rate_hz);
        std::int64_t now = swarmflow::steady_now_ns();
        if (due > now) {
          std::this_thread::sleep_for(std::chrono::nanoseconds(due - now));
        } else {
          max_lag_ns = std::max(max_lag_ns, now - due);
        }
      }
      auto payload = make_blob(static_cast<std::uint64_t>(i), swarmflow::steady_now_ns(), c.bytes);
      zmq_msg_t m;
      if (c.bytes >= kZeroCopyMinBytes) {
        auto* ref = new swarmflow::PayloadPtr(std::move(payload));
        zmq_msg_init_data(&m, const_cast<std::uint8_t*>((*ref)->data()), (*ref)->size(), free_payload, ref);
      } else {
        zmq_msg_init_size(&m, payload->size());
        std::memcpy(zmq_msg_data(&m), payload->data(), payload->size());
      }
      if (zmq_msg_send(&m, push, 0) < 0) {
        send_problem = std::string("send: ") + zmq_strerror(zmq_errno());
        zmq_msg_close(&m);
        break;
      }
    }
  });
  sender.join();
  receiver.join();
  zmq_close(push);
  zmq_close(pull);
  zmq_ctx_term(ctx);

  r.received = rr.received;
  r.seconds = rr.end_ns > start_ns ? static_cast<double>(rr.end_ns - start_ns) / 1e9 : 0;
  r.sender_lag_ms = static_cast<double>(max_lag_ns) / 1e6;
  r.ok = rr.received == c.n && rr.misordered == 0 && send_problem.empty() && rr.problem.empty();
  if (!r.ok) {
    r.problem = "received " + std::to_string(rr.received) + ", misordered " + std::to_string(rr.misordered) +
                (send_problem.empty() ? "" : ", " + send_problem) + (rr.problem.empty() ? "" : ", " + rr.problem);
  }
  if (record) {
    std::sort(rr.latencies_ns.begin(), rr.latencies_ns.end());
    r.latency = Latency{percentile_ms(rr.latencies_ns, 0.50), percentile_ms(rr.latencies_ns, 0.99),
                        percentile_ms(rr.latencies_ns, 0.999),
                        rr.latencies_ns.empty() ? 0.0 : static_cast<double>(rr.latencies_ns.back()) / 1e6};
  }
  return r;
}

// -- swarmflow: sim.source on u0 -> sim.sink on u1 --------------------------------

struct SwarmflowCase {
  std::string transport;
  int bytes = 0;
  std::int64_t n = 0;
  double rate_hz = 0;
  int capacity = 64;
  /// 0: as the rest of the benchmark; 1: unobserved (no hop figures); 2: observed (hop figures and a Scraper).
  int watch = 0;
};

std::string units_yaml(Env& env, const std::string& transport) {
  if (transport == "inproc") return "units: 2\n";
  std::string u0;
  std::string u1;
  std::string key;
  if (transport == "ipc") {
    u0 = "ipc://" + env.dir + "/" + env.fresh("u0-");
    u1 = "ipc://" + env.dir + "/" + env.fresh("u1-");
  } else {
    const auto ports = free_tcp_ports(2);
    u0 = "tcp://127.0.0.1:" + std::to_string(ports[0]);
    u1 = "tcp://127.0.0.1:" + std::to_string(ports[1]);
    key = ", public_key: \"" + env.key_path + ".pub\"";
  }
  return "units:\n"
         "  - {id: u0, endpoint: \"" + u0 + "\"" + key + "}\n"
         "  - {id: u1, endpoint: \"" + u1 + "\"" + key + "}\n";
}

std::string pipeline_yaml(Env& env, const SwarmflowCase& c) {
  return "pipeline: bench_transport\n" + units_yaml(env, c.transport) +
         "stages:\n"
         "  - id: source\n"
         "    type: sim.source\n"
         "    params: {count: " + std::to_string(c.n) + ", payload_bytes: " + std::to_string(c.bytes) +
         ", rate_hz: " + std::to_string(c.rate_hz) + "}\n"
         "    placement: {units: [u0]}\n"
         "  - id: sink\n"
         "    type: sim.sink\n"
         "    inputs: {in: source/out}\n"
         "    queue: {capacity: " + std::to_string(c.capacity) + ", overflow: block}\n"
         "    placement: {units: [u1]}\n";
}

std::int64_t counter(const swarmflow::StageReport* s, const char* name) {
  if (s == nullptr) return 0;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

RunResult run_swarmflow(const Options& o, Env& env, const SwarmflowCase& c) {
  RunResult r;
  r.ran = true;
  swarmflow::RuntimeOptions ro;
  ro.threads = o.threads;
  ro.tune_allocator = !o.malloc_defaults;
  ro.hop_figures = c.watch != 1;
  if (c.transport == "tcp") ro.secret_key_path = env.key_path;
  swarmflow::Runtime runtime(ro);
  std::vector<swarmflow::Diagnostic> diagnostics;
  swarmflow::Status s =
      runtime.load_string(pipeline_yaml(env, c), env.dir + "/bench_transport.yaml", &diagnostics);
  if (!s.ok()) {
    std::fprintf(stderr, "the bench pipeline does not load:\n%s\n", swarmflow::format_diagnostics(diagnostics).c_str());
    r.problem = "does not load";
    return r;
  }
  {
    const double cpu0 = swarmflow::bench::process_cpu_s();
    std::unique_ptr<swarmflow::bench::Scraper> scraper;
    if (c.watch == 2) scraper = std::make_unique<swarmflow::bench::Scraper>(runtime, std::chrono::milliseconds(o.look_ms));
    s = runtime.run();
    scraper.reset();  // a look under way counts too
    r.cpu_s = swarmflow::bench::process_cpu_s() - cpu0;
  }
  const swarmflow::RunReport report = runtime.report();
  const auto* sink = report.stage("sink");
  std::uint64_t dropped = 0;
  for (const auto& e : report.edges) dropped += e.dropped;
  std::uint64_t crossed = 0;  // envelopes and marks u0 handed to u1's transport
  for (const auto& u : report.units) {
    if (u.id == "u0") crossed = u.sent;
  }
  r.received = counter(sink, "received");
  r.dropped = static_cast<std::int64_t>(dropped);
  // Every envelope arrived once and in order, except those dropped (and
  // counted) at the source, and all of them crossed the transport. The sink
  // counts a drop as lost only when a later envelope shows the gap.
  r.ok = s.ok() && report.ok && r.received + r.dropped == c.n && counter(sink, "lost") <= r.dropped &&
         counter(sink, "reordered") == 0 && counter(sink, "duplicate") == 0 &&
         crossed >= static_cast<std::uint64_t>(r.received);
  if (!r.ok) {
    r.problem = "received " + std::to_string(r.received) + ", lost " + std::to_string(counter(sink, "lost")) +
                ", dropped " + std::to_string(dropped) + ", reordered " + std::to_string(counter(sink, "reordered")) +
                ", crossed units " + std::to_string(crossed) + (s.ok() ? std::string() : ", " + s.message());
  }
  r.seconds = report.duration_s;
  if (sink != nullptr) {
    r.latency = Latency{sink->latency.p50_ms, sink->latency.p99_ms, sink->latency.p999_ms, sink->latency.max_ms};
  }
  return r;
}

// -- one row of the table: a transport and a size ---------------------------

struct Row {
  std::string transport;  ///< inproc, ipc, tcp
  std::string size;       ///< small, frames
  int bytes = 0;
  std::int64_t n = 0;
  std::int64_t latency_n = 0;
  double rate_hz = 0;
  int capacity = 0;
  int raw_hwm = 0;
  int repeat = 1;
  RunResult raw_tp, sf_tp, raw_lat, sf_lat;
  RunResult plain_tp, plain_lat;  ///< tcp only: raw without CURVE, for reference
  std::vector<double> raw_tp_runs, sf_tp_runs, plain_tp_runs;
};

/// The run whose throughput is the median (lower median for even counts).
RunResult median_run(std::vector<RunResult> runs) {
  std::sort(runs.begin(), runs.end(), [](const RunResult& a, const RunResult& b) { return a.per_s() < b.per_s(); });
  return runs[(runs.size() - 1) / 2];
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

std::string size_name(const Row& row) {
  return row.size == "small" ? std::to_string(row.bytes) + " B" : "1080p RGB";
}

std::string command_line(int argc, char** argv) {
  std::string c;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) c += ' ';
    c += argv[i];
  }
  return c;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string json_run(const RunResult& r, std::int64_t n) {
  if (!r.ran) return "null";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"ok\": %s, \"n\": %lld, \"received\": %lld, \"seconds\": %.6f, \"msgs_per_s\": %.1f, "
                "\"p50_ms\": %.6f, \"p99_ms\": %.6f, \"p999_ms\": %.6f, \"max_ms\": %.6f, \"dropped\": %lld, "
                "\"sender_lag_ms\": %.4f}",
                r.ok ? "true" : "false", static_cast<long long>(n), static_cast<long long>(r.received), r.seconds,
                r.per_s(), r.latency.p50, r.latency.p99, r.latency.p999, r.latency.max,
                static_cast<long long>(r.dropped), r.sender_lag_ms);
  return buf;
}

/// "  [what: problem]" for a run that is not ok, else empty.
std::string problem(const char* what, const RunResult& r) {
  return r.ran && !r.ok ? std::string("  [") + what + ": " + r.problem + "]" : std::string();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  const std::string cmd = command_line(argc, argv);
  const bool run_raw_side = selected(o, kSides, "raw");
  const bool run_sf_side = selected(o, kSides, "swarmflow");
  // Before either side runs, so that both run on the same allocator settings.
  const bool heap_kept = !o.malloc_defaults && swarmflow::keep_freed_frames_in_heap();

  Env env;
  char dir_template[] = "/tmp/swarmflow-bench-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  env.dir = dir_template;
  if (selected(o, kTransports, "tcp")) {
    if (zmq_has("curve") == 0) {
      std::fprintf(stderr, "this libzmq has no CURVE; run without tcp (--only inproc,ipc)\n");
      return 1;
    }
    // Not "unit.key": "/tmp/swarmflow-bench-XXXXXX/unit.key.pub" has exactly 40
    // characters, all of them Z85, and would be read as a key, not a path.
    env.key_path = env.dir + "/units.key";
    if (swarmflow::Status s = swarmflow::write_key_pair(env.key_path); !s.ok()) {
      std::fprintf(stderr, "cannot write a key pair: %s\n", s.message().c_str());
      return 1;
    }
    zmq_curve_keypair(env.server_public, env.server_secret);
    zmq_curve_keypair(env.client_public, env.client_secret);
  }

  std::vector<Row> rows;
  for (const auto& t : kTransports) {
    if (!selected(o, kTransports, t)) continue;
    for (const auto& size : kSizes) {
      if (!selected(o, kSizes, size)) continue;
      Row row;
      row.transport = t;
      row.size = size;
      const bool small = size == "small";
      row.bytes = small ? o.small_bytes : o.frame_bytes;
      row.n = small ? o.n : o.frames_n;
      row.latency_n = small ? o.latency_n : o.frames_latency_n;
      row.rate_hz = small ? o.rate_hz : o.frames_rate_hz;
      row.capacity = small ? o.capacity : o.frames_capacity;
      row.raw_hwm = small ? o.raw_hwm : o.frames_capacity;
      row.repeat = small ? o.repeat : o.frames_repeat;
      rows.push_back(row);
    }
  }

  const double small_make_ms = make_cost_ms(o.small_bytes);
  const double frame_make_ms = make_cost_ms(o.frame_bytes);
  std::printf("swarmflow transport benchmark: two units in one process, raw ZeroMQ PUSH/PULL over the same\n"
              "endpoints\n");
  std::printf("  raw ZeroMQ: PUSH in a sender thread -> PULL in a receiver thread, own context, %d I/O thread%s;\n"
              "              >= %d bytes sent zero-copy (zmq_msg_init_data); tcp: CURVE (compared) and plaintext\n",
              o.raw_io_threads, o.raw_io_threads == 1 ? "" : "s", kZeroCopyMinBytes);
  std::printf("  swarmflow:  sim.source on u0 -> sim.sink on u1 via swarmflow::Runtime, overflow block;\n"
              "              CAF worker threads per unit: %s; tcp uses CURVE with one key pair for both units\n",
              o.threads > 0 ? std::to_string(o.threads).c_str() : "runtime default (cores / units)");
  std::printf("  malloc: %s\n",
              heap_kept ? "freed frame-sized blocks kept in the heap, for both sides (keep_freed_frames_in_heap)"
                        : "the C library's settings, for both sides");
  std::printf("  both sides make every message as sim.source does: %.4f ms for %d bytes, %.3f ms for a frame\n",
              small_make_ms, o.small_bytes, frame_make_ms);
  std::printf("  throughput: saturated, median of the runs; latency: paced, one run, made -> received (raw) /\n"
              "  -> end of sink step (swarmflow)\n"
              "  64 B:   throughput N=%lld x %d runs, latency N=%lld at %.0f msg/s; capacity %d, raw HWM %d\n"
              "  frames: throughput N=%lld x %d runs, latency N=%lld at %.0f frames/s; capacity %d = raw HWM\n\n",
              static_cast<long long>(o.n), o.repeat, static_cast<long long>(o.latency_n), o.rate_hz, o.capacity,
              o.raw_hwm, static_cast<long long>(o.frames_n), o.frames_repeat,
              static_cast<long long>(o.frames_latency_n), o.frames_rate_hz, o.frames_capacity);
  std::fflush(stdout);

  bool all_ok = true;
  std::int64_t total_dropped = 0;
  const auto bench_start = std::chrono::steady_clock::now();
  for (auto& row : rows) {
    const bool tcp = row.transport == "tcp";
    RawCase raw{row.transport, tcp, row.bytes, row.n, 0, row.raw_hwm, o.raw_io_threads};
    RawCase plain = raw;
    plain.curve = false;
    const SwarmflowCase sf{row.transport, row.bytes, row.n, 0, row.capacity};
    std::vector<RunResult> raw_runs, sf_runs, plain_runs;
    for (int i = 0; i < row.repeat; ++i) {
      // Alternate the sides, and which goes first, so that a slow moment of
      // the machine hits both.
      if (run_sf_side && i % 2 == 1) sf_runs.push_back(run_swarmflow(o, env, sf));
      if (run_raw_side) raw_runs.push_back(run_raw(env, raw));
      if (run_sf_side && i % 2 == 0) sf_runs.push_back(run_swarmflow(o, env, sf));
      if (run_raw_side && tcp) plain_runs.push_back(run_raw(env, plain));
      std::printf("  %-6s %-9s throughput run %d: raw %.0f msg/s, swarmflow %.0f msg/s%s%s%s\n",
                  row.transport.c_str(), size_name(row).c_str(), i + 1,
                  raw_runs.empty() ? 0.0 : raw_runs.back().per_s(),
                  sf_runs.empty() ? 0.0 : sf_runs.back().per_s(),
                  tcp && !plain_runs.empty()
                      ? (", raw plaintext " + std::to_string(static_cast<long long>(plain_runs.back().per_s())) +
                         " msg/s")
                            .c_str()
                      : "",
                  raw_runs.empty() ? "" : problem("raw", raw_runs.back()).c_str(),
                  sf_runs.empty() ? "" : problem("swarmflow", sf_runs.back()).c_str());
      std::fflush(stdout);
    }
    for (const auto& r : raw_runs) row.raw_tp_runs.push_back(r.per_s());
    for (const auto& r : sf_runs) row.sf_tp_runs.push_back(r.per_s());
    for (const auto& r : plain_runs) row.plain_tp_runs.push_back(r.per_s());
    if (!raw_runs.empty()) row.raw_tp = median_run(raw_runs);
    if (!sf_runs.empty()) row.sf_tp = median_run(sf_runs);
    if (o.observe_cost && run_sf_side) {
      SwarmflowCase off = sf;
      off.watch = 1;
      SwarmflowCase on = sf;
      on.watch = 2;
      std::vector<RunResult> off_runs, on_runs;
      swarmflow::bench::PairedRatios wall_pairs, cpu_pairs;
      for (int i = 0; i < o.observe_pairs; ++i) {
        if (i % 2 == 1) on_runs.push_back(run_swarmflow(o, env, on));
        off_runs.push_back(run_swarmflow(o, env, off));
        if (i % 2 == 0) on_runs.push_back(run_swarmflow(o, env, on));
        const RunResult& x = off_runs.back();
        const RunResult& y = on_runs.back();
        all_ok = all_ok && x.ok && y.ok;
        wall_pairs.add(y.per_s(), x.per_s());
        cpu_pairs.add(y.per_cpu_s(), x.per_cpu_s());
        std::printf("  %-6s %-9s observe-cost pair %d (%s first): unobserved %.0f msg/s, %.0f per CPU s; observed "
                    "%.0f msg/s, %.0f per CPU s%s%s\n",
                    row.transport.c_str(), size_name(row).c_str(), i + 1, i % 2 == 1 ? "observed" : "unobserved",
                    x.per_s(), x.per_cpu_s(), y.per_s(), y.per_cpu_s(), problem("unobserved", x).c_str(),
                    problem("observed", y).c_str());
        std::fflush(stdout);
      }
      const double a = median_run(off_runs).per_s();
      const double b = median_run(on_runs).per_s();
      const auto wall = wall_pairs.summary();
      const auto cpu = cpu_pairs.summary();
      std::printf("  %-6s %-9s what watching costs: unobserved %.0f msg/s, observed %.0f msg/s (medians of the runs)\n"
                  "  %-6s %-9s   observed/unobserved per pair, msg/s: %s\n"
                  "  %-6s %-9s   observed/unobserved per pair, msg per CPU s: %s\n"
                  "  %-6s %-9s   target >= 0.98: %s (median %.3f; its 95%% CI %s 0.98)\n",
                  row.transport.c_str(), size_name(row).c_str(), a, b, row.transport.c_str(), size_name(row).c_str(),
                  swarmflow::bench::PairedRatios::describe(wall).c_str(), row.transport.c_str(),
                  size_name(row).c_str(), swarmflow::bench::PairedRatios::describe(cpu).c_str(),
                  row.transport.c_str(), size_name(row).c_str(), wall.median >= 0.98 ? "met" : "NOT met", wall.median,
                  wall.ci_low >= 0.98 ? "lies above" : (wall.ci_high < 0.98 ? "lies below" : "reaches below"));
      std::fflush(stdout);
    }
    if (!plain_runs.empty()) row.plain_tp = median_run(plain_runs);
    for (const auto* runs : {&raw_runs, &sf_runs, &plain_runs}) {
      for (const auto& r : *runs) all_ok = all_ok && r.ok;
    }

    RawCase raw_paced = raw;
    raw_paced.n = row.latency_n;
    raw_paced.rate_hz = row.rate_hz;
    RawCase plain_paced = raw_paced;
    plain_paced.curve = false;
    SwarmflowCase sf_paced = sf;
    sf_paced.n = row.latency_n;
    sf_paced.rate_hz = row.rate_hz;
    if (run_raw_side) row.raw_lat = run_raw(env, raw_paced);
    if (run_sf_side) row.sf_lat = run_swarmflow(o, env, sf_paced);
    if (run_raw_side && tcp) row.plain_lat = run_raw(env, plain_paced);
    std::printf("  %-6s %-9s latency: p50 raw %.4f ms, swarmflow %.4f ms; raw sender up to %.2f ms behind, "
                "swarmflow dropped %lld at its live source%s%s\n",
                row.transport.c_str(), size_name(row).c_str(), row.raw_lat.latency.p50, row.sf_lat.latency.p50,
                row.raw_lat.sender_lag_ms, static_cast<long long>(row.sf_lat.dropped),
                problem("raw", row.raw_lat).c_str(), problem("swarmflow", row.sf_lat).c_str());
    std::fflush(stdout);
    for (const auto* r : {&row.raw_lat, &row.sf_lat, &row.plain_lat}) {
      if (r->ran) all_ok = all_ok && r->ok;
      total_dropped += r->dropped;
    }
  }
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - bench_start).count();

  std::printf("\n%-22s %40s   %s\n", "", "throughput, msg/s (saturated)", "paced latency, ms: p50 / p99");
  std::printf("%-10s %-11s %12s %12s %8s %8s   %9s %17s %17s %6s\n", "transport", "size", "raw ZeroMQ", "swarmflow",
              "sf/raw", "target", "rate/s", "raw p50 / p99", "swarmflow p50/p99", "drops");
  for (const auto& row : rows) {
    const std::string t = row.transport == "tcp" ? "tcp+CURVE" : row.transport;
    const double rr = ratio(row.sf_tp.per_s(), row.raw_tp.per_s());
    const bool both = row.raw_tp.ran && row.sf_tp.ran;
    char raw_lat[64];
    char sf_lat[64];
    std::snprintf(raw_lat, sizeof raw_lat, "%.3f / %.3f", row.raw_lat.latency.p50, row.raw_lat.latency.p99);
    std::snprintf(sf_lat, sizeof sf_lat, "%.3f / %.3f", row.sf_lat.latency.p50, row.sf_lat.latency.p99);
    std::printf("%-10s %-11s %12.0f %12.0f %8.2f %8s   %9.0f %17s %17s %6lld\n", t.c_str(), size_name(row).c_str(),
                row.raw_tp.per_s(), row.sf_tp.per_s(), rr, both ? (rr >= 0.8 ? "met" : "NOT met") : "-",
                row.rate_hz, raw_lat, sf_lat, static_cast<long long>(row.sf_lat.dropped));
  }
  for (const auto& row : rows) {
    if (row.transport != "tcp" || !row.plain_tp.ran) continue;
    char raw_lat[64];
    std::snprintf(raw_lat, sizeof raw_lat, "%.3f / %.3f", row.plain_lat.latency.p50, row.plain_lat.latency.p99);
    std::printf("%-10s %-11s %12.0f %12s %8s %8s   %9.0f %17s %17s\n", "tcp plain", size_name(row).c_str(),
                row.plain_tp.per_s(), "-", "-", "-", row.rate_hz, raw_lat, "-");
  }
  std::printf("\n  target: swarmflow throughput >= 0.80 x raw ZeroMQ (tcp: raw with CURVE, as swarmflow uses it)\n");
  std::printf("  p99.9 and max are in --json. A paced swarmflow source is live: what finds no credit is dropped\n"
              "  and counted (drops); the raw sender only ever sends late.\n");
  std::printf("  every run delivered every message once and in order, but for counted drops at a live\n"
              "  source (%lld in all runs): %s\n",
              static_cast<long long>(total_dropped), all_ok ? "yes" : "NO");
  std::printf("  took %.1f s\ncommand: %s\n", elapsed_s, cmd.c_str());

  if (!o.json_path.empty()) {
    FILE* f = std::fopen(o.json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", o.json_path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\n  \"benchmark\": \"transport\",\n  \"command\": \"%s\",\n  \"threads_per_unit\": %d,\n"
                 "  \"repeat\": %d,\n  \"frames_repeat\": %d,\n  \"raw_io_threads\": %d,\n  \"heap_kept\": %s,\n"
                 "  \"zero_copy_min_bytes\": %d,\n  \"make_ms\": {\"small\": %.6f, \"frame\": %.6f},\n"
                 "  \"rows\": [\n",
                 json_escape(cmd).c_str(), o.threads, o.repeat, o.frames_repeat, o.raw_io_threads,
                 heap_kept ? "true" : "false", kZeroCopyMinBytes,
                 small_make_ms, frame_make_ms);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& row = rows[i];
      auto list = [](const std::vector<double>& v) {
        std::string s = "[";
        for (std::size_t k = 0; k < v.size(); ++k) s += (k > 0 ? ", " : "") + std::to_string(v[k]);
        return s + "]";
      };
      std::fprintf(f,
                   "    {\"transport\": \"%s\", \"size\": \"%s\", \"bytes\": %d, \"capacity\": %d, \"raw_hwm\": %d,\n"
                   "     \"raw_curve\": %s,\n     \"throughput\": {\"raw\": %s,\n       \"swarmflow\": %s,\n"
                   "       \"raw_plaintext\": %s,\n       \"ratio\": %.4f, \"raw_runs\": %s, \"swarmflow_runs\": %s, "
                   "\"raw_plaintext_runs\": %s},\n"
                   "     \"latency\": {\"rate_hz\": %.1f, \"raw\": %s,\n       \"swarmflow\": %s,\n"
                   "       \"raw_plaintext\": %s}}%s\n",
                   row.transport.c_str(), row.size.c_str(), row.bytes, row.capacity, row.raw_hwm,
                   row.transport == "tcp" ? "true" : "false", json_run(row.raw_tp, row.n).c_str(),
                   json_run(row.sf_tp, row.n).c_str(), json_run(row.plain_tp, row.n).c_str(),
                   ratio(row.sf_tp.per_s(), row.raw_tp.per_s()), list(row.raw_tp_runs).c_str(),
                   list(row.sf_tp_runs).c_str(), list(row.plain_tp_runs).c_str(), row.rate_hz,
                   json_run(row.raw_lat, row.latency_n).c_str(), json_run(row.sf_lat, row.latency_n).c_str(),
                   json_run(row.plain_lat, row.latency_n).c_str(), i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"dropped_in_all_runs\": %lld,\n  \"all_delivered\": %s,\n  \"seconds\": %.1f\n}\n",
                 static_cast<long long>(total_dropped), all_ok ? "true" : "false", elapsed_s);
    std::fclose(f);
    std::printf("results written to %s\n", o.json_path.c_str());
  }
  return all_ok ? 0 : 1;
}
