// Units as separate processes on tcp loopback: the same pipeline split over
// three `swarmflow` processes gives the same sink counts as in one process.
// Units and the coordinator that die (SIGKILL) are noticed by the others.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "support/process.hpp"

namespace {

using swarmflow::testing::free_port;
using swarmflow::testing::slurp;
using swarmflow::testing::spawn_cli;
using swarmflow::testing::TempDir;
using swarmflow::testing::wait_exit;
using swarmflow::testing::wait_exit_within;
using swarmflow::testing::wait_for_content;

std::string tcp(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

/// Writes a key pair NAME.key / NAME.key.pub in `dir` with `swarmflow keygen`.
void keygen(const TempDir& dir, const std::string& name) {
  pid_t p = spawn_cli({"keygen", dir.file(name + ".key")}, dir.file("keygen.out"), dir.file("keygen.err"));
  ASSERT_EQ(wait_exit(p), 0) << slurp(dir.file("keygen.err"));
}

/// A unit list on tcp loopback with CURVE keys u0.key ... in `dir`; the
/// coordinator runs with u0's key.
std::string secured_units(const TempDir& dir, const std::vector<std::string>& ids) {
  std::string out = "coordinator: \"" + tcp(free_port()) + "\"\ncoordinator_key: u0.key.pub\nunits:\n";
  for (const auto& id : ids) {
    keygen(dir, id);
    out += "  - {id: " + id + ", endpoint: \"" + tcp(free_port()) + "\", public_key: " + id + ".key.pub}\n";
  }
  return out;
}
/// The quickstart's shape, with every stage placed so that each hop crosses units.
std::string split_pipeline(const std::string& units_block) {
  return "pipeline: split\nplacement: {policy: static, interval_ms: 20}\n" + units_block +
         "stages:\n"
         "  - {id: source, type: sim.source, params: {count: 4000, streams: 4, payload_bytes: 256},\n"
         "     placement: {units: [u0]}}\n"
         "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: source/out},\n"
         "     params: {service_us: 20}, queue: {capacity: 16}, placement: {units: [u1, u2], spread: true}}\n"
         "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u2]}}\n";
}

void expect_same_sink_counts(const nlohmann::json& r) {
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump(2);
  EXPECT_EQ(r["sinks"]["sink"]["received"], 4000);
  EXPECT_EQ(r["sinks"]["sink"]["lost"], 0);
  EXPECT_EQ(r["sinks"]["sink"]["duplicate"], 0);
  EXPECT_EQ(r["sinks"]["sink"]["reordered"], 0);
  EXPECT_EQ(r["stages"]["work"]["processed"], 4000);
  for (const auto& e : r["edges"]) {
    EXPECT_EQ(e["sent"].get<std::uint64_t>(), e["delivered"].get<std::uint64_t>() + e["dropped"].get<std::uint64_t>())
        << e.dump();
    EXPECT_EQ(e["dropped"], 0);
  }
}

TEST(UnitProcesses, ThreeProcessesOnTcpMatchOneProcess) {
  TempDir dir;
  const std::string file = dir.write("split.yaml", split_pipeline(secured_units(dir, {"u0", "u1", "u2"})));

  // The same file in one process first (all three units here, one key).
  const std::string single_yaml =
      dir.write("single.yaml", split_pipeline("units:\n  - {id: u0}\n  - {id: u1}\n  - {id: u2}\n"));
  const std::string single_report = dir.file("single.json");
  pid_t single =
      spawn_cli({"run", single_yaml, "--quiet", "--report", single_report}, dir.file("s.out"), dir.file("s.err"));
  ASSERT_EQ(wait_exit(single), 0) << slurp(dir.file("s.err"));
  expect_same_sink_counts(nlohmann::json::parse(slurp(single_report)));

  // Then split: the coordinator hosts u0; u1 and u2 are their own processes.
  const std::string report = dir.file("split.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1", "--secret-key", dir.file("u1.key")}, dir.file("u1.out"),
                       dir.file("u1.err"));
  pid_t u2 = spawn_cli({"unit", file, "--id", "u2", "--secret-key", dir.file("u2.key")}, dir.file("u2.out"),
                       dir.file("u2.err"));
  pid_t coordinator = spawn_cli(
      {"run", file, "--quiet", "--units", "u0", "--secret-key", dir.file("u0.key"), "--report", report},
      dir.file("c.out"), dir.file("c.err"));
  const int rc = wait_exit(coordinator);
  EXPECT_EQ(wait_exit(u1), 0) << slurp(dir.file("u1.err"));
  EXPECT_EQ(wait_exit(u2), 0) << slurp(dir.file("u2.err"));
  ASSERT_EQ(rc, 0) << slurp(dir.file("c.err"));
  const auto r = nlohmann::json::parse(slurp(report));
  expect_same_sink_counts(r);
  // Every hop crossed units, so each unit's data plane carried envelopes.
  for (const char* u : {"u0", "u1", "u2"}) {
    EXPECT_EQ(r["units"][u]["rejected"], 0) << u;
  }
  EXPECT_GT(r["units"]["u1"]["received"].get<std::uint64_t>(), 0U);
  EXPECT_GT(r["units"]["u2"]["received"].get<std::uint64_t>(), 0U);
  // Load reports flow on the control plane from the unit processes.
  for (const char* u : {"u1", "u2"}) {
    EXPECT_GT(r["units"][u]["load_reports"].get<std::uint64_t>(), 0U) << u;
    EXPECT_GE(r["units"][u]["utilisation"].get<double>(), 0.0);
    EXPECT_LE(r["units"][u]["utilisation"].get<double>(), 1.0);
  }
}

TEST(UnitProcesses, APayloadTooLargeForTheTransportIsCountedInTheUnitThatDroppedIt) {
  // The source runs in a unit process; its payloads are over the file's
  // max_message_bytes, so that unit drops them (rather than send what the
  // coordinator's unit would refuse), and its count reaches the report.
  TempDir dir;
  const std::string file = dir.write(
      "big.yaml", "pipeline: big\ntransport: {max_message_bytes: 65536}\n" + secured_units(dir, {"u0", "u1"}) +
                      "stages:\n"
                      "  - {id: source, type: sim.source, params: {count: 7, payload_bytes: 65536},\n"
                      "     placement: {units: [u1]}}\n"
                      "  - {id: sink, type: sim.sink, inputs: {in: source/out}, placement: {units: [u0]}}\n");
  const std::string report = dir.file("big.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1", "--secret-key", dir.file("u1.key")}, dir.file("u1.out"),
                       dir.file("u1.err"));
  pid_t coordinator = spawn_cli(
      {"run", file, "--quiet", "--units", "u0", "--secret-key", dir.file("u0.key"), "--report", report},
      dir.file("c.out"), dir.file("c.err"));
  const int rc = wait_exit(coordinator);
  EXPECT_EQ(wait_exit(u1), 0) << slurp(dir.file("u1.err"));
  ASSERT_EQ(rc, 0) << slurp(dir.file("c.err"));
  const auto r = nlohmann::json::parse(slurp(report));
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump(2);
  ASSERT_EQ(r["edges"].size(), 1U);
  const auto& e = r["edges"][0];
  EXPECT_EQ(e["sent"], 7) << e.dump();
  EXPECT_EQ(e["dropped"], 7) << e.dump();
  EXPECT_EQ(e["too_large"], 7) << e.dump();
  EXPECT_EQ(r["sinks"]["sink"]["received"], 0);
  EXPECT_EQ(r["units"]["u0"]["rejected"], 0) << "nothing over the limit was sent";
  EXPECT_NE(slurp(dir.file("u1.err")).find("over transport.max_message_bytes"), std::string::npos)
      << slurp(dir.file("u1.err"));
}

