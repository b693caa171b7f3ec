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
