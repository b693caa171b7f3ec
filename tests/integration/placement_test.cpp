// Placement that follows the load, through the `swarmflow` command: a unit
// slowed from outside over HTTP (POST /api/v1/units/<unit>/speed) runs hot,
// the adaptive policy moves its replica to the idle unit, and the run ends
// with nothing lost, duplicated or reordered and the move in its report.
// No timing is asserted: the test waits for the move, then stops the run.

#include <gtest/gtest.h>

#include <csignal>
#include <string>

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

TEST(Placement, AdaptivePlacementWithUnitProcessesIsRefusedSayingWhy) {
  TempDir dir;
  const std::string file = dir.write(
      "remote.yaml",
      "pipeline: remote\nplacement: {policy: adaptive}\n"
      "coordinator: ipc://" + dir.file("c.sock") + "\n"
      "units:\n  - {id: u0, endpoint: \"ipc://" + dir.file("u0.sock") + "\"}\n"
      "  - {id: u1, endpoint: \"ipc://" + dir.file("u1.sock") + "\"}\n"
      "stages:\n  - {id: src, type: sim.source, params: {count: 10}}\n"
      "  - {id: sink, type: sim.sink, inputs: {in: src/out}, placement: {units: [u1]}}\n");
  const pid_t run = spawn_cli({"run", file, "--quiet", "--units", "u0"}, dir.file("out"), dir.file("err"));
  EXPECT_NE(wait_exit_within(run, kPatience), 0);
  EXPECT_NE(slurp(dir.file("err")).find("placement.policy adaptive"), std::string::npos) << slurp(dir.file("err"));
}

}  // namespace