TEST(UnitProcesses, UnitLeavesPromptlyOnSigtermWhenItsPeersAreDead) {
  TempDir dir;
  const std::string file = dir.write(
      "pair.yaml", "pipeline: pair\n" + secured_units(dir, {"u0", "u1"}) +
                       "stages:\n"
                       "  - {id: source, type: sim.source, params: {count: 0, rate_hz: 1000}, placement: {units: [u0]}}\n"
                       "  - {id: sink, type: sim.sink, inputs: {in: source/out}, placement: {units: [u1]}}\n");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1", "--secret-key", dir.file("u1.key")}, dir.file("u1.out"),
                       dir.file("u1.err"));
  pid_t coordinator = spawn_cli({"run", file, "--quiet", "--units", "u0", "--secret-key", dir.file("u0.key")},
                                dir.file("c.out"), dir.file("c.err"));
  // Wait until data flows (the coordinator's progress is quiet; watch the unit join and run).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Kill the coordinator and u0 without warning, then ask u1 to leave.
  kill(coordinator, SIGKILL);
  wait_exit(coordinator);
  kill(u1, SIGTERM);
  // Bounded wait: it must leave by itself (it aims at well under a second;
  // bench/README measures it), not hang on its dead peers.
  EXPECT_EQ(wait_exit_within(u1, std::chrono::seconds(10)), 0) << slurp(dir.file("u1.err"));
}

/// The coordinator and units u0, u1 on ipc sockets in `dir`.
std::string ipc_units(const TempDir& dir) {
  return "coordinator: \"ipc://" + dir.file("coordinator.sock") + "\"\nunits:\n" +
         "  - {id: u0, endpoint: \"ipc://" + dir.file("u0.sock") + "\"}\n" +
         "  - {id: u1, endpoint: \"ipc://" + dir.file("u1.sock") + "\"}\n";
}

/// Many seconds: these waits are bounds for a hang, not expectations.
constexpr std::chrono::seconds kPatience{30};

TEST(UnitProcesses, ASigkilledUnitEndsTheRunWithAnErrorThatNamesIt) {
  // Failover does not exist yet: the coordinator's failure detector declares
  // the killed unit dead and the run ends, with an error and a report,
  // instead of waiting for it forever.
  TempDir dir;
  const std::string seen = dir.file("seen.jsonl");
  const std::string file = dir.write(
      "kill.yaml", "pipeline: kill\n" + ipc_units(dir) +
                       "stages:\n"
                       "  - {id: source, type: sim.source, params: {count: 0, rate_hz: 500}, placement: {units: [u0]}}\n"
                       "  - {id: sink, type: io.jsonl, inputs: {in: source/out}, params: {path: \"" + seen +
                       "\", flush: true},\n     placement: {units: [u1]}}\n");
  const std::string report = dir.file("kill.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1"}, dir.file("u1.out"), dir.file("u1.err"));
  pid_t coordinator =
      spawn_cli({"run", file, "--quiet", "--units", "u0", "--report", report}, dir.file("c.out"), dir.file("c.err"));
  // Mid-run: u1 has written what reached it.
  ASSERT_TRUE(wait_for_content(seen, kPatience)) << slurp(dir.file("c.err")) << slurp(dir.file("u1.err"));
  kill(u1, SIGKILL);
  wait_exit(u1);
  const int rc = wait_exit_within(coordinator, kPatience);
  ASSERT_NE(rc, -1) << "the coordinator did not notice the dead unit: " << slurp(dir.file("c.err"));
  EXPECT_EQ(rc, 1) << slurp(dir.file("c.err"));
  const std::string err = slurp(dir.file("c.err"));
  EXPECT_NE(err.find("unit 'u1' is dead: nothing heard from it for "), std::string::npos) << err;
  const auto r = nlohmann::json::parse(slurp(report));
  EXPECT_FALSE(r["ok"].get<bool>());
  EXPECT_NE(r["error"].get<std::string>().find("unit 'u1' is dead"), std::string::npos) << r["error"];
  EXPECT_GT(r["stages"]["source"]["processed"].get<std::uint64_t>(), 0U);
}

