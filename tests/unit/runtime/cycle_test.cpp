// Pipelines with a cycle end: end of stream does not wait on a feedback
// edge, and what still circulates is counted (docs/design.md, "Cycles").

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <swarmflow/runtime.hpp>

namespace swarmflow {
namespace {

std::int64_t counter(const StageReport* s, const std::string& name) {
  if (s == nullptr) return -1;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

void expect_conservation(const RunReport& r) {
  for (const auto& e : r.edges) {
    EXPECT_EQ(e.sent, e.delivered + e.dropped) << e.from << " -> " << e.to;
    EXPECT_EQ(e.waiting, 0U) << e.from << " -> " << e.to;
  }
}

/// src -> a <-> b -> sink: every envelope goes round the cycle for ever.
std::string cycle(const std::string& source_params, int replicas) {
  return "pipeline: cycle\n"
         "stages:\n"
         "  - {id: src, type: sim.source, params: {" + source_params + "}}\n"
         "  - {id: a, type: sim.work, replicas: " + std::to_string(replicas) +
         ", inputs: {in: [src/out, b/out]}, feedback: true}\n"
         "  - {id: b, type: sim.work, replicas: " + std::to_string(replicas) + ", inputs: {in: a/out}}\n"
         "  - {id: sink, type: sim.sink, inputs: {in: b/out}}\n";
}

TEST(Cycle, APipelineWithACycleEndsWhenItsSourceEnds) {
  for (int replicas : {1, 2}) {
    Runtime rt;
    ASSERT_TRUE(rt.load_string(cycle("count: 20", replicas), "cycle.yaml").ok());
    ASSERT_TRUE(rt.run().ok());
    RunReport r = rt.report();
    EXPECT_TRUE(r.finished);
    expect_conservation(r);
    EXPECT_GE(counter(r.stage("sink"), "received"), 20);
    EXPECT_EQ(r.stage("a")->dead_letters, 0U);
    // Every envelope that came back to a was processed or, once the source
    // had ended, counted.
    std::uint64_t back_delivered = 0;
    for (const auto& e : r.edges) {
      if (e.from == "b/out" && e.to == "a/in") {
        back_delivered = e.delivered;
        EXPECT_EQ(e.overflow, "drop_oldest");
      }
    }
    EXPECT_EQ(r.stage("a")->processed + static_cast<std::uint64_t>(counter(r.stage("a"), "feedback_after_end")),
              20U + back_delivered);
  }
}

TEST(Cycle, StopEndsAPipelineWithACycleFedByAnEndlessSource) {
  Runtime rt;
  ASSERT_TRUE(rt.load_string(cycle("count: 0", 1), "cycle.yaml").ok());
  std::atomic<int> seen{0};
  ASSERT_TRUE(rt.subscribe("b/out", [&](const Envelope&) { ++seen; }).ok());
  ASSERT_TRUE(rt.start().ok());
  while (seen.load() < 50) std::this_thread::yield();
  rt.request_stop();
  ASSERT_TRUE(rt.wait().ok());
  RunReport r = rt.report();
  EXPECT_TRUE(r.finished);
  expect_conservation(r);
  EXPECT_GT(r.stage("src")->processed, 0U);
}

}  // namespace
}  // namespace swarmflow
