// What a running two-process pipeline shows at its coordinator: the remote
// unit's live figures in /metrics and /api/v1/state before the run ends,
// `swarmflow top` in a tmux pane (read with capture-pane), and the web view
// (`--web`) in headless Chromium, whose DOM must show the figures move
// between two moments; its screenshot is kept in the build folder. Bounded
// waits, no timing asserted.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/http_poll.hpp"
#include "support/process.hpp"

namespace {

using swarmflow::testing::free_port;
using swarmflow::testing::slurp;
using swarmflow::testing::spawn_cli;
using swarmflow::testing::spawn_program;
using swarmflow::testing::TempDir;
using swarmflow::testing::wait_exit_within;

constexpr std::chrono::seconds kPatience{30};

/// GET http://127.0.0.1:PORT/PATH until it answers 200 and `until` holds; "" after kPatience.
std::string get(int port, const std::string& path, const std::function<bool(const std::string&)>& until = nullptr) {
  return swarmflow::testing::http_get_until(port, path, kPatience, until);
}

/// The `work` replicas' processed count in a /metrics text (they run on u1).
std::uint64_t work_processed(const std::string& metrics) {
  static const std::regex line(R"(swarmflow_replica_processed_total\{stage="work",replica="\d+",unit="u1"\} (\d+))");
  std::uint64_t n = 0;
  for (std::sregex_iterator it(metrics.begin(), metrics.end(), line), end; it != end; ++it) {
    n += std::stoull((*it)[1].str());
  }
  return n;
}

/// A two-process run: source and sink on u0 in the coordinator's process,
/// the work stage on u1, a unit process of its own. Endless until stopped.
class TwoProcesses {
 public:
  explicit TwoProcesses(const std::vector<std::string>& coordinator_flags,
                        const std::vector<std::string>& unit_flags = {}) {
    file_ = dir_.write("obs.yaml",
                       "pipeline: observed\ncoordinator: \"ipc://" + dir_.file("c.sock") + "\"\nunits:\n"
                       "  - {id: u0, endpoint: \"ipc://" + dir_.file("u0.sock") + "\"}\n"
                       "  - {id: u1, endpoint: \"ipc://" + dir_.file("u1.sock") + "\"}\n"
                       "stages:\n"
                       "  - {id: source, type: sim.source, params: {count: 0, rate_hz: 1000, streams: 4},\n"
                       "     placement: {units: [u0]}}\n"
                       "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: source/out},\n"
                       "     params: {service_us: 50}, placement: {units: [u1]}}\n"
                       "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u0]}}\n");
    std::vector<std::string> unit{"unit", file_, "--id", "u1", "--figures-ms", "200"};
    unit.insert(unit.end(), unit_flags.begin(), unit_flags.end());
    unit_ = spawn_cli(unit, dir_.file("u1.out"), dir_.file("u1.err"));
    std::vector<std::string> args{"run", file_, "--quiet", "--units", "u0"};
    args.insert(args.end(), coordinator_flags.begin(), coordinator_flags.end());
    coordinator_ = spawn_cli(args, dir_.file("c.out"), dir_.file("c.err"));
  }
  ~TwoProcesses() {
    if (coordinator_ > 0) stop();
  }
  /// Stops the run; the coordinator's exit code.
  int stop() {
    kill(coordinator_, SIGINT);
    const int rc = wait_exit_within(coordinator_, kPatience);
    coordinator_ = -1;
    wait_exit_within(unit_, kPatience);
    return rc;
  }
  std::string log() const { return slurp(dir_.file("c.err")) + slurp(dir_.file("u1.err")); }
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
  std::string file_;
  pid_t unit_ = -1;
  pid_t coordinator_ = -1;
};

TEST(Observability, TheCoordinatorShowsARemoteReplicasFiguresWhileTheRunLasts) {
  const int port = free_port();
  TwoProcesses run({"--metrics", "127.0.0.1:" + std::to_string(port)});
  std::uint64_t first = 0;
  const std::string a = get(port, "/metrics", [&](const std::string& body) { return (first = work_processed(body)) > 0; });
  ASSERT_FALSE(a.empty()) << "the coordinator never showed the work stage's figures: " << run.log();
  std::uint64_t second = 0;
  const std::string b =
      get(port, "/metrics", [&](const std::string& body) { return (second = work_processed(body)) > first; });
  EXPECT_FALSE(b.empty()) << "work stayed at " << first << ": " << run.log();
  // The same source in the JSON API, and the run is still going.
  const auto state = nlohmann::json::parse(get(port, "/api/v1/state"), nullptr, false);
  ASSERT_TRUE(state.is_object());
  EXPECT_EQ(state["api_version"], 1);
  EXPECT_FALSE(state["finished"].get<bool>());
  EXPECT_GE(state["stages"]["work"]["processed"].get<std::uint64_t>(), second);
  EXPECT_GT(state["units"]["u1"]["received"].get<std::uint64_t>(), 0u) << "u1's transport figures, live";
  // u1's clock, measured on the control plane: both processes read one
  // host's steady clock, so the true offset is 0 and must lie within the
  // estimate's bound.
  const auto clocked = nlohmann::json::parse(get(port, "/api/v1/state", [](const std::string& body) {
                                               const auto j = nlohmann::json::parse(body, nullptr, false);
                                               return j.is_object() && j["units"]["u1"]["clock_offset_ms"].is_number();
                                             }),
                                             nullptr, false);
  ASSERT_TRUE(clocked.is_object()) << "u1's clock offset was never measured";
  EXPECT_LE(std::abs(clocked["units"]["u1"]["clock_offset_ms"].get<double>()),
            clocked["units"]["u1"]["clock_error_ms"].get<double>() + 1e-6);
  EXPECT_EQ(clocked["units"]["u0"]["clock_offset_ms"].get<double>(), 0.0) << "the coordinator's own unit";
  // Server-Sent Events carry the same state.
  httplib::Client client("127.0.0.1", port);
  std::string events;
  client.Get("/api/v1/events", [&](const char* data, std::size_t n) {
    events.append(data, n);
    return events.find("\n\n") == std::string::npos;  // one whole event is enough
  });
  EXPECT_EQ(events.rfind("event: state\ndata: {", 0), 0u) << events.substr(0, 200);
  EXPECT_EQ(run.stop(), 0) << run.log();
}

/// tmux on a server of its own (`-L`), so that the test touches no other.
class Tmux {
 public:
  explicit Tmux(const TempDir& dir) : dir_(dir), socket_("swarmflow-test-" + std::to_string(getpid())) {}
  ~Tmux() { run({"kill-server"}); }
  /// `tmux -L socket ARGS`; its exit code (its output in `out`).
  int run(std::vector<std::string> args, std::string* out = nullptr) const {
    args.insert(args.begin(), {"tmux", "-L", socket_});
    const pid_t pid = spawn_program(args, dir_.file("tmux.out"), dir_.file("tmux.err"));
    if (pid <= 0) return -1;
    const int rc = wait_exit_within(pid, kPatience);
    if (out != nullptr) *out = slurp(dir_.file("tmux.out"));
    return rc;
  }
  std::string pane(const std::string& session) const {
    std::string out;
    run({"capture-pane", "-p", "-t", session}, &out);
    return out;
  }
  /// Captures the pane until `until` holds or the patience runs out; the last capture.
  std::string pane_until(const std::string& session, const std::function<bool(const std::string&)>& until) const {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    std::string text;
    while (std::chrono::steady_clock::now() < deadline) {
      text = pane(session);
      if (until(text)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return text;
  }

 private:
  const TempDir& dir_;
  std::string socket_;
};

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(Observability, TopRedrawsInATmuxPaneCopesWithASmallOneAndExitsCleanly) {
  const int port = free_port();
  TwoProcesses run({"--metrics", "127.0.0.1:" + std::to_string(port)});
  ASSERT_FALSE(get(port, "/metrics", [](const std::string& body) { return work_processed(body) > 0; }).empty())
      << run.log();
  Tmux tmux(run.dir());
  const std::string top = std::string(SWARMFLOW_CLI) + " top 127.0.0.1:" + std::to_string(port) + " --interval 0.2";
  ASSERT_EQ(tmux.run({"new-session", "-d", "-s", "big", "-x", "110", "-y", "30", top + "; echo top-exit=$?; sleep 60"}), 0)
      << "tmux cannot start (scripts/bootstrap.sh installs it)";
  // A work row with a rate: two looks of the remote stage's live figures.
  const std::string big = tmux.pane_until("big", [](const std::string& text) {
    return std::regex_search(text, std::regex(R"(\nwork +2 +[0-9.]+k? )")) && !std::regex_search(text, std::regex(R"(\nwork +2 +0 )"));
  });
  EXPECT_TRUE(has(big, "UNIT") && has(big, "STAGE") && has(big, "EDGE") && has(big, "FAILOVERS")) << big;
  EXPECT_TRUE(std::regex_search(big, std::regex(R"(\nwork +2 +[0-9.]+k? )"))) << big;
  EXPECT_TRUE(has(big, "source/out -> work/in")) << big;
  // q quits and leaves the terminal as it was.
  tmux.run({"send-keys", "-t", "big", "q"});
  const std::string after = tmux.pane_until("big", [](const std::string& text) { return has(text, "top-exit="); });
  EXPECT_TRUE(has(after, "top-exit=0")) << after;
  EXPECT_FALSE(has(after, "STAGE")) << "the alternate screen is gone: " << after;

  // A small terminal: every line fits, and what does not is counted.
  ASSERT_EQ(tmux.run({"new-session", "-d", "-s", "small", "-x", "36", "-y", "7", top + "; echo top-exit=$?; sleep 60"}), 0);
  const std::string small = tmux.pane_until("small", [](const std::string& text) { return has(text, "more"); });
  EXPECT_TRUE(has(small, "more")) << small;
  std::size_t lines = 0;
  for (std::size_t at = 0; at < small.size();) {
    const std::size_t end = std::min(small.find('\n', at), small.size());
    EXPECT_LE(end - at, 36u) << small;
    if (end > at) ++lines;
    at = end + 1;
  }
  EXPECT_LE(lines, 7u) << small;
  // The coordinator goes: top says so and ends with 0.
  EXPECT_EQ(run.stop(), 0) << run.log();
  const std::string gone = tmux.pane_until("small", [](const std::string& text) { return has(text, "top-exit="); });
  EXPECT_TRUE(has(gone, "top-exit=0")) << gone;
  EXPECT_TRUE(has(gone, "is gone")) << gone;
}

/// The processed count of stage `id` in the web view's stage table, or -1.
long long dom_processed(const std::string& dom, const std::string& id) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex("<tr id=\"row-" + id + "\"><td>" + id + R"(</td><td>\d+</td><td class="processed">(\d+)<)"))) {
    return -1;
  }
  return std::stoll(m[1].str());
}