TEST(UnitProcesses, AfterAUnitDiesTheReportStillHasTheFiguresOfTheUnitsAlive) {
  // source on u0 (the coordinator's process) -> work on u1 -> sink on u2. u1
  // is killed mid-run: the run ends with an error, and the report still has
  // what u2's sink received, sent by u2 as it leaves.
  TempDir dir;
  const std::string seen = dir.file("seen.jsonl");
  const std::string file = dir.write(
      "three.yaml", "pipeline: three\n" + ipc_units(dir) + "  - {id: u2, endpoint: \"ipc://" + dir.file("u2.sock") +
                        "\"}\n"
                        "stages:\n"
                        "  - {id: source, type: sim.source, params: {count: 0, rate_hz: 500}, placement: {units: [u0]}}\n"
                        "  - {id: work, type: sim.work, inputs: {in: source/out}, placement: {units: [u1]}}\n"
                        "  - {id: sink, type: io.jsonl, inputs: {in: work/out}, params: {path: \"" + seen +
                        "\", flush: true},\n     placement: {units: [u2]}}\n");
  const std::string report = dir.file("three.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1"}, dir.file("u1.out"), dir.file("u1.err"));
  pid_t u2 = spawn_cli({"unit", file, "--id", "u2"}, dir.file("u2.out"), dir.file("u2.err"));
  pid_t coordinator =
      spawn_cli({"run", file, "--quiet", "--units", "u0", "--report", report}, dir.file("c.out"), dir.file("c.err"));
  ASSERT_TRUE(wait_for_content(seen, kPatience)) << slurp(dir.file("c.err")) << slurp(dir.file("u2.err"));
  kill(u1, SIGKILL);
  wait_exit(u1);
  const int rc = wait_exit_within(coordinator, kPatience);
  ASSERT_NE(rc, -1) << slurp(dir.file("c.err"));
  EXPECT_EQ(rc, 1) << slurp(dir.file("c.err"));
  EXPECT_NE(wait_exit_within(u2, kPatience), -1) << slurp(dir.file("u2.err"));
  const auto r = nlohmann::json::parse(slurp(report));
  EXPECT_FALSE(r["ok"].get<bool>());
  EXPECT_NE(r["error"].get<std::string>().find("unit 'u1' is dead"), std::string::npos) << r["error"];
  // What the sink wrote before the end, it had processed; the report has it.
  std::size_t lines = 0;
  for (char c : slurp(seen)) lines += c == '\n' ? 1 : 0;
  const auto received = r["stages"]["sink"]["processed"].get<std::uint64_t>();
  EXPECT_GT(received, 0U);
  EXPECT_LE(received, lines);
  EXPECT_GE(received + 50, lines) << "the report lost most of what u2's sink received";
}

TEST(UnitProcesses, ASigkilledWorkUnitIsTakenOverAndNothingIsLostOrDuplicated) {
  // source and sinks on u0 (the coordinator's process), a keyed work stage
  // with a replica on each of u1 and u2. u1 is killed mid-stream: its replica
  // is placed on u2, the source replays what u1 had not released, and the
  // sink sees every envelope once, in order per stream.
  TempDir dir;
  const std::string seen = dir.file("seen.jsonl");
  const std::string file = dir.write(
      "failover.yaml", "pipeline: failover\n" + ipc_units(dir) + "  - {id: u2, endpoint: \"ipc://" +
                           dir.file("u2.sock") + "\"}\n"
                           "stages:\n"
                           "  - {id: source, type: sim.source, params: {count: 4000, streams: 8},\n"
                           "     placement: {units: [u0]}}\n"
                           "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: source/out},\n"
                           "     params: {service_us: 500}, placement: {units: [u1, u2], spread: true}}\n"
                           "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u0]}}\n"
                           "  - {id: seen, type: io.jsonl, inputs: {in: work/out}, params: {path: \"" + seen +
                           "\", flush: true},\n     placement: {units: [u0]}}\n");
  const std::string report = dir.file("failover.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1"}, dir.file("u1.out"), dir.file("u1.err"));
  pid_t u2 = spawn_cli({"unit", file, "--id", "u2"}, dir.file("u2.out"), dir.file("u2.err"));
  pid_t coordinator =
      spawn_cli({"run", file, "--quiet", "--units", "u0", "--report", report}, dir.file("c.out"), dir.file("c.err"));
  ASSERT_TRUE(wait_for_content(seen, kPatience)) << slurp(dir.file("c.err")) << slurp(dir.file("u2.err"));
  kill(u1, SIGKILL);
  wait_exit(u1);
  const int rc = wait_exit_within(coordinator, kPatience);
  const std::string err = slurp(dir.file("c.err"));
  ASSERT_NE(rc, -1) << err << slurp(dir.file("u2.err"));
  EXPECT_EQ(rc, 0) << err << slurp(dir.file("u2.err"));
  EXPECT_NE(wait_exit_within(u2, kPatience), -1) << slurp(dir.file("u2.err"));
  EXPECT_NE(err.find("unit 'u1' is dead"), std::string::npos) << err;
  const auto r = nlohmann::json::parse(slurp(report));
  EXPECT_TRUE(r["ok"].get<bool>()) << r["error"];
  ASSERT_EQ(r["failovers"].size(), 1U) << r.dump(2);
  EXPECT_EQ(r["failovers"][0]["unit"], "u1");
  EXPECT_EQ(r["failovers"][0]["moved"][0], "work/0 -> u2") << r["failovers"].dump();
  EXPECT_TRUE(r["failovers"][0]["lost"].empty());
  // The replacement finished a step: the failover has its time to first output.
  EXPECT_TRUE(r["failovers"][0]["first_output_ms"].is_number()) << r["failovers"].dump();
  // What u1 had not released was sent again, and counted for this failover.
  EXPECT_GT(r["failovers"][0]["replayed"].get<std::uint64_t>(), 0U) << r["failovers"].dump();
  EXPECT_FALSE(r["stages"]["work"]["counters"].contains("failover.2.replayed")) << r["stages"]["work"].dump();
  const auto& sink = r["sinks"]["sink"];
  EXPECT_EQ(sink["received"], 4000) << sink.dump();
  EXPECT_EQ(sink["lost"], 0) << sink.dump();
  EXPECT_EQ(sink["duplicate"], 0) << sink.dump();
  EXPECT_EQ(sink["reordered"], 0) << sink.dump();
}

