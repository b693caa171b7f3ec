// `fanout: all` is read, and refused where it makes no sense, with file:line:col.

#include <gtest/gtest.h>

#include <swarmflow/registry.hpp>

#include "config/pipeline_spec.hpp"
#include "consensus/consensus.hpp"
#include "sim/sim.hpp"
#include "graph/graph.hpp"

namespace swarmflow {


namespace {

class FanoutConfig : public ::testing::Test {
 protected:
  FanoutConfig() {
    register_sim_stages(registry_);
    register_consensus_stages(registry_);
  }
  std::optional<config::PipelineSpec> load(const std::string& yaml) {
    diagnostics_.clear();
    return config::load_pipeline_string(yaml, "fan.yaml", registry_, diagnostics_);
  }
  Registry registry_;
  std::vector<Diagnostic> diagnostics_;
};

std::string pipeline(const std::string& work_extra) {
  return "pipeline: fan\n"
         "stages:\n"
         "  - {id: src, type: sim.source}\n"
         "  - id: work\n"
         "    type: sim.work\n"
         "    replicas: 3\n"
         "    inputs: {in: src/out}\n" +
         work_extra +
         "  - {id: sink, type: sim.sink, inputs: {in: work/out}}\n";
}

TEST_F(FanoutConfig, AllMarksEveryInputEdgeOfTheStage) {
  auto spec = load(pipeline("    fanout: all\n"));
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_TRUE(spec->find_stage("work")->fanout_all);
  EXPECT_FALSE(spec->find_stage("sink")->fanout_all);
  const graph::Graph g = graph::Graph::build(*spec, registry_);
  ASSERT_EQ(g.edges.size(), 2U);
  EXPECT_TRUE(g.edges[0].fanout_all);   // src -> work
  EXPECT_FALSE(g.edges[1].fanout_all);  // work -> sink
  EXPECT_NE(g.to_dot("fan").find("to every replica"), std::string::npos);
}

TEST_F(FanoutConfig, OneIsTheDefault) {
  auto spec = load(pipeline("    fanout: one\n"));
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_FALSE(spec->find_stage("work")->fanout_all);
}

TEST_F(FanoutConfig, AnUnknownValueIsRefusedAtIt) {
  EXPECT_FALSE(load(pipeline("    fanout: most\n")).has_value());
  ASSERT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
  EXPECT_EQ(diagnostics_[0].line, 8);
  EXPECT_EQ(diagnostics_[0].column, 13);
  EXPECT_NE(diagnostics_[0].message.find("unknown fanout 'most'"), std::string::npos) << diagnostics_[0].message;
}

TEST_F(FanoutConfig, AKeyContradictsIt) {
  EXPECT_FALSE(load(pipeline("    key: stream\n    fanout: all\n")).has_value());
  ASSERT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
  EXPECT_EQ(diagnostics_[0].line, 9);
  EXPECT_EQ(diagnostics_[0].column, 5);
  EXPECT_NE(diagnostics_[0].message.find("contradict"), std::string::npos) << diagnostics_[0].message;
}

TEST_F(FanoutConfig, ItIsAStringNotAMap) {
  EXPECT_FALSE(load(pipeline("    fanout: {all: true}\n")).has_value());
  ASSERT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
  EXPECT_EQ(diagnostics_[0].line, 8);
}


// A voter's `out` carries what its candidates carry (StageSpec::passes_type).
TEST_F(FanoutConfig, AVotersOutputHasTheTypeOfItsCandidates) {
  const std::string voted =
      "pipeline: fan\n"
      "stages:\n"
      "  - {id: src, type: sim.source}\n"
      "  - {id: work, type: sim.work, replicas: 3, fanout: all, inputs: {in: src/out}}\n"
      "  - {id: vote, type: consensus.vote, inputs: {candidates: work/out}}\n";
  EXPECT_TRUE(load(voted + "  - {id: sink, type: sim.sink, inputs: {in: vote/out}}\n").has_value())
      << format_diagnostics(diagnostics_);
  // Decisions are records, not blobs.
  EXPECT_FALSE(load(voted + "  - {id: sink, type: sim.sink, inputs: {in: vote/decisions}}\n").has_value());
  ASSERT_EQ(diagnostics_.size(), 1U);
  EXPECT_NE(diagnostics_[0].message.find("VoteDecision"), std::string::npos) << diagnostics_[0].message;
  EXPECT_EQ(diagnostics_[0].line, 6);
}

}  // namespace
}  // namespace swarmflow