/// Headless Chromium on `url` with `what` (--dump-dom, --screenshot=...),
/// its output and errors in `dir`'s NAME.out and NAME.err; its exit code
/// (-2: not started, -1: still running after a minute and killed).
int chromium(const TempDir& dir, const std::string& url, const std::vector<std::string>& what,
             const std::string& name) {
  std::vector<std::string> args{"chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                "--user-data-dir=" + dir.file("chromium-" + name),
                                "--virtual-time-budget=2500", "--window-size=1000,1000"};
  args.insert(args.end(), what.begin(), what.end());
  args.push_back(url);
  const pid_t pid = spawn_program(args, dir.file(name + ".out"), dir.file(name + ".err"));
  if (pid <= 0) return -2;
  return wait_exit_within(pid, std::chrono::seconds(60));
}

TEST(Observability, TheWebViewInChromiumShowsFiguresThatMove) {
  const int port = free_port();
  TwoProcesses run({"--web", "127.0.0.1:" + std::to_string(port)});
  ASSERT_FALSE(get(port, "/api/v1/state", [](const std::string& body) {
                 const auto j = nlohmann::json::parse(body, nullptr, false);
                 return j.is_object() && j["stages"]["work"]["processed"].get<std::uint64_t>() > 0;
               }).empty())
      << run.log();
  const std::string page = get(port, "/");
  EXPECT_TRUE(has(page, "<svg id=\"graph\"")) << page.substr(0, 300);
  EXPECT_FALSE(has(page, "http://") || has(page, "https://")) << "the page fetches nothing from elsewhere";
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/?poll";
  const auto chromium = [&](const std::vector<std::string>& what, const std::string& name) {
    return ::chromium(run.dir(), url, what, name);
  };
  ASSERT_EQ(chromium({"--dump-dom"}, "first"), 0)
      << "headless chromium did not run (scripts/bootstrap.sh installs it): " << slurp(run.dir().file("first.err"));
  ASSERT_EQ(chromium({"--dump-dom"}, "second"), 0) << slurp(run.dir().file("second.err"));
  const std::string first = slurp(run.dir().file("first.out"));
  const std::string second = slurp(run.dir().file("second.out"));
  const long long a = dom_processed(first, "work");
  const long long b = dom_processed(second, "work");
  EXPECT_GT(a, 0) << first;
  EXPECT_GT(b, a) << "the remote work stage's figures did not move between two loads";
  EXPECT_TRUE(has(second, "on u1")) << "each replica on its unit";
  EXPECT_TRUE(has(second, "source/out → work/in")) << second.substr(0, 2000);
  const std::string shot = std::string(SWARMFLOW_BINARY_DIR) + "/web_view.png";
  std::filesystem::remove(shot);
  EXPECT_EQ(chromium({"--screenshot=" + shot}, "shot"), 0) << slurp(run.dir().file("shot.err"));
  EXPECT_TRUE(std::filesystem::exists(shot) && std::filesystem::file_size(shot) > 1000) << shot;
  EXPECT_EQ(run.stop(), 0) << run.log();
}