/// Waits until `path` contains `text`; false after `patience`.
bool wait_for_text(const std::string& path, const std::string& text, std::chrono::seconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < deadline) {
    if (slurp(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

/// u0 (the coordinator's process: an endless source that waits for credit,
/// a sink and a jsonl trace) and a keyed work stage with a replica on each of
/// the unit processes u1 and u2, on ipc.
struct KeyedWorkCluster {
  TempDir dir;
  std::string seen = dir.file("seen.jsonl");
  std::string file;
  std::string report = dir.file("report.json");
  std::string clog = dir.file("c.err");
  pid_t u1 = -1;
  pid_t u2 = -1;
  pid_t coordinator = -1;

  KeyedWorkCluster() {
    file = dir.write("cluster.yaml",
                     "pipeline: cluster\n" + ipc_units(dir) + "  - {id: u2, endpoint: \"ipc://" + dir.file("u2.sock") +
                         "\"}\n"
                         "stages:\n"
                         "  - {id: source, type: sim.source, params: {count: 0, streams: 8}, placement: {units: [u0]}}\n"
                         "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: source/out},\n"
                         "     params: {service_us: 200}, placement: {units: [u1, u2], spread: true}}\n"
                         "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u0]}}\n"
                         "  - {id: seen, type: io.jsonl, inputs: {in: work/out}, params: {path: \"" + seen +
                         "\", flush: true},\n     placement: {units: [u0]}}\n");
    u1 = start_unit("u1", "u1");
    u2 = start_unit("u2", "u2");
    coordinator = spawn_cli({"run", file, "--quiet", "--units", "u0", "--report", report}, dir.file("c.out"), clog);
  }

  ~KeyedWorkCluster() {
    // A test that stopped early leaves nothing running.
    for (pid_t p : {u1, u2, coordinator}) {
      if (p > 0) wait_exit_within(p, std::chrono::milliseconds(0));
    }
  }

  /// Starts unit `id` with its output in `name`.out / `name`.err.
  pid_t start_unit(const std::string& id, const std::string& name) {
    return spawn_cli({"unit", file, "--id", id}, dir.file(name + ".out"), dir.file(name + ".err"));
  }

  /// Lets the sink see some more, then stops the source (SIGINT to the
  /// coordinator) and checks the run: exit 0, ok, `failovers` of them, and
  /// every envelope the source sent received once and in order per stream.
  nlohmann::json finish_and_check(std::size_t failovers) {
    const std::size_t before = slurp(seen).size();
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (slurp(seen).size() < before + 2000 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(coordinator, SIGINT);
    const int rc = wait_exit_within(coordinator, kPatience);
    coordinator = -1;
    const std::string err = slurp(clog);
    EXPECT_NE(rc, -1) << err;
    EXPECT_EQ(rc, 0) << err;
    for (pid_t* unit : {&u1, &u2}) {
      if (*unit > 0) {
        EXPECT_NE(wait_exit_within(*unit, kPatience), -1);
      }
      *unit = -1;
    }
    auto r = nlohmann::json::parse(slurp(report), nullptr, false);
    if (!r.is_object()) {
      ADD_FAILURE() << "no report: " << err;
      return r;
    }
    EXPECT_TRUE(r["ok"].get<bool>()) << r["error"];
    EXPECT_EQ(r["failovers"].size(), failovers) << r["failovers"].dump();
    std::uint64_t sent = 0;
    for (const auto& e : r["edges"]) {
      if (e["from"] == "source/out") sent = e["sent"].get<std::uint64_t>();
    }
    const auto& sink = r["sinks"]["sink"];
    EXPECT_GT(sent, 0U);
    EXPECT_EQ(sink["received"].get<std::uint64_t>(), sent) << sink.dump();
    EXPECT_EQ(sink["lost"], 0) << sink.dump();
    EXPECT_EQ(sink["duplicate"], 0) << sink.dump();
    EXPECT_EQ(sink["reordered"], 0) << sink.dump();
    return r;
  }
};

TEST(UnitProcesses, AKilledUnitStartedAgainRejoinsAndTakesWorkAtTheNextFailover) {
  // u1 is killed: both replicas run on u2. u1 is started again and rejoins
  // without replicas. Then u2 is killed: both replicas go to u1.
  KeyedWorkCluster c;
  ASSERT_TRUE(wait_for_content(c.seen, kPatience)) << slurp(c.clog);
  kill(c.u1, SIGKILL);
  wait_exit(c.u1);
  ASSERT_TRUE(wait_for_text(c.clog, "placement epoch 2", kPatience)) << slurp(c.clog);
  c.u1 = c.start_unit("u1", "u1b");
  ASSERT_TRUE(wait_for_text(c.clog, "unit 'u1' runs again", kPatience)) << slurp(c.clog) << slurp(c.dir.file("u1b.err"));
  kill(c.u2, SIGKILL);
  wait_exit(c.u2);
  c.u2 = -1;
  ASSERT_TRUE(wait_for_text(c.clog, "placement epoch 3", kPatience)) << slurp(c.clog);
  const auto r = c.finish_and_check(2);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["failovers"][0]["unit"], "u1");
  EXPECT_EQ(r["failovers"][1]["unit"], "u2");
  for (const auto& m : r["failovers"][1]["moved"]) {
    EXPECT_NE(m.get<std::string>().find("-> u1"), std::string::npos) << r["failovers"].dump();
  }
}

TEST(UnitProcesses, AUnitStoppedWithSigtermHandsItsReplicasOverAndTheRunGoesOn) {
  // u1 gets SIGTERM mid-stream: it asks to leave, the coordinator places
  // its replica on u2 at once (no failure detector involved), the source
  // replays what u1 had not released, and u1 leaves with exit 0. The run
  // goes on to the end with nothing lost or duplicated.
  KeyedWorkCluster c;
  ASSERT_TRUE(wait_for_content(c.seen, kPatience)) << slurp(c.clog);
  kill(c.u1, SIGTERM);
  EXPECT_EQ(wait_exit_within(c.u1, kPatience), 0) << slurp(c.dir.file("u1.err"));
  c.u1 = -1;
  ASSERT_TRUE(wait_for_text(c.clog, "unit 'u1' is leaving", kPatience)) << slurp(c.clog);
  const auto r = c.finish_and_check(1);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["failovers"][0]["cause"], "left") << r["failovers"].dump();
  EXPECT_EQ(r["failovers"][0]["moved"][0], "work/0 -> u2") << r["failovers"].dump();
  EXPECT_EQ(slurp(c.clog).find("is dead"), std::string::npos) << slurp(c.clog);
  EXPECT_NE(slurp(c.dir.file("u1.err")).find("leaving"), std::string::npos) << slurp(c.dir.file("u1.err"));
}

TEST(UnitProcesses, AUnitPausedPastTheDetectorIsFencedWhenItComesBack) {
  // u1 is stopped (SIGSTOP) long enough to be declared dead: its replica
  // runs on u2. Then u1 is continued: what it still sends is refused, it
  // learns it was fenced, stops its replica and rejoins without it. Nothing
  // is processed twice.
  KeyedWorkCluster c;
  ASSERT_TRUE(wait_for_content(c.seen, kPatience)) << slurp(c.clog);
  kill(c.u1, SIGSTOP);
  ASSERT_TRUE(wait_for_text(c.clog, "placement epoch 2", kPatience)) << slurp(c.clog);
  kill(c.u1, SIGCONT);
  ASSERT_TRUE(wait_for_text(c.dir.file("u1.err"), "fenced at placement epoch 2", kPatience))
      << slurp(c.clog) << slurp(c.dir.file("u1.err"));
  ASSERT_TRUE(wait_for_text(c.clog, "unit 'u1' runs again", kPatience)) << slurp(c.clog);
  const auto r = c.finish_and_check(1);
  ASSERT_TRUE(r.is_object());
  std::printf("[   info   ] refused from the fenced unit: %llu\n",
              static_cast<unsigned long long>(r["coordinator"]["stale_refused"].get<std::uint64_t>()));
}

TEST(UnitProcesses, AUnitThatLosesTheCoordinatorCarriesOnWithItsPlacement) {
  // The whole pipeline runs on u1 (for some 1.5 s: the sink takes 1 ms an
  // envelope, and the source waits for its credit, so nothing is dropped);
  // the coordinator (with u0) is killed once data flows. u1 says once that
  // the coordinator is lost, ends its run by itself with nothing lost, and
  // leaves without waiting for a goodbye.
  TempDir dir;
  const std::string seen = dir.file("seen.jsonl");
  const std::string file = dir.write(
      "orphan.yaml", "pipeline: orphan\n" + ipc_units(dir) +
                         "stages:\n"
                         "  - {id: source, type: sim.source, params: {count: 1500}, placement: {units: [u1]}}\n"
                         "  - {id: sink, type: sim.sink, inputs: {in: source/out}, params: {service_us: 1000},\n"
                         "     placement: {units: [u1]}}\n"
                         "  - {id: seen, type: io.jsonl, inputs: {in: source/out}, params: {path: \"" + seen +
                         "\", flush: true},\n     placement: {units: [u1]}}\n");
  const std::string report = dir.file("u1.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1", "--report", report}, dir.file("u1.out"), dir.file("u1.err"));
  pid_t coordinator = spawn_cli({"run", file, "--quiet", "--units", "u0"}, dir.file("c.out"), dir.file("c.err"));
  ASSERT_TRUE(wait_for_content(seen, kPatience)) << slurp(dir.file("c.err")) << slurp(dir.file("u1.err"));
  kill(coordinator, SIGKILL);
  wait_exit(coordinator);
  const int rc = wait_exit_within(u1, kPatience);
  const std::string err = slurp(dir.file("u1.err"));
  ASSERT_EQ(rc, 0) << err;
  const std::string lost = "swarmflow: unit u1: lost the coordinator at ipc://";
  const auto first = err.find(lost);
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find(lost, first + 1), std::string::npos) << "said more than once:\n" << err;
  const auto r = nlohmann::json::parse(slurp(report));
  EXPECT_TRUE(r["ok"].get<bool>()) << r.dump(2);
  EXPECT_EQ(r["sinks"]["sink"]["received"], 1500);
  EXPECT_EQ(r["sinks"]["sink"]["lost"], 0);
}


