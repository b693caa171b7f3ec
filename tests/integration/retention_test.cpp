// Memory under overload: a run's peak resident memory depends on capacities
// and payload sizes, not on how long it runs. Measured on the `swarmflow`
// process itself (its maximum resident set from wait4), not timed.

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>

#include <string>

#include <nlohmann/json.hpp>

#include "support/process.hpp"

namespace {

using swarmflow::testing::slurp;
using swarmflow::testing::spawn_cli;
using swarmflow::testing::TempDir;

struct Measured {
  int exit_code = -1;
  long max_rss_kib = 0;
  nlohmann::json report;
};

/// Runs src -> work -> sink with 64 KiB payloads into a slow sink behind
/// `overflow`, `count` envelopes, and measures the process.
Measured run_overloaded(const TempDir& dir, int count, const std::string& overflow, int service_us) {
  const std::string name = "p" + std::to_string(count) + overflow;
  const std::string yaml = dir.write(
      name + ".yaml",
      "pipeline: overload\n"
      "stages:\n"
      "  - {id: src, type: sim.source, params: {count: " + std::to_string(count) + ", payload_bytes: 65536}}\n"
      "  - {id: work, type: sim.work, inputs: {in: src/out}}\n"
      "  - {id: sink, type: sim.sink, inputs: {in: work/out}, params: {service_us: " + std::to_string(service_us) + "},\n"
      "     queue: {capacity: 4, overflow: " + overflow + "}}\n");
  const std::string report = dir.file(name + ".json");
  const pid_t pid = spawn_cli({"run", yaml, "--quiet", "--report", report}, dir.file(name + ".out"),
                              dir.file(name + ".err"));
  Measured m;
  int status = 0;
  rusage usage{};
  if (pid < 0 || wait4(pid, &status, 0, &usage) != pid) return m;
  m.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.max_rss_kib = usage.ru_maxrss;
  m.report = nlohmann::json::parse(slurp(report), nullptr, false);
  return m;
}

class OverloadMemory : public ::testing::TestWithParam<const char*> {};

TEST_P(OverloadMemory, SixTimesTheEnvelopesNeedNoMoreMemory) {
  TempDir dir;
  // The sink is slow: 2 ms an envelope where it drops, 0.3 ms where it blocks
  // (every envelope reaches it there).
  const int service_us = std::string(GetParam()) == "block" ? 300 : 2000;
  const Measured small = run_overloaded(dir, 1000, GetParam(), service_us);
  const Measured large = run_overloaded(dir, 6000, GetParam(), service_us);
  ASSERT_EQ(small.exit_code, 0) << slurp(dir.file(std::string("p1000") + GetParam() + ".err"));
  ASSERT_EQ(large.exit_code, 0) << slurp(dir.file(std::string("p6000") + GetParam() + ".err"));
  ASSERT_TRUE(large.report.is_object());
  for (const auto& e : large.report["edges"]) {
    EXPECT_EQ(e["sent"].get<std::uint64_t>(), e["delivered"].get<std::uint64_t>() + e["dropped"].get<std::uint64_t>())
        << e.dump();
    // 2 x work's capacity 8, plus the sink's 4 credits and 4 waiting that work may hold
    EXPECT_LE(e["peak_retained"].get<std::uint64_t>(), 24U) << e.dump();
  }
  EXPECT_EQ(large.report["stages"]["work"]["processed"], 6000);
  // 6000 retained 64 KiB payloads alone would be 384 MiB.
  EXPECT_LT(static_cast<double>(large.max_rss_kib), 1.25 * static_cast<double>(small.max_rss_kib))
      << "max RSS " << small.max_rss_kib << " KiB for 1000 envelopes, " << large.max_rss_kib << " KiB for 6000";
}

INSTANTIATE_TEST_SUITE_P(Policies, OverloadMemory, ::testing::Values("drop_oldest", "drop_newest", "block"));

}  // namespace