// A move in the web view: an in-process run under the adaptive policy
// whose `scenario:` slows the unit the work stage starts on (w0: the
// first of its units, as static placement goes) to a fifth of its speed;
// the policy moves the replica to the idle unit. Once the JSON API shows
// the move, the page loaded in headless Chromium lists it.
TEST(Observability, TheWebViewInChromiumShowsAMoveAsItHappens) {
  TempDir dir;
  const std::string file = dir.write(
      "moving.yaml",
      "pipeline: moving\n"
      "placement: {policy: adaptive, interval_ms: 100, sustain_ms: 300, cooldown_ms: 500}\n"
      "units:\n  - {id: io, threads: 2}\n  - {id: w0, threads: 1}\n  - {id: w1, threads: 1}\n"
      "stages:\n"
      "  - {id: src, type: sim.source, params: {count: 0, streams: 4}, placement: {units: [io]}}\n"
      "  - {id: work, type: sim.work, key: stream, inputs: {in: src/out}, params: {service_us: 500},"
      " placement: {units: [w0, w1]}}\n"
      "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}, placement: {units: [io]}}\n"
      "scenario:\n  - {at_s: 0.5, unit: w0, speed: 0.2}\n");
  const int port = free_port();
  const pid_t run = spawn_cli({"run", file, "--quiet", "--web", "127.0.0.1:" + std::to_string(port)},
                              dir.file("out"), dir.file("err"));
  nlohmann::json move;
  const std::string moved = swarmflow::testing::http_get_until(
      port, "/api/v1/state", std::chrono::seconds(60), [&](const std::string& body) {
        const auto j = nlohmann::json::parse(body, nullptr, false);
        if (!j.is_object() || !j.contains("moves") || j["moves"].empty()) return false;
        move = j["moves"][0];
        return true;
      });
  if (moved.empty()) {
    ::kill(run, SIGINT);
    wait_exit_within(run, kPatience);
    FAIL() << "no move in 60 s: " << slurp(dir.file("err"));
  }
  EXPECT_EQ(move["kind"], "move") << move;
  EXPECT_EQ(move["stage"], "work") << move;
  EXPECT_EQ(move["from"], "w0") << move;
  EXPECT_EQ(move["to"], "w1") << move;

  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/?poll";
  const int rc = chromium(dir, url, {"--dump-dom"}, "moved");
  ::kill(run, SIGINT);
  EXPECT_EQ(wait_exit_within(run, kPatience), 0) << slurp(dir.file("err"));
  ASSERT_EQ(rc, 0) << "headless chromium did not run (scripts/bootstrap.sh installs it): "
                   << slurp(dir.file("moved.err"));
  const std::string dom = slurp(dir.file("moved.out"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom, m, std::regex(R"(<ul id="moves">(.*?)</ul>)"))) << dom.substr(0, 3000);
  const std::string listed = m[1].str();
  EXPECT_FALSE(has(listed, "<li>none</li>")) << listed;
  EXPECT_TRUE(std::regex_search(listed, std::regex(R"(<li class="move">[0-9.]+ s: move work/0 w0 -(&gt;|>) w1, )")))
      << "the move, with its stage, replica and units, in the page: " << listed;
}