/// The line of `text` that starts with `first` and the indented lines after it.
std::string block(const std::string& text, const std::string& first) {
  auto at = text.find(first);
  if (at == std::string::npos) return {};
  std::string out;
  do {
    const auto end = text.find('\n', at);
    out += text.substr(at, end == std::string::npos ? std::string::npos : end - at + 1);
    at = end == std::string::npos ? text.size() : end + 1;
  } while (at < text.size() && text.compare(at, 2, "  ") == 0);
  return out;
}

TEST(UnitProcesses, TheInspectionQualitySummaryIsTheSameWhenTheUnitOfBatchQualityIsKilled) {
  // Two stations' cameras on u0, detection and measurement on u2, the
  // stateful batch_quality on u1 (it may run on u1 or u2). u1 is killed once
  // a batch is out: batch_quality starts again on u2 from its latest
  // snapshot, the producers replay what it had not released, and its
  // summary (parts, batches, yield, per-class counts and scores, measurement
  // error) is the one a run without the fault prints.
  TempDir dir;
  const std::string batches = dir.file("batches.jsonl");
  const std::string file = dir.write(
      "inspection.yaml",
      "pipeline: inspection_failover\n" + ipc_units(dir) + "  - {id: u2, endpoint: \"ipc://" + dir.file("u2.sock") +
          "\"}\n"
          "stages:\n"
          "  - {id: cam_a, type: video.source, replicas: 2, placement: {units: [u0]},\n"
          "     params: {uri: \"synthetic://parts?seed=7&camera=0\", width: 1920, height: 1080, count: 40}}\n"
          "  - {id: cam_b, type: video.source, replicas: 2, placement: {units: [u0]},\n"
          "     params: {uri: \"synthetic://parts?seed=7&camera=1\", width: 1920, height: 1080, count: 40}}\n"
          "  - {id: detect_a, type: inspection.defects, key: stream, inputs: {frames: cam_a/frames},\n"
          "     queue: {capacity: 2}, placement: {units: [u2]}}\n"
          "  - {id: detect_b, type: inspection.defects, key: stream, inputs: {frames: cam_b/frames},\n"
          "     queue: {capacity: 2}, placement: {units: [u2]}}\n"
          "  - {id: measure, type: inspection.measure, key: part_id, inputs: {a: cam_a/frames, b: cam_b/frames},\n"
          "     join: {key: part_id, timeout_ms: 20000}, queue: {capacity: 16}, placement: {units: [u2]}}\n"
          "  - {id: quality, type: inspection.batch_quality, placement: {units: [u1, u2]},\n"
          "     inputs: {defects: [detect_a/results, detect_b/results], measurements: measure/results},\n"
          "     params: {batch_parts: 20, report_path: \"" +
          batches + "\"}, queue: {capacity: 64}}\n");
  // Without the fault, in one process.
  pid_t alone = spawn_cli({"run", file, "--quiet"}, dir.file("alone.out"), dir.file("alone.err"));
  ASSERT_EQ(wait_exit_within(alone, kPatience), 0) << slurp(dir.file("alone.err"));
  const std::string want = block(slurp(dir.file("alone.out")), "quality: ");
  ASSERT_NE(want.find("80 parts in 4 batches"), std::string::npos) << want;
  std::remove(batches.c_str());

  const std::string report = dir.file("report.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1"}, dir.file("u1.out"), dir.file("u1.err"));
  pid_t u2 = spawn_cli({"unit", file, "--id", "u2"}, dir.file("u2.out"), dir.file("u2.err"));
  pid_t coordinator =
      spawn_cli({"run", file, "--quiet", "--units", "u0", "--report", report}, dir.file("c.out"), dir.file("c.err"));
  ASSERT_TRUE(wait_for_content(batches, kPatience)) << slurp(dir.file("c.err")) << slurp(dir.file("u1.err"));
  kill(u1, SIGKILL);
  wait_exit(u1);
  const int rc = wait_exit_within(coordinator, kPatience);
  const std::string err = slurp(dir.file("c.err"));
  ASSERT_NE(rc, -1) << err;
  EXPECT_EQ(rc, 0) << err << slurp(dir.file("u2.err"));
  EXPECT_NE(wait_exit_within(u2, kPatience), -1) << slurp(dir.file("u2.err"));
  const auto r = nlohmann::json::parse(slurp(report));
  ASSERT_EQ(r["failovers"].size(), 1U) << r.dump(2);
  EXPECT_EQ(r["failovers"][0]["moved"][0], "quality/0 -> u2") << r["failovers"].dump();
  const auto& counters = r["stages"]["quality"]["counters"];
  EXPECT_EQ(counters["restored"], 1) << counters.dump();
  EXPECT_EQ(counters["parts"], 80) << counters.dump();
  EXPECT_EQ(counters["batches"], 4) << counters.dump();
  EXPECT_EQ(block(slurp(dir.file("u2.out")), "quality: "), want) << slurp(dir.file("u2.err"));
}

