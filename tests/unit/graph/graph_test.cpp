#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include <swarmflow/registry.hpp>
#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/stage.hpp>

#include "config/pipeline_spec.hpp"
#include "graph/graph.hpp"
#include "sim/sim.hpp"

namespace swarmflow {
namespace {

// -- test-only stages ---

/// Takes any payload.
class AnySink final : public Stage {
 public:
  void setup(StageSpec& s) override { in_ = s.input<AnyPayload>("in", "anything"); }
  Status process(Inputs&, Outputs&, StageContext&) override { return {}; }

 private:
  InputPort<AnyPayload> in_;
};

/// Two blob inputs, one blob output: closes cycles.
class Join final : public Stage {
 public:
  void setup(StageSpec& s) override {
    a_ = s.input<schema::Blob>("a", "first");
    b_ = s.input<schema::Blob>("b", "second");
    out_ = s.output<schema::Blob>("out", "both");
  }
  Status process(Inputs&, Outputs&, StageContext&) override { return {}; }

 private:
  InputPort<schema::Blob> a_;
  InputPort<schema::Blob> b_;
  OutputPort<schema::Blob> out_;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// -- fixture ---

class GraphTest : public ::testing::Test {
 protected:
  GraphTest() {
    register_sim_stages(registry_);
    registry_.add<AnySink>("test.any_sink", "takes anything");
    registry_.add<Join>("test.join", "joins two inputs");
  }

  /// Loads `yaml` (which must be valid) and builds its graph.
  graph::Graph build(const std::string& yaml) {
    std::vector<Diagnostic> diagnostics;
    spec_ = config::load_pipeline_string(yaml, "test.yaml", registry_, diagnostics);
    EXPECT_TRUE(spec_.has_value()) << format_diagnostics(diagnostics);
    if (!spec_) return {};
    return graph::Graph::build(*spec_, registry_);
  }