TEST(Observability, TraceIsChromeTraceEventJsonWithEveryStageAndTheReportHasLatencyPerHop) {
  TempDir dir;
  const std::string file = dir.write("trace.yaml",
                                     "pipeline: traced\nstages:\n"
                                     "  - {id: source, type: sim.source, params: {count: 2000, streams: 2}}\n"
                                     "  - {id: work, type: sim.work, inputs: {in: source/out}, params: {service_us: 20}}\n"
                                     "  - {id: sink, type: sim.sink, inputs: {in: work/out}}\n");
  const pid_t run = spawn_cli({"run", file, "--quiet", "--trace", dir.file("trace.json"), "--trace-every", "50",
                               "--report", dir.file("report.json")},
                              dir.file("out"), dir.file("err"));
  ASSERT_EQ(wait_exit_within(run, kPatience), 0) << slurp(dir.file("err"));
  const auto trace = nlohmann::json::parse(slurp(dir.file("trace.json")), nullptr, false);
  ASSERT_TRUE(trace.is_object() && trace["traceEvents"].is_array()) << slurp(dir.file("trace.json")).substr(0, 300);
  std::map<std::string, int> steps;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e["ph"].is_string() && e["pid"].is_number_integer() && e["tid"].is_number_integer()) << e;
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e["name"].is_string() && e["ts"].is_number() && e["dur"].is_number()) << e;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_EQ(e["args"]["seq"].get<std::uint64_t>() % 50, 0u) << "only the sample";
    ++steps[e["name"].get<std::string>()];
  }
  // 2000 envelopes in 2 streams: seq 0..999 each, 20 sampled a stream, at work and at sink.
  EXPECT_EQ(steps["work"], 40);
  EXPECT_EQ(steps["sink"], 40);
  const auto report = nlohmann::json::parse(slurp(dir.file("report.json")), nullptr, false);
  ASSERT_TRUE(report.is_object());
  // One step in 16 is measured: 2000 / 16, but for the last few not handed over.
  EXPECT_GT(report["stages"]["work"]["residence_ms"]["count"].get<std::uint64_t>(), 90u);
  EXPECT_GT(report["stages"]["work"]["residence_ms"]["p99"].get<double>(), 0.0);
  EXPECT_GT(report["edges"][1]["latency_ms"]["p50"].get<double>(), 0.0);
  // work/out -> sink/in: one envelope in 16 that work sends carries its send
  // time; its hold on them (arrival at work -> sent) holds its 20 us step.
  const auto& way = report["edges"][1]["latency_ms"];
  const auto& held = report["edges"][1]["held_ms"];
  EXPECT_GT(way["count"].get<std::uint64_t>(), 90u);
  EXPECT_EQ(held["count"], way["count"]) << "the same envelopes";
  EXPECT_GE(held["p50"].get<double>(), 0.019) << "the producer's step is in its hold, not in the edge";
}