/// Runs `stages` (which must feed a jsonl trace `seen` and a sim.sink
/// `sink` of 3000 envelopes) on u0 and the unit processes u1 and u2, SIGKILLs
/// u1 once the trace has seq 100, and checks the run: exit 0, one failover
/// that moved `moved`, and a sink with every envelope once and in order.
/// Returns the report.
nlohmann::json kill_u1_at_seq_100(const TempDir& dir, const std::string& stages, const std::string& moved) {
  const std::string file = dir.write("pipeline.yaml", "pipeline: killed_u1\n" + ipc_units(dir) +
                                                          "  - {id: u2, endpoint: \"ipc://" + dir.file("u2.sock") +
                                                          "\"}\nstages:\n" + stages);
  const std::string report = dir.file("report.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1"}, dir.file("u1.out"), dir.file("u1.err"));
  pid_t u2 = spawn_cli({"unit", file, "--id", "u2"}, dir.file("u2.out"), dir.file("u2.err"));
  pid_t coordinator =
      spawn_cli({"run", file, "--quiet", "--units", "u0", "--report", report}, dir.file("c.out"), dir.file("c.err"));
  EXPECT_TRUE(wait_for_text(dir.file("seen.jsonl"), "\"seq\":100,", kPatience)) << slurp(dir.file("c.err"));
  kill(u1, SIGKILL);
  wait_exit(u1);
  const int rc = wait_exit_within(coordinator, kPatience);
  const std::string err = slurp(dir.file("c.err"));
  EXPECT_NE(rc, -1) << err;
  EXPECT_EQ(rc, 0) << err << slurp(dir.file("u2.err"));
  EXPECT_NE(wait_exit_within(u2, kPatience), -1) << slurp(dir.file("u2.err"));
  auto r = nlohmann::json::parse(slurp(report), nullptr, false);
  if (!r.is_object()) {
    ADD_FAILURE() << "no report: " << err;
    return r;
  }
  EXPECT_EQ(r["failovers"].size(), 1U) << r.dump(2);
  EXPECT_EQ(r["failovers"][0]["moved"][0], moved) << r["failovers"].dump();
  EXPECT_TRUE(r["failovers"][0]["lost"].empty()) << r["failovers"].dump();
  const auto& sink = r["sinks"]["sink"];
  EXPECT_EQ(sink["received"], 3000) << sink.dump();
  EXPECT_EQ(sink["lost"], 0) << sink.dump();
  EXPECT_EQ(sink["duplicate"], 0) << sink.dump();
  EXPECT_EQ(sink["reordered"], 0) << sink.dump();
  return r;
}

