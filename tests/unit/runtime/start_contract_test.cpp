// The start contract: a stage whose start() fails is never called again, not
// even stop(), and the run fails with the stage's reason.

#include <gtest/gtest.h>

#include <atomic>

#include <swarmflow/runtime.hpp>
#include <swarmflow/schema/blob_generated.h>

namespace swarmflow {
namespace {

std::atomic<int> g_starts{0};
std::atomic<int> g_processes{0};
std::atomic<int> g_stops{0};

class FailsToStart final : public Stage {
 public:
  void setup(StageSpec& s) override { in_ = s.input<schema::Blob>("in"); }
  Status start(StageContext&) override {
    ++g_starts;
    return Status::error("no camera here");
  }
  Status process(Inputs&, Outputs&, StageContext&) override {
    ++g_processes;
    return {};
  }
  void stop(StageContext&) override { ++g_stops; }

 private:
  InputPort<schema::Blob> in_;
};

TEST(StartContract, AfterAFailedStartNothingElseOfTheStageIsCalled) {
  Runtime rt;
  ASSERT_TRUE(rt.registry().add<FailsToStart>("test.fails_to_start", "start() fails").ok());
  std::vector<Diagnostic> diags;
  ASSERT_TRUE(rt.load_string("pipeline: contract\nstages:\n"
                             "  - {id: src, type: sim.source, params: {count: 200}}\n"
                             "  - {id: broken, type: test.fails_to_start, inputs: {in: src/out}}\n",
                             "contract.yaml", &diags)
                  .ok())
      << format_diagnostics(diags);
  const Status s = rt.run();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no camera here"), std::string::npos) << s.message();
  EXPECT_EQ(g_starts.load(), 1);
  EXPECT_EQ(g_processes.load(), 0);
  EXPECT_EQ(g_stops.load(), 0);
  // What reached the failed replica is counted, so nothing upstream stalled.
  const RunReport r = rt.report();
  const auto* edge = r.edge("src/out", "broken/in");
  ASSERT_NE(edge, nullptr);
  EXPECT_EQ(edge->sent, edge->delivered + edge->dropped);
  EXPECT_EQ(r.stage("broken")->dead_letters, edge->delivered);
}

}  // namespace
}  // namespace swarmflow
