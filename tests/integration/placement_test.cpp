// Placement that follows the load, through the `swarmflow` command: a unit
// slowed from outside over HTTP (POST /api/v1/units/<unit>/speed) runs hot,
// the adaptive policy moves its replica to the idle unit, and the run ends
// with nothing lost, duplicated or reordered and the move in its report.
// No timing is asserted: the test waits for the move, then stops the run.

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/http_poll.hpp"
#include "support/process.hpp"

namespace {

using swarmflow::testing::free_port;
using swarmflow::testing::http_get_until;
using swarmflow::testing::slurp;
using swarmflow::testing::spawn_cli;
using swarmflow::testing::TempDir;
using swarmflow::testing::wait_exit_within;

constexpr std::chrono::milliseconds kPatience{60000};

std::string unit_of(const nlohmann::json& state, const std::string& stage) {
  if (!state.contains("replicas")) return {};
  for (const auto& r : state["replicas"]) {
    if (r.value("stage", "") == stage && r.value("replica", -1) == 0) return r.value("unit", "");
  }
  return {};
}

TEST(Placement, AUnitSlowedOverHttpRunsHotAndTheAdaptivePolicyMovesItsReplicaOff) {
  TempDir dir;
  const std::string file = dir.write(
      "adaptive.yaml",
      "pipeline: adaptive\n"
      "placement: {policy: adaptive, interval_ms: 100, sustain_ms: 300, cooldown_ms: 500}\n"
      "units:\n  - {id: io, threads: 2}\n  - {id: w0, threads: 1}\n  - {id: w1, threads: 1}\n"
      "stages:\n"
      "  - {id: src, type: sim.source, params: {count: 0, streams: 4}, placement: {units: [io]}}\n"
      "  - {id: work, type: sim.work, key: stream, inputs: {in: src/out}, params: {service_us: 500},"
      " placement: {units: [w0, w1]}}\n"
      "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}, placement: {units: [io]}}\n");
  const int port = free_port();
  const pid_t run = spawn_cli({"run", file, "--quiet", "--web", "127.0.0.1:" + std::to_string(port), "--report",
                               dir.file("report.json")},
                              dir.file("out"), dir.file("err"));
  const std::string first = http_get_until(port, "/api/v1/state", std::chrono::seconds(30), [](const std::string& b) {
    return !unit_of(nlohmann::json::parse(b, nullptr, false), "work").empty();
  });
  ASSERT_FALSE(first.empty()) << slurp(dir.file("err"));
  const std::string from = unit_of(nlohmann::json::parse(first), "work");
  const std::string to = from == "w0" ? "w1" : "w0";

  httplib::Client client("127.0.0.1", port);
  auto bad = client.Post("/api/v1/units/nope/speed?value=0.5");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("no unit 'nope'"), std::string::npos) << bad->body;
  bad = client.Post(("/api/v1/units/" + from + "/speed?value=fast").c_str());
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  auto slowed = client.Post(("/api/v1/units/" + from + "/speed?value=0.2").c_str());
  ASSERT_TRUE(slowed);
  EXPECT_EQ(slowed->status, 200) << slowed->body;

  const std::string moved = http_get_until(port, "/api/v1/state", std::chrono::seconds(30), [&](const std::string& b) {
    return unit_of(nlohmann::json::parse(b, nullptr, false), "work") == to;
  });
  EXPECT_FALSE(moved.empty()) << "work did not move off " << from;
  ::kill(run, SIGINT);
  ASSERT_EQ(wait_exit_within(run, kPatience), 0) << slurp(dir.file("err"));
  const auto report = nlohmann::json::parse(slurp(dir.file("report.json")), nullptr, false);
  ASSERT_TRUE(report.is_object());
  ASSERT_GE(report["moves"].size(), 1u) << report["moves"];
  const auto& m = report["moves"][0];
  EXPECT_EQ(m["kind"], "move");
  EXPECT_EQ(m["stage"], "work");
  EXPECT_EQ(m["from"], from);
  EXPECT_EQ(m["to"], to);
  EXPECT_NE(m["why"].get<std::string>().find("busy"), std::string::npos) << m;
  const auto& sink = report["stages"]["sink"]["counters"];
  EXPECT_GT(sink["received"].get<std::int64_t>(), 0);
  EXPECT_EQ(sink.value("lost", 0), 0);
  EXPECT_EQ(sink.value("duplicate", 0), 0);
  EXPECT_EQ(sink.value("reordered", 0), 0);
}

/// Frames the detectors inspected, and frames dropped on their way to them.
struct Inspected {
  std::int64_t processed = 0;
  std::int64_t dropped = 0;
};