  Registry registry_;
  std::optional<config::PipelineSpec> spec_;
};

constexpr const char* kChain = R"(pipeline: chain
stages:
  - id: source
    type: sim.source
  - id: work
    type: sim.work
    replicas: 2
    inputs: {in: source/out}
    queue: {capacity: 4, overflow: drop_oldest}
    key: stream
  - id: sink
    type: sim.sink
    inputs: {in: work/out}
)";

// -- tests ---

TEST_F(GraphTest, NodesFollowTheStagesWithTheirPorts) {
  auto g = build(kChain);
  ASSERT_EQ(g.nodes.size(), 3U);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g.nodes[static_cast<std::size_t>(i)].index, i);
  EXPECT_EQ(g.nodes[0].decl, &spec_->stages[0]);
  EXPECT_TRUE(g.nodes[0].source());
  EXPECT_FALSE(g.nodes[0].sink());
  EXPECT_FALSE(g.nodes[1].source());
  EXPECT_FALSE(g.nodes[1].sink());
  EXPECT_TRUE(g.nodes[2].sink());
  ASSERT_EQ(g.nodes[1].spec.inputs().size(), 2U);  // in, and the optional agreed
  EXPECT_EQ(g.nodes[1].spec.inputs()[0].name, "in");
  EXPECT_TRUE(g.nodes[1].spec.inputs()[1].optional);
  EXPECT_EQ(g.nodes[1].spec.outputs()[0].type, "swarmflow.schema.Blob");
  EXPECT_EQ(g.find("work"), 1);
  EXPECT_EQ(g.find("nope"), -1);
}

TEST_F(GraphTest, EdgesCarryTypeQueueAndKey) {
  auto g = build(kChain);
  ASSERT_EQ(g.edges.size(), 2U);

  const auto& first = g.edges[0];
  EXPECT_EQ(first.id, 0);
  EXPECT_EQ(first.from_node, 0);
  EXPECT_EQ(first.from_port, 0);
  EXPECT_EQ(first.to_node, 1);
  EXPECT_EQ(first.to_port, 0);
  EXPECT_EQ(first.type, "swarmflow.schema.Blob");
  EXPECT_EQ(first.capacity, 4);
  EXPECT_EQ(first.overflow, config::Overflow::drop_oldest);
  EXPECT_TRUE(first.keyed);
  EXPECT_FALSE(first.feedback);
  EXPECT_EQ(g.from_name(first), "source/out");
  EXPECT_EQ(g.to_name(first), "work/in");

  const auto& second = g.edges[1];
  EXPECT_EQ(second.id, 1);
  EXPECT_EQ(second.from_node, 1);
  EXPECT_EQ(second.to_node, 2);
  EXPECT_EQ(second.capacity, 8);
  EXPECT_EQ(second.overflow, config::Overflow::block);
  EXPECT_FALSE(second.keyed);

  EXPECT_EQ(g.nodes[0].out_edges, std::vector<int>{0});
  EXPECT_TRUE(g.nodes[0].in_edges.empty());
  EXPECT_EQ(g.nodes[1].in_edges, std::vector<int>{0});
  EXPECT_EQ(g.nodes[1].out_edges, std::vector<int>{1});
  EXPECT_EQ(g.nodes[2].in_edges, std::vector<int>{1});
}

TEST_F(GraphTest, FanOutMakesOneEdgePerConsumer) {
  auto g = build(R"(pipeline: fan
stages:
  - {id: source, type: sim.source}
  - {id: left, type: sim.sink, inputs: {in: source/out}}
  - {id: right, type: sim.sink, inputs: {in: source/out}, queue: {capacity: 2, overflow: drop_newest}}
)");
  ASSERT_EQ(g.edges.size(), 2U);
  EXPECT_EQ(g.nodes[0].out_edges.size(), 2U);
  EXPECT_EQ(g.from_name(g.edges[0]), "source/out");
  EXPECT_EQ(g.to_name(g.edges[0]), "left/in");
  EXPECT_EQ(g.from_name(g.edges[1]), "source/out");
  EXPECT_EQ(g.to_name(g.edges[1]), "right/in");
  EXPECT_EQ(g.edges[0].capacity, 8);
  EXPECT_EQ(g.edges[1].capacity, 2);
  EXPECT_EQ(g.edges[1].overflow, config::Overflow::drop_newest);
}

TEST_F(GraphTest, AnyPayloadEdgeCarriesTheProducerType) {
  auto g = build(R"(pipeline: any
stages:
  - {id: source, type: sim.source}
  - {id: dump, type: test.any_sink, inputs: {in: source/out}}
)");
  ASSERT_EQ(g.edges.size(), 1U);
  EXPECT_EQ(g.edges[0].type, "swarmflow.schema.Blob");
}

TEST_F(GraphTest, OnlyTheLoopBackEdgeIsFeedback) {
  auto g = build(R"(pipeline: loop
stages:
  - id: source
    type: sim.source
  - id: a
    type: test.join
    feedback: true
    inputs: {a: source/out, b: b/out}
  - id: b
    type: sim.work
    inputs: {in: a/out}
)");
  ASSERT_EQ(g.edges.size(), 3U);
  EXPECT_EQ(g.from_name(g.edges[0]), "source/out");
  EXPECT_FALSE(g.edges[0].feedback);
  EXPECT_EQ(g.from_name(g.edges[1]), "b/out");
  EXPECT_EQ(g.to_name(g.edges[1]), "a/b");
  EXPECT_TRUE(g.edges[1].feedback);
  EXPECT_FALSE(g.edges[2].feedback);
}

TEST_F(GraphTest, DotNamesEveryStageAndEdge) {
  auto g = build(kChain);
  const std::string dot = g.to_dot("chain");
  EXPECT_TRUE(contains(dot, "digraph \"chain\" {")) << dot;
  EXPECT_TRUE(contains(dot, "\"source\" [label=\"source\\nsim.source\"]")) << dot;
  EXPECT_TRUE(contains(dot, "\"work\" [label=\"work\\nsim.work x2\"]")) << dot;
  EXPECT_TRUE(contains(dot, "\"sink\"")) << dot;
  EXPECT_TRUE(contains(dot, "\"source\" -> \"work\" [label=\"out -> in\\nswarmflow.schema.Blob\\nqueue 4, "
                            "drop_oldest, keyed by stream\"]"))
      << dot;
  EXPECT_TRUE(contains(dot, "\"work\" -> \"sink\"")) << dot;
  EXPECT_EQ(dot.back(), '\n');
}

/// A generated definition of `stages` stages, `line(i)` giving stage i.
template <typename Line>
std::string generated(std::size_t stages, Line line) {
  std::string yaml = "pipeline: generated\nstages:\n";
  for (std::size_t i = 0; i < stages; ++i) yaml += line(i);
  return yaml;
}

TEST_F(GraphTest, HundredThousandStageChain) {
  auto g = build(generated(100'000, [](std::size_t i) {
    if (i == 0) return std::string("  - {id: s0, type: sim.source}\n");
    return "  - {id: s" + std::to_string(i) + ", type: sim.work, inputs: {in: s" + std::to_string(i - 1) + "/out}}\n";
  }));
  ASSERT_EQ(g.nodes.size(), 100'000U);
  ASSERT_EQ(g.edges.size(), 99'999U);
  EXPECT_EQ(g.find("s0"), 0);
  EXPECT_EQ(g.find("s99999"), 99'999);
  EXPECT_EQ(g.find("nope"), -1);
  for (const auto& edge : g.edges) {
    ASSERT_EQ(edge.to_node, edge.from_node + 1);
    ASSERT_FALSE(edge.feedback);
  }
}

TEST_F(GraphTest, LongLoopHasOneFeedbackEdge) {
  // source -> s0 -> s1 -> ... -> s99998 -> s0, with s0 marked feedback.
  auto g = build(generated(100'000, [](std::size_t i) {
    if (i == 0) return std::string("  - {id: source, type: sim.source}\n");
    if (i == 1) {
      return std::string("  - {id: s0, type: test.join, feedback: true, inputs: {a: source/out, b: s99998/out}}\n");
    }
    return "  - {id: s" + std::to_string(i - 1) + ", type: sim.work, inputs: {in: s" + std::to_string(i - 2) +
           "/out}}\n";
  }));
  ASSERT_EQ(g.edges.size(), 100'000U);
  std::size_t feedback = 0;
  for (const auto& edge : g.edges) {
    if (!edge.feedback) continue;
    ++feedback;
    EXPECT_EQ(g.from_name(edge), "s99998/out");
    EXPECT_EQ(g.to_name(edge), "s0/b");
  }
  EXPECT_EQ(feedback, 1U);
}

}  // namespace
}  // namespace swarmflow