TEST(Observability, TracesOfTwoProcessesLineUpOnTheCoordinatorsClock) {
  const int port = free_port();
  TempDir traces;
  TwoProcesses run({"--metrics", "127.0.0.1:" + std::to_string(port), "--trace", traces.file("c.json")},
                   {"--trace", traces.file("u1.json"), "--trace-every", "100"});
  ASSERT_FALSE(get(port, "/metrics", [](const std::string& body) { return work_processed(body) > 500; }).empty())
      << run.log();
  EXPECT_EQ(run.stop(), 0) << run.log();
  const auto c = nlohmann::json::parse(slurp(traces.file("c.json")), nullptr, false);
  const auto u = nlohmann::json::parse(slurp(traces.file("u1.json")), nullptr, false);
  ASSERT_TRUE(c.is_object() && u.is_object()) << run.log();
  // Where each sampled envelope was at work (u1's file) and at the sink (the coordinator's).
  std::map<std::pair<std::uint64_t, std::uint64_t>, double> work_end, sink_start;
  for (const auto& e : u["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "work") {
      work_end[{e["args"]["stream"], e["args"]["seq"]}] = e["ts"].get<double>() + e["dur"].get<double>();
    }
  }
  for (const auto& e : c["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "sink") sink_start[{e["args"]["stream"], e["args"]["seq"]}] = e["ts"];
  }
  ASSERT_FALSE(work_end.empty()) << "u1 traced no work step";
  int matched = 0;
  for (const auto& [key, end] : work_end) {
    auto it = sink_start.find(key);
    if (it == sink_start.end()) continue;
    ++matched;
    // After work ended, the sink got it: later, and soon, on one timeline
    // (allowing the offset's error bound, well under a millisecond here).
    EXPECT_GT(it->second, end - 1000.0) << "stream " << key.first << " seq " << key.second;
    EXPECT_LT(it->second, end + 1'000'000.0) << "stream " << key.first << " seq " << key.second;
  }
  EXPECT_GT(matched, 0) << "no envelope traced in both processes";
}

/// The first ```yaml block after `heading` in `text`, or "".
std::string yaml_after(const std::string& text, const std::string& heading) {
  const auto at = text.find(heading);
  if (at == std::string::npos) return "";
  const auto open = text.find("```yaml\n", at);
  if (open == std::string::npos) return "";
  const auto close = text.find("```", open + 8);
  return close == std::string::npos ? "" : text.substr(open + 8, close - open - 8);
}

TEST(Observability, TheScrapeConfigAndAlertRulesHerePassPromtool) {
  TempDir dir;
  const std::string doc = slurp(std::string(SWARMFLOW_SOURCE_DIR) + "/docs/observability.md");
  const std::string config = yaml_after(doc, "### A scrape config");
  const std::string rules = yaml_after(doc, "### Alert rules");
  ASSERT_FALSE(config.empty() || rules.empty()) << "docs/observability.md lost its scrape config or alert rules";
  EXPECT_TRUE(has(config, "swarmflow-alerts.yml"));
  for (const char* alert : {"SwarmflowUnitDead", "SwarmflowDropsRising", "SwarmflowStageP99OverBudget"}) {
    EXPECT_TRUE(has(rules, alert)) << alert;
  }
  dir.write("swarmflow-alerts.yml", rules);
  const std::string file = dir.write("prometheus.yml", config);
  // check config also checks the rule files it names.
  const pid_t check = spawn_program({"promtool", "check", "config", file}, dir.file("out"), dir.file("err"));
  ASSERT_GT(check, 0) << "promtool is not installed (scripts/bootstrap.sh installs prometheus)";
  EXPECT_EQ(wait_exit_within(check, kPatience), 0) << slurp(dir.file("out")) << slurp(dir.file("err"));
  EXPECT_TRUE(has(slurp(dir.file("out")), "7 rules found")) << slurp(dir.file("out"));
}

}  // namespace