Inspected inspected(const nlohmann::json& report) {
  Inspected n;
  for (const auto& r : report["replicas"]) {
    if (r.value("stage", "") == "detect") n.processed += r.value("processed", std::int64_t{0});
  }
  for (const auto& e : report["edges"]) {
    if (e.value("to", "") == "detect/frames") n.dropped += e.value("dropped", std::int64_t{0});
  }
  return n;
}

// The inspection stages on a line whose detector unit u1 slows to a twentieth
// of its speed one second in: with static placement its camera's frames pile
// up there and are dropped (fresh video wins); the adaptive policy hands that
// camera to the detector on u2, which has room, and the line keeps up. Both
// runs go side by side; what is compared is what each inspected and dropped.
TEST(Placement, AnInspectionLineWithASlowedUnitKeepsUpWhereStaticPlacementFallsBehind) {
  TempDir dir;
  const auto pipeline = [&](const std::string& policy) {
    return dir.write(
        policy + ".yaml",
        "pipeline: inspection-slowed\n"
        "units:\n  - {id: io, threads: 1}\n  - {id: u1, threads: 1}\n  - {id: u2, threads: 1}\n"
        "placement: {policy: " + policy + ", interval_ms: 100, sustain_ms: 300, cooldown_ms: 500}\n"
        "scenario:\n  - {at_s: 1.0, unit: u1, speed: 0.05}\n"
        "stages:\n"
        "  - {id: cam, type: video.source, replicas: 2, placement: {units: [io]},\n"
        "     params: {uri: \"synthetic://parts?seed=7&camera=0\", width: 1920, height: 1080, fps: 5, count: 40}}\n"
        "  - {id: detect, type: inspection.defects, replicas: 2, key: stream, inputs: {frames: cam/frames},\n"
        "     queue: {capacity: 2, overflow: drop_oldest}, placement: {units: [u1, u2], spread: true}}\n"
        "  - {id: quality, type: inspection.batch_quality, inputs: {defects: [detect/results]},\n"
        "     params: {batch_parts: 10, report_path: \"" + dir.file(policy + ".jsonl") + "\"}, placement: {units: [io]}}\n");
  };
  const pid_t fixed = spawn_cli({"run", pipeline("static"), "--quiet", "--report", dir.file("static.json")},
                                dir.file("static.out"), dir.file("static.err"));
  const pid_t adaptive = spawn_cli({"run", pipeline("adaptive"), "--quiet", "--report", dir.file("adaptive.json")},
                                   dir.file("adaptive.out"), dir.file("adaptive.err"));
  ASSERT_EQ(wait_exit_within(fixed, kPatience), 0) << slurp(dir.file("static.err"));
  ASSERT_EQ(wait_exit_within(adaptive, kPatience), 0) << slurp(dir.file("adaptive.err"));
  const auto before = nlohmann::json::parse(slurp(dir.file("static.json")), nullptr, false);
  const auto after = nlohmann::json::parse(slurp(dir.file("adaptive.json")), nullptr, false);
  ASSERT_TRUE(before.is_object() && after.is_object());

  EXPECT_TRUE(before["moves"].empty()) << before["moves"];
  ASSERT_FALSE(after["moves"].empty()) << slurp(dir.file("adaptive.err"));
  const auto& m = after["moves"][0];
  EXPECT_EQ(m["stage"], "detect");
  EXPECT_EQ(m["from"], "u1") << m;  // off the slowed unit: its replica gave its camera away, or moved

  const Inspected s = inspected(before);
  const Inspected a = inspected(after);
  // Every frame is inspected or dropped, counted; the slowed detector drops
  // under static placement, and far fewer once its camera moved.
  EXPECT_EQ(s.processed + s.dropped, 80) << "static";
  EXPECT_EQ(a.processed + a.dropped, 80) << "adaptive";
  EXPECT_GT(s.dropped, 0);
  EXPECT_LT(a.dropped, s.dropped);
  EXPECT_GT(a.processed, s.processed);
}

/// How many moves of `kind` the state (or report) lists.
int moves_of(const nlohmann::json& state, const std::string& kind) {
  int n = 0;
  if (!state.is_object() || !state.contains("moves")) return 0;
  for (const auto& m : state["moves"]) n += m.value("kind", "") == kind ? 1 : 0;
  return n;
}