TEST(UnitProcesses, AStatefulSinkOnAKilledUnitCarriesOnFromItsSnapshot) {
  // sim.sink keeps each stream's next sequence number and the gaps it saw:
  // moved to u2 from its snapshot, it goes on checking where it was, and its
  // counters go on from theirs. Started empty instead, it would count
  // everything before the kill as lost and report fewer received.
  TempDir dir;
  const auto r = kill_u1_at_seq_100(
      dir,
      "  - {id: source, type: sim.source, params: {count: 3000, streams: 8}, placement: {units: [u0]}}\n"
      "  - {id: sink, type: sim.sink, inputs: {in: source/out}, params: {service_us: 300},\n"
      "     placement: {units: [u1, u2]}}\n"
      "  - {id: seen, type: io.jsonl, inputs: {in: source/out}, params: {path: \"" + dir.file("seen.jsonl") +
          "\", flush: true},\n     placement: {units: [u0]}}\n",
      "sink/0 -> u2");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["stages"]["sink"]["counters"]["restored"], 1) << r["stages"]["sink"].dump();
}

TEST(UnitProcesses, ASourceOnAKilledUnitRestartsElsewhereFromItsPosition) {
  // sim.source on u1 (its placement allows u2 too) feeds the sink on u0. u1
  // is killed mid-stream: the source restarts on u2 from its latest stored
  // snapshot, sends again what came after it, and the sink drops those as
  // duplicates: every envelope arrives once, in order.
  TempDir dir;
  const auto r = kill_u1_at_seq_100(
      dir,
      "  - {id: source, type: sim.source, params: {count: 3000, streams: 8}, placement: {units: [u1, u2]}}\n"
      "  - {id: sink, type: sim.sink, inputs: {in: source/out}, params: {service_us: 300},\n"
      "     placement: {units: [u0]}}\n"
      "  - {id: seen, type: io.jsonl, inputs: {in: source/out}, params: {path: \"" + dir.file("seen.jsonl") +
          "\", flush: true},\n     placement: {units: [u0]}}\n",
      "source/0 -> u2");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["stages"]["source"]["counters"]["restored"], 1) << r["stages"]["source"].dump();
}

TEST(UnitProcesses, ACoordinatorStartedAgainTakesTheRunOverAndFinishesItWithAWholeReport) {
  // Every stage runs on u1 and u2; the coordinator's process (u0) hosts
  // none. The coordinator is SIGKILLed: the units flow on with their
  // placement. A coordinator started again with the same file takes the run
  // over from what the units report, and when it is stopped (SIGINT) the run
  // ends with a report that has both units' figures, nothing lost.
  TempDir dir;
  const std::string seen = dir.file("seen.jsonl");
  const std::string file = dir.write(
      "takeover.yaml", "pipeline: takeover\n" + ipc_units(dir) + "  - {id: u2, endpoint: \"ipc://" +
                           dir.file("u2.sock") + "\"}\n"
                           "stages:\n"
                           "  - {id: source, type: sim.source, params: {count: 0, streams: 8}, placement: {units: [u1]}}\n"
                           "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: source/out},\n"
                           "     params: {service_us: 200}, placement: {units: [u1, u2], spread: true}}\n"
                           "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u2]}}\n"
                           "  - {id: seen, type: io.jsonl, inputs: {in: work/out}, params: {path: \"" + seen +
                           "\", flush: true},\n     placement: {units: [u2]}}\n");
  const std::string report = dir.file("report.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1"}, dir.file("u1.out"), dir.file("u1.err"));
  pid_t u2 = spawn_cli({"unit", file, "--id", "u2"}, dir.file("u2.out"), dir.file("u2.err"));
  pid_t first = spawn_cli({"run", file, "--quiet", "--units", "u0"}, dir.file("c1.out"), dir.file("c1.err"));
  ASSERT_TRUE(wait_for_content(seen, kPatience)) << slurp(dir.file("c1.err")) << slurp(dir.file("u1.err"));
  kill(first, SIGKILL);
  wait_exit(first);
  ASSERT_TRUE(wait_for_text(dir.file("u2.err"), "lost the coordinator", kPatience)) << slurp(dir.file("u2.err"));
  // The units flow on without it.
  const std::size_t before = slurp(seen).size();
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (slurp(seen).size() < before + 2000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(slurp(seen).size(), before + 2000) << "the units stopped when the coordinator died";
  pid_t second =
      spawn_cli({"run", file, "--quiet", "--units", "u0", "--report", report}, dir.file("c2.out"), dir.file("c2.err"));
  ASSERT_TRUE(wait_for_text(dir.file("c2.err"), "takes over the running pipeline", kPatience))
      << slurp(dir.file("c2.err")) << slurp(dir.file("u1.err"));
  kill(second, SIGINT);
  const int rc = wait_exit_within(second, kPatience);
  const std::string err = slurp(dir.file("c2.err"));
  ASSERT_NE(rc, -1) << err;
  EXPECT_EQ(rc, 0) << err << slurp(dir.file("u1.err")) << slurp(dir.file("u2.err"));
  EXPECT_EQ(wait_exit_within(u1, kPatience), 0) << slurp(dir.file("u1.err"));
  EXPECT_EQ(wait_exit_within(u2, kPatience), 0) << slurp(dir.file("u2.err"));
  const auto r = nlohmann::json::parse(slurp(report));
  EXPECT_TRUE(r["ok"].get<bool>()) << r["error"];
  std::uint64_t sent = 0;
  for (const auto& e : r["edges"]) {
    if (e["from"] == "source/out") sent = e["sent"].get<std::uint64_t>();
  }
  const auto& sink = r["sinks"]["sink"];
  EXPECT_GT(sent, 0U);
  EXPECT_EQ(sink["received"].get<std::uint64_t>(), sent) << sink.dump();
  EXPECT_EQ(sink["lost"], 0) << sink.dump();
  EXPECT_EQ(sink["duplicate"], 0) << sink.dump();
  EXPECT_EQ(r["stages"]["work"]["processed"].get<std::uint64_t>(), sent) << r["stages"]["work"].dump();
  // Both units' figures are in it: each processed its share of the work.
  for (const auto& id : {"u1", "u2"}) EXPECT_TRUE(r["units"].contains(id)) << r["units"].dump();
}