/// POSTs `path` once the run has started: the web server answers before it
/// has, and a move asked then is refused as "not started".
httplib::Result post_once_started(httplib::Client& client, const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    auto res = client.Post(path.c_str());
    if (!res || res->body.find("not started") == std::string::npos || std::chrono::steady_clock::now() > deadline) {
      return res;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TEST(Placement, AStageWithAReplicaRangeScalesOutUnderBacklogAndBackInWhenItsUnitsSpeedUp) {
  // work: 1.5 ms an envelope at 1600 envelopes/s needs about 2.4 replicas;
  // it starts with one (min) of three. Its queue backs up, so the policy
  // adds replicas and spreads the streams over them; when its units run 8
  // times faster, its replicas idle and it goes back to one. Nothing is lost
  // or reordered on the way (the live source's drops while the queue backs up
  // are counted, and account for every gap at the sink).
  TempDir dir;
  const std::string file = dir.write(
      "scaling.yaml",
      "pipeline: scaling\n"
      "placement: {policy: adaptive, interval_ms: 100, sustain_ms: 300, cooldown_ms: 400}\n"
      "units:\n  - {id: io, threads: 2}\n  - {id: w0, threads: 1}\n  - {id: w1, threads: 1}\n"
      "  - {id: w2, threads: 1}\n"
      "stages:\n"
      "  - {id: src, type: sim.source, params: {count: 0, streams: 8, rate_hz: 1600}, placement: {units: [io]}}\n"
      "  - {id: work, type: sim.work, replicas: {min: 1, max: 3}, key: stream, inputs: {in: src/out},"
      " params: {service_us: 1500}, placement: {units: [w0, w1, w2]}}\n"
      "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out}, placement: {units: [io]}}\n");
  const int port = free_port();
  const pid_t run = spawn_cli({"run", file, "--quiet", "--web", "127.0.0.1:" + std::to_string(port), "--report",
                               dir.file("report.json")},
                              dir.file("out"), dir.file("err"));
  httplib::Client client("127.0.0.1", port);
  ASSERT_FALSE(http_get_until(port, "/api/v1/state", std::chrono::seconds(30), [](const std::string& b) {
                 return nlohmann::json::parse(b, nullptr, false).is_object();
               }).empty());
  // Asked over HTTP: below min is refused with the reason; a request that
  // says neither add nor remove is malformed.
  auto fewer = post_once_started(client, "/api/v1/stages/work/replicas?remove");
  ASSERT_TRUE(fewer);
  EXPECT_EQ(fewer->status, 400);
  EXPECT_NE(fewer->body.find("fewest replicas"), std::string::npos) << fewer->body;
  auto neither = client.Post("/api/v1/stages/work/replicas");
  ASSERT_TRUE(neither);
  EXPECT_EQ(neither->status, 400);
  const std::string out = http_get_until(port, "/api/v1/state", std::chrono::seconds(60), [](const std::string& b) {
    return moves_of(nlohmann::json::parse(b, nullptr, false), "add") >= 2;
  });
  EXPECT_FALSE(out.empty()) << "work did not scale out to 3: " << slurp(dir.file("err"));
  for (const char* u : {"w0", "w1", "w2"}) {
    auto fast = client.Post((std::string("/api/v1/units/") + u + "/speed?value=8").c_str());
    ASSERT_TRUE(fast);
    EXPECT_EQ(fast->status, 200) << fast->body;
  }
  const std::string in = http_get_until(port, "/api/v1/state", std::chrono::seconds(60), [](const std::string& b) {
    return moves_of(nlohmann::json::parse(b, nullptr, false), "remove") >= 2;
  });
  EXPECT_FALSE(in.empty()) << "work did not scale back in to 1: " << slurp(dir.file("err"));
  ::kill(run, SIGINT);
  ASSERT_EQ(wait_exit_within(run, kPatience), 0) << slurp(dir.file("err"));
  const auto report = nlohmann::json::parse(slurp(dir.file("report.json")), nullptr, false);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(moves_of(report, "add"), 2) << report["moves"];
  EXPECT_EQ(moves_of(report, "remove"), 2) << report["moves"];
  for (const auto& m : report["moves"]) {
    EXPECT_EQ(m["stage"], "work") << m;
    const std::string why = m["why"].get<std::string>();
    if (m["kind"] == "add") {
      EXPECT_NE(why.find("backlog"), std::string::npos) << m;
    } else if (m["kind"] == "remove") {
      EXPECT_NE(why.find("busy"), std::string::npos) << m;
    }
  }
  const auto& sink = report["stages"]["sink"]["counters"];
  const std::int64_t received = sink["received"].get<std::int64_t>();
  EXPECT_GT(received, 0);
  EXPECT_EQ(sink.value("duplicate", 0), 0);
  EXPECT_EQ(sink.value("reordered", 0), 0);
  std::int64_t dropped = 0;
  for (const auto& e : report["edges"]) dropped += e.value("dropped", 0);
  EXPECT_LE(sink.value("lost", 0), dropped);  // a drop after a stream's last envelope leaves no gap
  EXPECT_EQ(report["stages"]["src"]["processed"].get<std::int64_t>(), received + dropped);
}

/// The replica's unit in the state (or report), "" when it is not listed.
std::string unit_of(const nlohmann::json& state, const std::string& stage, int replica) {
  if (!state.is_object() || !state.contains("replicas")) return {};
  for (const auto& r : state["replicas"]) {
    if (r.value("stage", "") == stage && r.value("replica", -1) == replica) return r.value("unit", "");
  }
  return {};
}

// The same moves across processes: u0 (the coordinator's process, with the
// source) and three unit processes u1, u2, u3 on ipc. `work` runs on u1,
// which slows to a fifth a second in: the adaptive policy moves it to
// another process; asked over HTTP, it moves to the third. The stateful sink (sim.sink checks every stream's
// sequence, per stream) has a replica standing by, asked over HTTP to take
// work on the unit where sink/0 is not: it moves there first (a drain with
// nothing to drain), the policy gives it keys from sink/0 with their state
// (the idle replica), and asked to go it hands them back. Nothing is lost,
// duplicated or reordered; without the keys' state the sink would count the
// streams it took over mid-sequence as lost.
TEST(Placement, MovesAcrossThreeUnitProcessesLoseNothingAndKeysKeepTheirOrderAndState) {
  TempDir dir;
  const auto ipc = [&](const std::string& name) { return "\"ipc://" + dir.file(name + ".sock") + "\""; };
  const std::string file = dir.write(
      "remote.yaml",
      "pipeline: remote\n"
      "placement: {policy: adaptive, interval_ms: 100, sustain_ms: 300, cooldown_ms: 500}\n"
      "coordinator: " + ipc("c") + "\n"
      "units:\n  - {id: u0, endpoint: " + ipc("u0") + ", threads: 2}\n"
      "  - {id: u1, endpoint: " + ipc("u1") + ", threads: 1}\n"
      "  - {id: u2, endpoint: " + ipc("u2") + ", threads: 1}\n"
      "  - {id: u3, endpoint: " + ipc("u3") + ", threads: 1}\n"
      "scenario:\n  - {at_s: 1.0, unit: u1, speed: 0.2}\n"
      "stages:\n"
      "  - {id: src, type: sim.source, params: {count: 0, streams: 8}, placement: {units: [u0]}}\n"
      "  - {id: work, type: sim.work, key: stream, inputs: {in: src/out}, params: {service_us: 500},"
      " placement: {units: [u1, u2, u3]}}\n"
      "  - {id: sink, type: sim.sink, key: stream, replicas: {min: 1, max: 2}, inputs: {in: work/out},"
      " params: {service_us: 300}, placement: {units: [u2, u3], spread: true}}\n");
  std::vector<pid_t> units;
  for (const char* u : {"u1", "u2", "u3"}) {
    units.push_back(spawn_cli({"unit", file, "--id", u}, dir.file(std::string(u) + ".out"), dir.file(std::string(u) + ".err")));
  }
  const int port = free_port();
  const pid_t run = spawn_cli({"run", file, "--quiet", "--units", "u0", "--web", "127.0.0.1:" + std::to_string(port),
                               "--report", dir.file("report.json")},
                              dir.file("out"), dir.file("err"));
  const auto logs = [&] {
    return slurp(dir.file("err")) + slurp(dir.file("u1.err")) + slurp(dir.file("u2.err")) + slurp(dir.file("u3.err"));
  };
  // work leaves the slowed u1 for another process.
  const std::string moved = http_get_until(port, "/api/v1/state", std::chrono::seconds(60), [](const std::string& b) {
    const auto state = nlohmann::json::parse(b, nullptr, false);
    const std::string unit = unit_of(state, "work", 0);
    return !unit.empty() && unit != "u1";
  });
  ASSERT_FALSE(moved.empty()) << "work did not move off u1: " << logs();
  const std::string sink0 = unit_of(nlohmann::json::parse(moved), "sink", 0);
  const std::string other = sink0 == "u2" ? "u3" : "u2";
  httplib::Client client("127.0.0.1", port);
  // Asked over HTTP: work/0 to the other unit process (refused with the
  // reason for a unit or a replica the pipeline does not have).
  const std::string work_at = unit_of(nlohmann::json::parse(moved), "work", 0);
  const std::string work_to = work_at == "u2" ? "u3" : "u2";
  auto nowhere = client.Post("/api/v1/stages/work/replicas/0?to=nope");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 400);
  EXPECT_NE(nowhere->body.find("no unit 'nope'"), std::string::npos) << nowhere->body;
  auto no_replica = client.Post(("/api/v1/stages/work/replicas/5?to=" + work_to).c_str());
  ASSERT_TRUE(no_replica);
  EXPECT_EQ(no_replica->status, 400) << no_replica->body;
  auto asked = client.Post(("/api/v1/stages/work/replicas/0?to=" + work_to).c_str());
  ASSERT_TRUE(asked);
  ASSERT_EQ(asked->status, 200) << asked->body;
  EXPECT_FALSE(http_get_until(port, "/api/v1/state", std::chrono::seconds(60), [&](const std::string& b) {
                 return unit_of(nlohmann::json::parse(b, nullptr, false), "work", 0) == work_to;
               }).empty())
      << "work/0 did not move to " << work_to << ": " << logs();
  auto added = client.Post(("/api/v1/stages/sink/replicas?add=" + other).c_str());
  ASSERT_TRUE(added);
  ASSERT_EQ(added->status, 200) << added->body;
  // The policy gives the replica taking work keys (with their state).
  const std::string keyed = http_get_until(port, "/api/v1/state", std::chrono::seconds(60), [](const std::string& b) {
    const auto state = nlohmann::json::parse(b, nullptr, false);
    if (!state.is_object() || !state.contains("moves")) return false;
    for (const auto& m : state["moves"]) {
      if (m.value("kind", "") == "keys" && m.value("stage", "") == "sink") return true;
    }
    return false;
  });
  EXPECT_FALSE(keyed.empty()) << "no keys went to sink/1: " << logs();
  // Asked to go (unless the policy took it out already, which it may: the sink idles).
  auto removed = client.Post("/api/v1/stages/sink/replicas?remove");
  ASSERT_TRUE(removed);
  if (removed->status != 200) {
    EXPECT_NE(removed->body.find("fewest replicas"), std::string::npos) << removed->body;
  }
  EXPECT_FALSE(http_get_until(port, "/api/v1/state", std::chrono::seconds(60), [](const std::string& b) {
                 return moves_of(nlohmann::json::parse(b, nullptr, false), "remove") >= 1;
               }).empty())
      << logs();
  ::kill(run, SIGINT);
  ASSERT_EQ(wait_exit_within(run, kPatience), 0) << logs();
  for (pid_t u : units) EXPECT_NE(wait_exit_within(u, kPatience), -1) << logs();
  const auto report = nlohmann::json::parse(slurp(dir.file("report.json")), nullptr, false);
  ASSERT_TRUE(report.is_object()) << logs();
  EXPECT_TRUE(report["ok"].get<bool>()) << report["error"];
  EXPECT_TRUE(report["failovers"].empty()) << report["failovers"];
  ASSERT_GE(report["moves"].size(), 4u) << report["moves"];
  const auto& first = report["moves"][0];
  EXPECT_EQ(first["kind"], "move") << first;
  EXPECT_EQ(first["stage"], "work") << first;
  EXPECT_EQ(first["from"], "u1") << first;
  // The sinks' p99 around it, measured one interval after it completed.
  ASSERT_TRUE(first["latency_p99_around_ms"].is_number()) << first;
  EXPECT_GT(first["latency_p99_around_ms"].get<double>(), 0) << first;
  bool added_there = false;
  for (const auto& m : report["moves"]) {
    if (m["kind"] == "add") {
      EXPECT_EQ(m["to"], other) << m;
      added_there = true;
    }
  }
  EXPECT_TRUE(added_there) << report["moves"];
  const auto& sink = report["stages"]["sink"]["counters"];
  const std::int64_t received = sink["received"].get<std::int64_t>();
  EXPECT_GT(received, 0);
  EXPECT_EQ(sink.value("lost", 0), 0) << sink;
  EXPECT_EQ(sink.value("duplicate", 0), 0) << sink;
  EXPECT_EQ(sink.value("reordered", 0), 0) << sink;
  EXPECT_EQ(report["stages"]["src"]["processed"].get<std::int64_t>(), received);
  for (const auto& e : report["edges"]) {
    EXPECT_EQ(e["sent"].get<std::uint64_t>(), e["delivered"].get<std::uint64_t>()) << e;
    EXPECT_EQ(e["dropped"], 0) << e;
  }
}

}  // namespace