TEST(UnitProcesses, AStatefulStageOnAUnitProcessSnapshotsAsOftenAsFailureSnapshotEverySays) {
  // sim.sink on u1 with `failure: {snapshot_every: 1}` snapshots after (about)
  // every envelope: several hundred for 3000 (at most 3 are in flight at
  // once). With the default of 64, only the idle moments snapshot (some 190
  // here), so a file whose setting were ignored would fail this.
  TempDir dir;
  const std::string file = dir.write(
      "snapshots.yaml", "pipeline: snapshots\n" + ipc_units(dir) +
                            "failure: {snapshot_every: 1, snapshot_ms: 600000}\n"
                            "stages:\n"
                            "  - {id: source, type: sim.source, params: {count: 3000, streams: 8}, placement: {units: [u0]}}\n"
                            "  - {id: sink, type: sim.sink, inputs: {in: source/out}, params: {service_us: 300},\n"
                            "     placement: {units: [u1]}}\n");
  const std::string report = dir.file("report.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1"}, dir.file("u1.out"), dir.file("u1.err"));
  pid_t coordinator =
      spawn_cli({"run", file, "--quiet", "--units", "u0", "--report", report}, dir.file("c.out"), dir.file("c.err"));
  ASSERT_EQ(wait_exit_within(coordinator, kPatience), 0) << slurp(dir.file("c.err"));
  EXPECT_NE(wait_exit_within(u1, kPatience), -1) << slurp(dir.file("u1.err"));
  const auto r = nlohmann::json::parse(slurp(report));
  EXPECT_EQ(r["sinks"]["sink"]["received"], 3000) << r["sinks"].dump();
  EXPECT_GE(r["stages"]["sink"]["counters"]["snapshots"].get<std::int64_t>(), 3000 / 8) << r["stages"]["sink"].dump();
}

}  // namespace

TEST(UnitProcesses, VotingGoesOnWhenTheUnitOfAReplicaIsKilled) {
  // Three sim.work replicas (fanout: all), one on each of u1, u2, u3, are
  // voted on by consensus.vote on u0 against a fault-free reference. u1 is
  // killed mid-stream: its replica is placed anew, what it had not released
  // is replayed to it, and every question is decided once, none wrongly,
  // none without quorum.
  TempDir dir;
  const std::string seen = dir.file("seen.jsonl");
  const std::string file = dir.write(
      "vote.yaml", "pipeline: vote\n" + ipc_units(dir) + "  - {id: u2, endpoint: \"ipc://" + dir.file("u2.sock") +
                       "\"}\n  - {id: u3, endpoint: \"ipc://" + dir.file("u3.sock") + "\"}\n"
                       "stages:\n"
                       "  - {id: src, type: sim.source, params: {count: 3000, streams: 4}, placement: {units: [u0]}}\n"
                       "  - {id: work, type: sim.work, replicas: 3, fanout: all, inputs: {in: src/out},\n"
                       "     params: {answer_confidence: 0.9, service_us: 300}, placement: {units: [u1, u2, u3], spread: true}}\n"
                       "  - {id: truth, type: sim.work, inputs: {in: src/out}, params: {answer_confidence: 1.0},\n"
                       "     placement: {units: [u0]}}\n"
                       "  - {id: vote, type: consensus.vote, inputs: {candidates: work/out, reference: truth/out},\n"
                       "     params: {deadline_ms: 2000}, placement: {units: [u0]}}\n"
                       "  - {id: sink, type: sim.sink, inputs: {in: vote/out}, placement: {units: [u0]}}\n"
                       "  - {id: seen, type: io.jsonl, inputs: {in: vote/out}, params: {path: \"" + seen +
                       "\", flush: true}, placement: {units: [u0]}}\n");
  const std::string report = dir.file("vote.json");
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1"}, dir.file("u1.out"), dir.file("u1.err"));
  pid_t u2 = spawn_cli({"unit", file, "--id", "u2"}, dir.file("u2.out"), dir.file("u2.err"));
  pid_t u3 = spawn_cli({"unit", file, "--id", "u3"}, dir.file("u3.out"), dir.file("u3.err"));
  pid_t coordinator =
      spawn_cli({"run", file, "--quiet", "--units", "u0", "--report", report}, dir.file("c.out"), dir.file("c.err"));
  ASSERT_TRUE(wait_for_content(seen, kPatience)) << slurp(dir.file("c.err"));
  kill(u1, SIGKILL);
  wait_exit(u1);
  const int rc = wait_exit_within(coordinator, kPatience);
  const std::string err = slurp(dir.file("c.err"));
  ASSERT_NE(rc, -1) << err;
  EXPECT_EQ(rc, 0) << err;
  EXPECT_NE(wait_exit_within(u2, kPatience), -1);
  EXPECT_NE(wait_exit_within(u3, kPatience), -1);
  const auto r = nlohmann::json::parse(slurp(report));
  EXPECT_TRUE(r["ok"].get<bool>()) << r["error"];
  ASSERT_EQ(r["failovers"].size(), 1U) << r["failovers"].dump();
  EXPECT_EQ(r["failovers"][0]["unit"], "u1");
  const auto& vote = r["consensus"]["vote"];
  EXPECT_EQ(vote["decisions"], 3000) << vote.dump();
  EXPECT_EQ(vote["wrong"], 0) << vote.dump();
  EXPECT_EQ(vote["without_quorum"], 0) << vote.dump();
  EXPECT_EQ(r["sinks"]["sink"]["received"], 3000) << r["sinks"].dump();
  EXPECT_EQ(r["sinks"]["sink"]["duplicate"], 0) << r["sinks"].dump();
}
