#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <swarmflow/registry.hpp>
#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/stage.hpp>

#include "config/pipeline_spec.hpp"
#include "sim/sim.hpp"

namespace swarmflow {
namespace {

// -- test-only stages ---

/// Takes frames, so that a blob producer feeding it is a type mismatch.
class FrameSink final : public Stage {
 public:
  void setup(StageSpec& s) override { frames_ = s.input<schema::Frame>("frames", "frames to look at"); }
  Status process(Inputs&, Outputs&, StageContext&) override { return {}; }

 private:
  InputPort<schema::Frame> frames_;
};

/// Takes any payload.
class AnySink final : public Stage {
 public:
  void setup(StageSpec& s) override { in_ = s.input<AnyPayload>("in", "anything"); }
  Status process(Inputs&, Outputs&, StageContext&) override { return {}; }

 private:
  InputPort<AnyPayload> in_;
};

/// Two blob inputs, one blob output: closes cycles in tests.
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

/// A source with one parameter of every kind.
class Tunable final : public Stage {
 public:
  void setup(StageSpec& s) override {
    out_ = s.output<schema::Blob>("out", "blobs");
    s.param(mode_, "mode", "how to work", "fast", {"fast", "exact"});
    s.param(enabled_, "enabled", "whether to work at all", true);
    s.param(ratio_, "ratio", "share of the work", 0.5, {0.0, 1.0});
    s.param(n_, "n", "how many", 1, {1.0, 100.0});
  }
  Status process(Inputs&, Outputs&, StageContext&) override { return Status::end_of_stream(); }

 private:
  OutputPort<schema::Blob> out_;
  std::string mode_;
  bool enabled_ = false;
  double ratio_ = 0;
  std::int64_t n_ = 0;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Needs both inputs in one step (as vision.annotate does).
class NeedsJoin final : public Stage {
 public:
  void setup(StageSpec& s) override {
    a_ = s.input<schema::Blob>("a", "first");
    b_ = s.input<schema::Blob>("b", "second");
    s.require_join();
  }
  Status process(Inputs&, Outputs&, StageContext&) override { return {}; }

 private:
  InputPort<schema::Blob> a_;
  InputPort<schema::Blob> b_;
};

// -- fixture ---

class LoaderTest : public ::testing::Test {
 protected:
  LoaderTest() {
    register_sim_stages(registry_);
    registry_.add<FrameSink>("test.frame_sink", "takes frames");
    registry_.add<AnySink>("test.any_sink", "takes anything");
    registry_.add<Join>("test.join", "joins two inputs");
    registry_.add<NeedsJoin>("test.needs_join", "needs its inputs joined");
    registry_.add<Tunable>("test.tunable", "has every kind of parameter");
  }

  std::optional<config::PipelineSpec> load(const std::string& yaml) {
    diagnostics_.clear();
    return config::load_pipeline_string(yaml, "test.yaml", registry_, diagnostics_);
  }

  /// Loads `yaml`, expecting it to fail with exactly one diagnostic.
  Diagnostic only_error(const std::string& yaml) {
    auto spec = load(yaml);
    EXPECT_FALSE(spec.has_value());
    EXPECT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
    return diagnostics_.empty() ? Diagnostic{} : diagnostics_.front();
  }

  /// The diagnostic whose message contains `part`.
  Diagnostic error_with(const std::string& part) const {
    for (const auto& d : diagnostics_) {
      if (contains(d.message, part)) return d;
    }
    ADD_FAILURE() << "no diagnostic mentions '" << part << "' in:\n" << format_diagnostics(diagnostics_);
    return {};
  }

  Registry registry_;
  std::vector<Diagnostic> diagnostics_;
};

#define EXPECT_AT(diagnostic, expected_line, expected_column)                    \
  do {                                                                           \
    EXPECT_EQ((diagnostic).line, expected_line) << (diagnostic).to_string();     \
    EXPECT_EQ((diagnostic).column, expected_column) << (diagnostic).to_string(); \
  } while (false)

// -- valid definitions ---

TEST_F(LoaderTest, ReadsEverySection) {
  auto spec = load(R"(pipeline: inspection
units:
  - {id: edge, threads: 2, speed: 0.5}
  - {id: core, endpoint: "tcp://10.0.0.2:7000", public_key: abc}
coordinator: ipc:///run/swarmflow/coordinator
stages:
  - id: camera
    type: sim.source
    replicas: 3
    params: {count: 10, rate_hz: 30, streams: 2}
    placement: {units: [edge]}
  - id: detect
    type: sim.work
    replicas: {min: 2, max: 2}
    inputs: {in: camera/out}
    queue: {capacity: 4, overflow: drop_oldest}
    key: stream
    placement: {spread: true}
  - id: sink
    type: sim.sink
    inputs: {in: detect/out}
    feedback: false
placement: {policy: adaptive, rebalance_above: 0.9, interval_ms: 100}
)");
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_TRUE(diagnostics_.empty());
  EXPECT_EQ(spec->name, "inspection");
  EXPECT_EQ(spec->file, "test.yaml");
  EXPECT_EQ(spec->coordinator, "ipc:///run/swarmflow/coordinator");

  ASSERT_EQ(spec->units.size(), 2U);
  EXPECT_EQ(spec->units[0].id, "edge");
  EXPECT_EQ(spec->units[0].threads, 2);
  EXPECT_DOUBLE_EQ(spec->units[0].speed, 0.5);
  EXPECT_EQ(spec->units[1].endpoint, "tcp://10.0.0.2:7000");
  EXPECT_EQ(spec->units[1].public_key, "abc");
  EXPECT_DOUBLE_EQ(spec->units[1].speed, 1.0);

  ASSERT_EQ(spec->stages.size(), 3U);
  const auto& camera = spec->stages[0];
  EXPECT_EQ(camera.id, "camera");
  EXPECT_EQ(camera.type, "sim.source");
  EXPECT_EQ(camera.replicas, 3);
  EXPECT_EQ(camera.min_replicas, 3);
  EXPECT_EQ(camera.max_replicas, 3);
  EXPECT_EQ(camera.loc.line, 7);
  EXPECT_EQ(camera.loc.column, 5);
  ASSERT_EQ(camera.params.size(), 3U);
  EXPECT_EQ(camera.params[0].name, "count");
  EXPECT_EQ(std::get<std::int64_t>(camera.params[0].value), 10);
  EXPECT_EQ(camera.params[1].name, "rate_hz");
  EXPECT_DOUBLE_EQ(std::get<double>(camera.params[1].value), 30.0);  // converted to the declared kind
  EXPECT_EQ(camera.params[1].loc.line, 10);
  EXPECT_EQ(camera.pin_units, std::vector<std::string>{"edge"});
  EXPECT_FALSE(camera.spread);

  const auto& detect = spec->stages[1];
  EXPECT_EQ(detect.replicas, 2);
  EXPECT_EQ(detect.min_replicas, 2);
  EXPECT_EQ(detect.max_replicas, 2);
  ASSERT_EQ(detect.inputs.size(), 1U);
  EXPECT_EQ(detect.inputs[0].port, "in");
  EXPECT_EQ(detect.inputs[0].from_stage, "camera");
  EXPECT_EQ(detect.inputs[0].from_port, "out");
  EXPECT_EQ(detect.inputs[0].loc.line, 15);
  EXPECT_EQ(detect.inputs[0].loc.column, 18);
  EXPECT_EQ(detect.queue.capacity, 4);
  EXPECT_EQ(detect.queue.overflow, config::Overflow::drop_oldest);
  EXPECT_TRUE(detect.keyed);
  EXPECT_TRUE(detect.spread);

  const auto& sink = spec->stages[2];
  EXPECT_EQ(sink.queue.capacity, 8);
  EXPECT_EQ(sink.queue.overflow, config::Overflow::block);
  EXPECT_FALSE(sink.keyed);
  EXPECT_FALSE(sink.feedback);

  EXPECT_EQ(spec->placement.policy, "adaptive");
  EXPECT_DOUBLE_EQ(spec->placement.rebalance_above, 0.9);
  EXPECT_EQ(spec->placement.interval_ms, 100);
  EXPECT_EQ(spec->find_stage("detect"), &spec->stages[1]);
  EXPECT_EQ(spec->find_stage("nope"), nullptr);
}

TEST_F(LoaderTest, DefaultsToOneUnitAndStaticPlacement) {
  auto spec = load(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
)");
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  ASSERT_EQ(spec->units.size(), 1U);
  EXPECT_EQ(spec->units[0].id, "u0");
  EXPECT_EQ(spec->placement.policy, "static");
  EXPECT_TRUE(spec->coordinator.empty());
}

TEST_F(LoaderTest, UnitCountNamesUnits) {
  auto spec = load(R"(pipeline: t
units: 3
stages:
  - {id: source, type: sim.source, placement: {units: [u2]}}
)");
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  ASSERT_EQ(spec->units.size(), 3U);
  EXPECT_EQ(spec->units[2].id, "u2");
  EXPECT_EQ(spec->stages[0].pin_units, std::vector<std::string>{"u2"});
}

TEST_F(LoaderTest, ConvertsEveryParameterKind) {
  auto spec = load(R"(pipeline: t
stages:
  - id: source
    type: test.tunable
    params: {mode: exact, enabled: false, ratio: 1, n: 7}
)");
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  const auto& params = spec->stages[0].params;
  ASSERT_EQ(params.size(), 4U);
  EXPECT_EQ(std::get<std::string>(params[0].value), "exact");
  EXPECT_EQ(std::get<bool>(params[1].value), false);
  EXPECT_DOUBLE_EQ(std::get<double>(params[2].value), 1.0);
  EXPECT_EQ(std::get<std::int64_t>(params[3].value), 7);
}

TEST_F(LoaderTest, QuickstartLoadsWithoutDiagnostics) {
  auto spec =
      config::load_pipeline_file(SWARMFLOW_SOURCE_DIR "/pipelines/quickstart.yaml", registry_, diagnostics_);
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_TRUE(diagnostics_.empty());
  EXPECT_EQ(spec->name, "quickstart");
  EXPECT_EQ(spec->stages.size(), 3U);
}

TEST_F(LoaderTest, AnyPayloadInputAcceptsEveryType) {
  auto spec = load(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
  - {id: dump, type: test.any_sink, inputs: {in: source/out}}
)");
  EXPECT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
}

TEST_F(LoaderTest, CycleThroughFeedbackStageIsAccepted) {
  auto spec = load(R"(pipeline: t
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
  EXPECT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
}

TEST_F(LoaderTest, OverflowNames) {
  EXPECT_STREQ(config::to_string(config::Overflow::block), "block");
  EXPECT_STREQ(config::to_string(config::Overflow::drop_oldest), "drop_oldest");
  EXPECT_STREQ(config::to_string(config::Overflow::drop_newest), "drop_newest");
}

// -- files and syntax ---

TEST_F(LoaderTest, MissingFileGivesOneDiagnosticWithThePath) {
  const std::string path = "/nonexistent/swarmflow/pipeline.yaml";
  auto spec = config::load_pipeline_file(path, registry_, diagnostics_);
  EXPECT_FALSE(spec.has_value());
  ASSERT_EQ(diagnostics_.size(), 1U);
  EXPECT_EQ(diagnostics_[0].file, path);
  EXPECT_TRUE(contains(diagnostics_[0].message, path)) << diagnostics_[0].to_string();
  EXPECT_FALSE(diagnostics_[0].hint.empty());
}

TEST_F(LoaderTest, YamlSyntaxErrorIsReportedAtItsPosition) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: src
    type: sim.source
    inputs: {in: [a, b}
)");
  EXPECT_AT(d, 5, 23);
  EXPECT_EQ(d.file, "test.yaml");
  EXPECT_TRUE(contains(d.message, "YAML syntax error")) << d.to_string();
  EXPECT_FALSE(d.hint.empty());
}

TEST_F(LoaderTest, EmptyDefinition) {
  auto d = only_error("");
  EXPECT_TRUE(contains(d.message, "empty")) << d.to_string();
}

// -- stage types and parameters ---

TEST_F(LoaderTest, UnknownStageTypeSuggestsTheNearest) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: src
    type: sim.source
  - id: work
    type: sim.wrok
    inputs: {in: src/out}
)");
  EXPECT_AT(d, 6, 11);
  EXPECT_TRUE(contains(d.message, "unknown stage type 'sim.wrok'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "did you mean 'sim.work'?")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "swarmflow describe")) << d.to_string();
}

TEST_F(LoaderTest, UnknownParameterPointsAtItsKey) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: src
    type: sim.source
    params:
      cont: 10
)");
  EXPECT_AT(d, 6, 7);
  EXPECT_TRUE(contains(d.message, "unknown parameter 'cont'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "did you mean 'count'?")) << d.to_string();
}

TEST_F(LoaderTest, UnknownParameterWithoutNearNameListsThemAll) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: src, type: sim.source, params: {zzz: 8}}
)");
  EXPECT_AT(d, 3, 42);
  EXPECT_TRUE(contains(d.hint, "count, rate_hz, payload_bytes, streams")) << d.to_string();
}

TEST_F(LoaderTest, IllTypedParameterPointsAtItsValue) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: src
    type: sim.source
    params:
      count: "many"
)");
  EXPECT_AT(d, 6, 14);
  EXPECT_TRUE(contains(d.message, "parameter 'count' must be an integer")) << d.to_string();
  EXPECT_TRUE(contains(d.message, "\"many\"")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "'count' takes an integer")) << d.to_string();
}

TEST_F(LoaderTest, IntegerParameterRejectsAFraction) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: src
    type: sim.source
    params: {count: 1.5}
)");
  EXPECT_AT(d, 5, 21);
  EXPECT_TRUE(contains(d.message, "must be an integer, got 1.5")) << d.to_string();
}

TEST_F(LoaderTest, BooleanParameterRejectsOtherWords) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: src
    type: test.tunable
    params: {enabled: maybe}
)");
  EXPECT_AT(d, 5, 23);
  EXPECT_TRUE(contains(d.message, "must be a boolean")) << d.to_string();
}

TEST_F(LoaderTest, OutOfRangeParameterPointsAtItsValue) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: src
    type: sim.source
    params:
      rate_hz: -1
)");
  EXPECT_AT(d, 6, 16);
  EXPECT_TRUE(contains(d.message, "parameter 'rate_hz' = -1 is out of range")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "[0, 1e+07]")) << d.to_string();
}

TEST_F(LoaderTest, StringParameterOutsideItsChoices) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: src
    type: test.tunable
    params: {mode: slow}
)");
  EXPECT_AT(d, 5, 20);
  EXPECT_TRUE(contains(d.message, "not one of the allowed values")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "one of: fast, exact")) << d.to_string();
}

// -- inputs ---

TEST_F(LoaderTest, InputFromUnknownStageSuggestsTheNearestId) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
  - id: sink
    type: sim.sink
    inputs: {in: sorce/out}
)");
  EXPECT_AT(d, 7, 18);
  EXPECT_TRUE(contains(d.message, "unknown stage 'sorce'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "did you mean 'source'?")) << d.to_string();
}

TEST_F(LoaderTest, InputFromUnknownOutputPortListsTheOutputs) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
  - id: sink
    type: sim.sink
    inputs: {in: source/output}
)");
  EXPECT_AT(d, 7, 18);
  EXPECT_TRUE(contains(d.message, "has no output 'output'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "sim.source outputs: out")) << d.to_string();
}

TEST_F(LoaderTest, UnknownInputPortListsTheInputs) {
  load(R"(pipeline: t
stages:
  - id: source
    type: sim.source
  - id: sink
    type: sim.sink
    inputs:
      frames: source/out
)");
  ASSERT_EQ(diagnostics_.size(), 2U) << format_diagnostics(diagnostics_);
  auto d = error_with("has no input 'frames'");
  EXPECT_AT(d, 8, 7);
  EXPECT_TRUE(contains(d.hint, "sim.sink inputs: in")) << d.to_string();
  // The declared input `in` is then left unconnected, reported at `inputs:`.
  EXPECT_AT(error_with("input 'in' of stage 'sink' is not connected"), 7, 5);
}

TEST_F(LoaderTest, MalformedSourceText) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
  - id: sink
    type: sim.sink
    inputs: {in: source.out}
)");
  EXPECT_AT(d, 7, 18);
  EXPECT_TRUE(contains(d.message, "'source.out', not `stage/port`")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "stage/port")) << d.to_string();
}

TEST_F(LoaderTest, UnconnectedInputSuggestsAProducer) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
  - id: sink
    type: sim.sink
)");
  EXPECT_AT(d, 5, 5);
  EXPECT_TRUE(contains(d.message, "input 'in' of stage 'sink' is not connected")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "source/out")) << d.to_string();
}

TEST_F(LoaderTest, PortTypeMismatchNamesBothTypes) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
  - id: view
    type: test.frame_sink
    inputs: {frames: source/out}
)");
  EXPECT_AT(d, 7, 22);
  EXPECT_TRUE(contains(d.message, "port type mismatch")) << d.to_string();
  EXPECT_TRUE(contains(d.message, "swarmflow.schema.Blob")) << d.to_string();
  EXPECT_TRUE(contains(d.message, "swarmflow.schema.Frame")) << d.to_string();
}

// -- ids and cycles ---

TEST_F(LoaderTest, DuplicateStageIdPointsAtTheSecond) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
  - id: source
    type: sim.source
)");
  EXPECT_AT(d, 5, 9);
  EXPECT_TRUE(contains(d.message, "duplicate stage id 'source'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "line 3")) << d.to_string();
}

TEST_F(LoaderTest, CycleWithoutFeedbackIsNamed) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
  - id: a
    type: test.join
    inputs: {a: source/out, b: b/out}
  - id: b
    type: sim.work
    inputs: {in: a/out}
)");
  EXPECT_AT(d, 7, 32);
  EXPECT_TRUE(contains(d.message, "a -> b -> a")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "feedback: true")) << d.to_string();
}

TEST_F(LoaderTest, SelfLoopIsACycle) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
  - {id: a, type: test.join, inputs: {a: source/out, b: a/out}}
)");
  EXPECT_AT(d, 4, 57);
  EXPECT_TRUE(contains(d.message, "cycle a -> a")) << d.to_string();
}

TEST_F(LoaderTest, InvalidStageId) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: "my source", type: sim.source}
)");
  EXPECT_AT(d, 3, 10);
  EXPECT_TRUE(contains(d.message, "not a valid name")) << d.to_string();
}

// -- queue ---

TEST_F(LoaderTest, UnknownOverflowPolicyListsTheThree) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
  - id: sink
    type: sim.sink
    inputs: {in: source/out}
    queue: {capacity: 4, overflow: sometimes}
)");
  EXPECT_AT(d, 7, 36);
  EXPECT_TRUE(contains(d.message, "unknown overflow policy 'sometimes'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "block, drop_oldest, drop_newest")) << d.to_string();
}

TEST_F(LoaderTest, BadCapacity) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
  - id: sink
    type: sim.sink
    inputs: {in: source/out}
    queue:
      capacity: 0
)");
  EXPECT_AT(d, 8, 17);
  EXPECT_TRUE(contains(d.message, "queue capacity of stage 'sink' must be between 1 and")) << d.to_string();
}

// -- structure ---

TEST_F(LoaderTest, UnknownTopLevelKeySuggestsTheNearest) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
palcement: {policy: static}
)");
  EXPECT_AT(d, 4, 1);
  EXPECT_TRUE(contains(d.message, "unknown key 'palcement'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "did you mean 'placement'?")) << d.to_string();
}

TEST_F(LoaderTest, UnknownStageKeySuggestsTheNearest) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
    replica: 2
)");
  EXPECT_AT(d, 5, 5);
  EXPECT_TRUE(contains(d.message, "unknown key 'replica' in stage 'source'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "did you mean 'replicas'?")) << d.to_string();
}

TEST_F(LoaderTest, UnknownQueueKeySuggestsTheNearest) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
  - id: sink
    type: sim.sink
    inputs: {in: source/out}
    queue: {capacity: 4, overflw: block}
)");
  EXPECT_AT(d, 7, 26);
  EXPECT_TRUE(contains(d.message, "unknown key 'overflw' in 'queue' of stage 'sink'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "did you mean 'overflow'?")) << d.to_string();
}

TEST_F(LoaderTest, UnknownPlacementKeySuggestsTheNearest) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
placement:
  policy: adaptive
  interval: 100
)");
  EXPECT_AT(d, 6, 3);
  EXPECT_TRUE(contains(d.message, "unknown key 'interval'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "did you mean 'interval_ms'?")) << d.to_string();
}

TEST_F(LoaderTest, UnknownStagePlacementKey) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source, placement: {unit: [u0]}}
)");
  EXPECT_AT(d, 3, 48);
  EXPECT_TRUE(contains(d.hint, "did you mean 'units'?")) << d.to_string();
}

TEST_F(LoaderTest, BadPlacementValues) {
  load(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
placement: {policy: dynamic, rebalance_above: 1.5, interval_ms: 0}
)");
  ASSERT_EQ(diagnostics_.size(), 3U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 4, 21);
  EXPECT_TRUE(contains(diagnostics_[0].message, "unknown placement policy 'dynamic'"));
  EXPECT_AT(diagnostics_[1], 4, 47);
  EXPECT_TRUE(contains(diagnostics_[1].message, "'rebalance_above' must be in (0, 1]"));
  EXPECT_AT(diagnostics_[2], 4, 65);
  EXPECT_TRUE(contains(diagnostics_[2].message, "'interval_ms' must be between 1 and"));
}

TEST_F(LoaderTest, PlacementPolicySettings) {
  auto spec = load(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
placement: {policy: adaptive, hysteresis: 0.05, sustain_ms: 200, cooldown_ms: 3000}
)");
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_DOUBLE_EQ(spec->placement.hysteresis, 0.05);
  EXPECT_EQ(spec->placement.sustain_ms, 200);
  EXPECT_EQ(spec->placement.cooldown_ms, 3000);
  load(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
placement: {hysteresis: 0.6, sustain_ms: -1, cooldown_ms: soon}
)");
  ASSERT_EQ(diagnostics_.size(), 3U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 4, 25);
  EXPECT_TRUE(contains(diagnostics_[0].message, "'hysteresis' must be in [0, 0.5]"));
  EXPECT_AT(diagnostics_[1], 4, 42);
  EXPECT_AT(diagnostics_[2], 4, 59);
}

TEST_F(LoaderTest, TransportSettings) {
  auto defaults = load("pipeline: t\nstages:\n  - {id: source, type: sim.source}\n");
  ASSERT_TRUE(defaults.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_EQ(defaults->transport.max_message_bytes, 64ll << 20);
  EXPECT_EQ(defaults->transport.high_water_mark, 10000);
  EXPECT_EQ(defaults->transport.linger_ms, 200);
  EXPECT_EQ(defaults->transport.pack_below_bytes, 1024);
  auto spec = load(R"(pipeline: t
transport:
  max_message_bytes: 134217728
  high_water_mark: 500
  linger_ms: 0
  pack_below_bytes: 0
stages:
  - {id: source, type: sim.source}
)");
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_EQ(spec->transport.max_message_bytes, 134217728);
  EXPECT_EQ(spec->transport.high_water_mark, 500);
  EXPECT_EQ(spec->transport.linger_ms, 0);
  EXPECT_EQ(spec->transport.pack_below_bytes, 0);
}

TEST_F(LoaderTest, InProcessHandOverIsZeroMqUnlessDirectIsAskedFor) {
  const std::string stages = "stages:\n  - {id: source, type: sim.source}\n";
  auto defaults = load("pipeline: t\nunits: 2\n" + stages);
  ASSERT_TRUE(defaults.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_FALSE(defaults->transport.in_process_direct);
  auto direct = load("pipeline: t\nunits: 2\ntransport: {in_process: direct}\n" + stages);
  ASSERT_TRUE(direct.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_TRUE(direct->transport.in_process_direct);
  auto zeromq = load("pipeline: t\nunits: 2\ntransport: {in_process: zeromq}\n" + stages);
  ASSERT_TRUE(zeromq.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_FALSE(zeromq->transport.in_process_direct);

  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
transport: {in_process: drect}
)");
  EXPECT_AT(d, 4, 25);
  EXPECT_TRUE(contains(d.message, "unknown 'in_process' 'drect'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "did you mean 'direct'?")) << d.to_string();
  auto n = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
transport: {in_process: 1}
)");
  EXPECT_AT(n, 4, 25);
}

TEST_F(LoaderTest, BadTransportValues) {
  load(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
transport: {max_message_bytes: 100, high_water_mark: 0, linger_ms: -1, pack_below_bytes: 99999}
)");
  ASSERT_EQ(diagnostics_.size(), 4U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 4, 32);
  EXPECT_TRUE(contains(diagnostics_[0].message, "'max_message_bytes' must be between 4096 and"));
  EXPECT_AT(diagnostics_[1], 4, 54);
  EXPECT_TRUE(contains(diagnostics_[1].message, "'high_water_mark' must be between 1 and"));
  EXPECT_AT(diagnostics_[2], 4, 68);
  EXPECT_TRUE(contains(diagnostics_[2].message, "'linger_ms' must be between 0 and 60000"));
  EXPECT_AT(diagnostics_[3], 4, 90);
  EXPECT_TRUE(contains(diagnostics_[3].message, "'pack_below_bytes' must be between 0 and 16384"));

  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
transport: {max_message_bytes: 8192, pack_below_bytes: 8192}
)");
  EXPECT_AT(d, 4, 56);
  EXPECT_TRUE(contains(d.message, "'pack_below_bytes' must be below 'max_message_bytes' (8192)")) << d.to_string();

  auto unknown = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
transport: {max_message_size: 8192}
)");
  EXPECT_AT(unknown, 4, 13);
  EXPECT_TRUE(contains(unknown.hint, "did you mean 'max_message_bytes'?")) << unknown.to_string();
}

TEST_F(LoaderTest, OpenCvThreadsAreOneUnlessTheFileSaysOtherwise) {
  const std::string stages = "stages:\n  - {id: source, type: sim.source}\n";
  auto defaults = load("pipeline: t\n" + stages);
  ASSERT_TRUE(defaults.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_EQ(defaults->opencv.threads, 1);
  EXPECT_FALSE(defaults->opencv.given);
  auto two = load("pipeline: t\nopencv: {threads: 2}\n" + stages);
  ASSERT_TRUE(two.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_EQ(two->opencv.threads, 2);
  EXPECT_TRUE(two->opencv.given);
  EXPECT_EQ(two->opencv.loc.line, 2);
  EXPECT_EQ(two->opencv.loc.column, 19);
  auto automatic = load("pipeline: t\nopencv: {threads: auto}\n" + stages);
  ASSERT_TRUE(automatic.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_EQ(automatic->opencv.threads, 0);
  auto empty = load("pipeline: t\nopencv: {}\n" + stages);
  ASSERT_TRUE(empty.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_EQ(empty->opencv.threads, 1);
  EXPECT_TRUE(empty->opencv.given);

  load(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
opencv: {threads: 0}
)");
  ASSERT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 4, 19);
  EXPECT_TRUE(contains(diagnostics_[0].message, "'opencv.threads' must be between 1 and 256, got 0"))
      << diagnostics_[0].to_string();
  EXPECT_TRUE(contains(diagnostics_[0].hint, "`auto`")) << diagnostics_[0].to_string();
  for (const char* bad : {"many", "\"auto\"", "2.5", "[1]"}) {
    auto d = only_error("pipeline: t\nopencv:\n  threads: " + std::string(bad) + "\n" + stages);
    EXPECT_AT(d, 3, 12);
    EXPECT_TRUE(contains(d.message, "'opencv.threads' must be an integer")) << d.to_string();
  }
  auto unknown = only_error("pipeline: t\nopencv: {thread: 2}\n" + stages);
  EXPECT_AT(unknown, 2, 10);
  EXPECT_TRUE(contains(unknown.hint, "did you mean 'threads'?")) << unknown.to_string();
  auto not_a_map = only_error("pipeline: t\nopencv: 2\n" + stages);
  EXPECT_AT(not_a_map, 2, 9);
}

TEST_F(LoaderTest, FailureSettings) {
  auto defaults = load("pipeline: t\nstages:\n  - {id: source, type: sim.source}\n");
  ASSERT_TRUE(defaults.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_EQ(defaults->failure.heartbeat_ms, 25);
  EXPECT_EQ(defaults->failure.phi_threshold, 8.0);
  EXPECT_EQ(defaults->failure.min_std_ms, 5.0);
  EXPECT_EQ(defaults->failure.acceptable_pause_ms, 200);
  EXPECT_EQ(defaults->failure.window, 200);
  EXPECT_EQ(defaults->failure.snapshot_every, 64);
  EXPECT_EQ(defaults->failure.snapshot_ms, 100);
  auto spec = load(R"(pipeline: t
failure:
  heartbeat_ms: 50
  phi_threshold: 10.5
  min_std_ms: 2.5
  acceptable_pause_ms: 0
  window: 1000
  snapshot_every: 8
  snapshot_ms: 20
stages:
  - {id: source, type: sim.source}
)");
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_EQ(spec->failure.heartbeat_ms, 50);
  EXPECT_EQ(spec->failure.phi_threshold, 10.5);
  EXPECT_EQ(spec->failure.min_std_ms, 2.5);
  EXPECT_EQ(spec->failure.acceptable_pause_ms, 0);
  EXPECT_EQ(spec->failure.window, 1000);
  EXPECT_EQ(spec->failure.snapshot_every, 8);
  EXPECT_EQ(spec->failure.snapshot_ms, 20);
  load(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
failure: {snapshot_every: 0, snapshot_ms: 0}
)");
  ASSERT_EQ(diagnostics_.size(), 2U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 4, 27);
  EXPECT_TRUE(contains(diagnostics_[0].message, "'snapshot_every' must be between 1 and")) << diagnostics_[0].to_string();
  EXPECT_AT(diagnostics_[1], 4, 43);
  EXPECT_TRUE(contains(diagnostics_[1].message, "'snapshot_ms' must be between 1 and")) << diagnostics_[1].to_string();
}

TEST_F(LoaderTest, ScenarioSteps) {
  auto spec = load(R"(pipeline: t
units: 2
scenario:
  - {at_s: 2.0, unit: u1, speed: 0.25}
  - {at_s: 0, unit: u0, speed: 3}
stages:
  - {id: source, type: sim.source}
)");
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  ASSERT_EQ(spec->scenario.size(), 2U);
  EXPECT_EQ(spec->scenario[0].at_s, 2.0);
  EXPECT_EQ(spec->scenario[0].unit, "u1");
  EXPECT_EQ(spec->scenario[0].speed, 0.25);
  load(R"(pipeline: t
units: 2
scenario:
  - {at_s: -1, unit: u9, speed: 0}
  - {at_s: 1, unit: u1}
stages:
  - {id: source, type: sim.source}
)");
  ASSERT_EQ(diagnostics_.size(), 4U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 4, 12);
  EXPECT_TRUE(contains(diagnostics_[0].message, "at_s must be between 0 and")) << diagnostics_[0].to_string();
  EXPECT_AT(diagnostics_[1], 4, 22);
  EXPECT_TRUE(contains(diagnostics_[1].message, "no unit 'u9'")) << diagnostics_[1].to_string();
  EXPECT_AT(diagnostics_[2], 4, 33);
  EXPECT_TRUE(contains(diagnostics_[2].message, "speed must be between")) << diagnostics_[2].to_string();
  EXPECT_AT(diagnostics_[3], 5, 5);
  EXPECT_TRUE(contains(diagnostics_[3].message, "needs `at_s`, `unit` and `speed`")) << diagnostics_[3].to_string();
}

TEST_F(LoaderTest, BadFailureValues) {
  load(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
failure: {heartbeat_ms: 0, phi_threshold: 0.5, min_std_ms: "5", acceptable_pause_ms: -1, window: 1}
)");
  ASSERT_EQ(diagnostics_.size(), 5U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 4, 25);
  EXPECT_TRUE(contains(diagnostics_[0].message, "'heartbeat_ms' must be between 1 and 10000, got 0"))
      << diagnostics_[0].to_string();
  EXPECT_TRUE(contains(diagnostics_[0].hint, "default 25")) << diagnostics_[0].to_string();
  EXPECT_AT(diagnostics_[1], 4, 43);
  EXPECT_TRUE(contains(diagnostics_[1].message, "'phi_threshold' must be between 1 and 100, got 0.5"))
      << diagnostics_[1].to_string();
  EXPECT_AT(diagnostics_[2], 4, 60);
  EXPECT_TRUE(contains(diagnostics_[2].message, "'min_std_ms' must be a number")) << diagnostics_[2].to_string();
  EXPECT_AT(diagnostics_[3], 4, 86);
  EXPECT_TRUE(contains(diagnostics_[3].message, "'acceptable_pause_ms' must be between 0 and"))
      << diagnostics_[3].to_string();
  EXPECT_AT(diagnostics_[4], 4, 98);
  EXPECT_TRUE(contains(diagnostics_[4].message, "'window' must be between 2 and")) << diagnostics_[4].to_string();

  auto not_finite = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
failure: {phi_threshold: .inf}
)");
  EXPECT_AT(not_finite, 4, 26);
  EXPECT_TRUE(contains(not_finite.message, "'phi_threshold' must be")) << not_finite.to_string();

  auto unknown = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source}
failure: {heartbeat_interval_ms: 25}
)");
  EXPECT_AT(unknown, 4, 11);
  EXPECT_TRUE(contains(unknown.hint, "did you mean 'heartbeat_ms'?")) << unknown.to_string();

  auto not_a_map = only_error("pipeline: t\nstages:\n  - {id: source, type: sim.source}\nfailure: 25\n");
  EXPECT_AT(not_a_map, 4, 10);
}

TEST_F(LoaderTest, PinnedToUnknownUnit) {
  auto d = only_error(R"(pipeline: t
units: 2
stages:
  - id: source
    type: sim.source
    placement: {units: [u0, u7]}
)");
  EXPECT_AT(d, 6, 29);
  EXPECT_TRUE(contains(d.message, "unknown unit 'u7'")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "did you mean 'u0'?") || contains(d.hint, "did you mean 'u1'?"))
      << d.to_string();
}

TEST_F(LoaderTest, MissingPipelineName) {
  auto d = only_error(R"(stages:
  - {id: source, type: sim.source}
)");
  EXPECT_AT(d, 1, 1);
  EXPECT_TRUE(contains(d.message, "no name")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "pipeline: NAME")) << d.to_string();
}

TEST_F(LoaderTest, MissingStages) {
  auto d = only_error("pipeline: t\n");
  EXPECT_AT(d, 1, 1);
  EXPECT_TRUE(contains(d.message, "no 'stages'")) << d.to_string();
}

TEST_F(LoaderTest, MissingStageIdAndType) {
  load(R"(pipeline: t
stages:
  - id: source
  - type: sim.source
)");
  ASSERT_EQ(diagnostics_.size(), 2U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 3, 5);
  EXPECT_TRUE(contains(diagnostics_[0].message, "stage 'source' has no 'type'"));
  EXPECT_AT(diagnostics_[1], 4, 5);
  EXPECT_TRUE(contains(diagnostics_[1].message, "stage 2 has no 'id'"));
}

TEST_F(LoaderTest, StagesMustBeAList) {
  auto d = only_error(R"(pipeline: t
stages:
  source: {type: sim.source}
)");
  EXPECT_AT(d, 3, 3);
  EXPECT_TRUE(contains(d.message, "'stages' must be a list, got a map")) << d.to_string();
}

TEST_F(LoaderTest, ParamsMustBeAMap) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
    params: [count, 10]
)");
  EXPECT_AT(d, 5, 13);
  EXPECT_TRUE(contains(d.message, "'params' of stage 'source' must be a map, got a list")) << d.to_string();
}

TEST_F(LoaderTest, BadReplicaCount) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
    replicas: 0
)");
  EXPECT_AT(d, 5, 15);
  EXPECT_TRUE(contains(d.message, "'replicas' of stage 'source' must be between 1 and")) << d.to_string();
}

TEST_F(LoaderTest, ReplicaRangeWithMinAboveMax) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
    replicas: {min: 4, max: 2}
)");
  EXPECT_AT(d, 5, 29);
  EXPECT_TRUE(contains(d.message, "min 4 above max 2")) << d.to_string();
}

TEST_F(LoaderTest, AReplicaRangeOfASourceIsRefused) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
    replicas: {min: 2, max: 8}
)");
  EXPECT_AT(d, 5, 15);
  EXPECT_TRUE(contains(d.message, "'replicas' of stage 'source' is a range (2 to 8), but it is a source")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "replicas: 8")) << d.to_string();
}

TEST_F(LoaderTest, AReplicaRangeIsRefusedWhereAReplicaCannotJoinOrLeaveMidStream) {
  const std::pair<const char*, const char*> cases[] = {
      {"  - {id: w, type: sim.work, replicas: {min: 1, max: 3}, fanout: all, inputs: {in: src/out}}\n",
       "fanout: all"},
      {"  - {id: w, type: sim.work, replicas: {min: 1, max: 3}, feedback: true, inputs: {in: [src/out, b/out]}}\n"
       "  - {id: b, type: sim.work, inputs: {in: w/out}}\n",
       "in a cycle"},
  };
  for (const auto& [stage, why] : cases) {
    auto d = only_error(std::string("pipeline: t\nstages:\n  - {id: src, type: sim.source}\n") + stage);
    EXPECT_EQ(d.line, 4) << d.to_string();
    EXPECT_TRUE(contains(d.message, "is a range (1 to 3), but it")) << d.to_string();
    EXPECT_TRUE(contains(d.message, why)) << d.to_string();
  }
}

TEST_F(LoaderTest, AReplicaRangeHasMaxReplicasOfWhichMinTakeWork) {
  const auto loaded = load(R"(pipeline: t
stages:
  - {id: src, type: sim.source}
  - {id: w, type: sim.work, replicas: {min: 1, max: 3}, key: stream, inputs: {in: src/out}}
  - {id: sink, type: sim.sink, replicas: {min: 2, max: 4}, inputs: {in: w/out}}
)");
  ASSERT_TRUE(loaded.has_value()) << format_diagnostics(diagnostics_);
  const config::PipelineSpec& spec = *loaded;
  ASSERT_EQ(spec.stages.size(), 3U);
  EXPECT_EQ(spec.stages[1].replicas, 3);
  EXPECT_EQ(spec.stages[1].min_replicas, 1);
  EXPECT_EQ(spec.stages[1].max_replicas, 3);
  EXPECT_EQ(spec.stages[2].replicas, 4);
  EXPECT_EQ(spec.stages[2].min_replicas, 2);
}

TEST_F(LoaderTest, ReplicasMustBeANumber) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source, replicas: two}
)");
  EXPECT_AT(d, 3, 46);
  EXPECT_TRUE(contains(d.message, "must be an integer, got two")) << d.to_string();
}

TEST_F(LoaderTest, BadUnits) {
  load(R"(pipeline: t
units:
  - {id: a, speed: 0}
  - {id: a, threads: many}
stages:
  - {id: source, type: sim.source}
)");
  ASSERT_EQ(diagnostics_.size(), 3U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 3, 20);
  EXPECT_TRUE(contains(diagnostics_[0].message, "speed must be positive"));
  EXPECT_AT(diagnostics_[1], 4, 10);
  EXPECT_TRUE(contains(diagnostics_[1].message, "unit id 'a' is used twice"));
  EXPECT_AT(diagnostics_[2], 4, 22);
  EXPECT_TRUE(contains(diagnostics_[2].message, "threads must be an integer"));
}

TEST_F(LoaderTest, KeyOtherThanStream) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: source, type: sim.source, key: camera}
)");
  EXPECT_AT(d, 3, 41);
  EXPECT_TRUE(contains(d.hint, "`stream`")) << d.to_string();
}

TEST_F(LoaderTest, KeyGivenTwice) {
  auto d = only_error(R"(pipeline: t
stages:
  - id: source
    type: sim.source
    type: sim.work
)");
  EXPECT_AT(d, 5, 5);
  EXPECT_TRUE(contains(d.message, "'type' is given twice")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "line 4")) << d.to_string();
}

// -- large files and limits ---

/// `pipeline: NAME` and a `stages:` list of one line per stage, as a program
/// writes it: `line(i)` is the stage at index i.
template <typename Line>
std::string generated(std::size_t stages, Line line) {
  std::string yaml = "pipeline: generated\nstages:\n";
  yaml.reserve(stages * 64);
  for (std::size_t i = 0; i < stages; ++i) yaml += line(i);
  return yaml;
}

/// A chain source -> work -> ... -> work -> sink of `stages` stages.
std::string chain(std::size_t stages) {
  return generated(stages, [stages](std::size_t i) {
    const std::string id = "s" + std::to_string(i);
    if (i == 0) return "  - {id: " + id + ", type: sim.source}\n";
    const std::string type = i + 1 == stages ? "sim.sink" : "sim.work";
    return "  - {id: " + id + ", type: " + type + ", inputs: {in: s" + std::to_string(i - 1) + "/out}}\n";
  });
}

TEST_F(LoaderTest, HundredThousandStageChainLoads) {
  const auto started = std::chrono::steady_clock::now();
  auto spec = load(chain(100'000));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  ASSERT_EQ(spec->stages.size(), 100'000U);
  EXPECT_EQ(spec->stages.back().inputs.at(0).from_stage, "s99998");
  std::printf("[   info   ] a 100000-stage chain loaded in %.2f s\n", seconds);
}

TEST_F(LoaderTest, EveryUnknownProducerOfAHundredThousandStagesIsReported) {
  auto spec = load(generated(100'000, [](std::size_t i) {
    if (i == 0) return std::string("  - {id: s0, type: sim.source}\n");
    return "  - {id: s" + std::to_string(i) + ", type: sim.work, inputs: {in: t" + std::to_string(i) + "/out}}\n";
  }));
  EXPECT_FALSE(spec.has_value());
  ASSERT_EQ(diagnostics_.size(), 99'999U);
  for (std::size_t k = 0; k < diagnostics_.size(); ++k) {
    const Diagnostic& d = diagnostics_[k];
    ASSERT_EQ(d.line, static_cast<int>(k) + 4) << d.to_string();
    ASSERT_TRUE(contains(d.message, "comes from unknown stage 't" + std::to_string(k + 1) + "'")) << d.to_string();
    // A hint names a few stages, never all of them.
    ASSERT_LT(d.hint.size(), 400U) << d.to_string();
  }
  EXPECT_TRUE(contains(diagnostics_.back().hint, "and 99988 more")) << diagnostics_.back().to_string();
}

TEST_F(LoaderTest, NearestIdIsSuggestedInAnOrdinaryPipelineFullOfTypos) {
  auto spec = load(generated(500, [](std::size_t i) {
    if (i == 0) return std::string("  - {id: camera, type: sim.source}\n");
    return "  - {id: s" + std::to_string(i) + ", type: sim.sink, inputs: {in: camra/out}}\n";
  }));
  EXPECT_FALSE(spec.has_value());
  ASSERT_EQ(diagnostics_.size(), 499U);
  for (const auto& d : diagnostics_) ASSERT_TRUE(contains(d.hint, "did you mean 'camera'?")) << d.to_string();
}

TEST_F(LoaderTest, LongCycleIsNamedWithoutListingEveryStage) {
  // source -> s0 -> s1 -> ... -> s99998 -> s0, 100000 stages in all.
  auto d = only_error(generated(100'000, [](std::size_t i) {
    if (i == 0) return std::string("  - {id: source, type: sim.source}\n");
    if (i == 1) return std::string("  - {id: s0, type: test.join, inputs: {a: source/out, b: s99998/out}}\n");
    return "  - {id: s" + std::to_string(i - 1) + ", type: sim.work, inputs: {in: s" + std::to_string(i - 2) +
           "/out}}\n";
  }));
  EXPECT_AT(d, 4, 58);
  EXPECT_TRUE(contains(d.message, "cycle s0 -> s1 -> s2 -> s3 -> s4 -> s5 -> ... (99987 more stages) -> "
                                  "s99993 -> s99994 -> s99995 -> s99996 -> s99997 -> s99998 -> s0 "
                                  "without `feedback: true`"))
      << d.to_string();
  EXPECT_TRUE(contains(d.hint, "feedback: true")) << d.to_string();
}

TEST_F(LoaderTest, ManySmallCyclesAreEachReported) {
  // 25000 loops a_i -> b_i -> a_i, each fed by one source.
  auto spec = load(generated(75'000, [](std::size_t i) {
    const std::string n = std::to_string(i / 3);
    switch (i % 3) {
      case 0: return "  - {id: src" + n + ", type: sim.source}\n";
      case 1: return "  - {id: a" + n + ", type: test.join, inputs: {a: src" + n + "/out, b: b" + n + "/out}}\n";
      default: return "  - {id: b" + n + ", type: sim.work, inputs: {in: a" + n + "/out}}\n";
    }
  }));
  EXPECT_FALSE(spec.has_value());
  ASSERT_EQ(diagnostics_.size(), 25'000U);
  EXPECT_TRUE(contains(diagnostics_.front().message, "cycle a0 -> b0 -> a0")) << diagnostics_.front().to_string();
  EXPECT_TRUE(contains(diagnostics_.back().message, "cycle a24999 -> b24999 -> a24999"))
      << diagnostics_.back().to_string();
}

TEST_F(LoaderTest, UnitsOverTheLimit) {
  auto d = only_error(R"(pipeline: t
units: 4096
stages:
  - {id: source, type: sim.source}
)");
  EXPECT_AT(d, 2, 8);
  EXPECT_EQ(d.message, "units: 4096 is over the limit of 256 units per pipeline");
  EXPECT_FALSE(d.hint.empty());
}

TEST_F(LoaderTest, UnitListOverTheLimit) {
  std::string yaml = "pipeline: t\nunits:\n";
  for (int i = 0; i < 257; ++i) yaml += "  - {id: u" + std::to_string(i) + "}\n";
  yaml += "stages:\n  - {id: source, type: sim.source}\n";
  auto d = only_error(yaml);
  EXPECT_AT(d, 3, 3);
  EXPECT_EQ(d.message, "units: a list of 257 is over the limit of 256 units per pipeline");
}

TEST_F(LoaderTest, ReplicasOverTheLimit) {
  load(R"(pipeline: t
stages:
  - {id: source, type: sim.source, replicas: 5000}
  - {id: sink, type: sim.sink, replicas: {min: 1, max: 1025}, inputs: {in: source/out}}
)");
  ASSERT_EQ(diagnostics_.size(), 2U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 3, 46);
  EXPECT_EQ(diagnostics_[0].message,
            "replicas: 5000 of stage 'source' is over the limit of 1024 replicas per stage");
  EXPECT_AT(diagnostics_[1], 4, 56);
  EXPECT_EQ(diagnostics_[1].message,
            "max replicas: 1025 of stage 'sink' is over the limit of 1024 replicas per stage");
}

TEST_F(LoaderTest, TotalReplicasOverTheLimit) {
  // 97 stages of 1024 replicas are 99,328; the 98th passes 100,000.
  auto d = only_error(generated(98, [](std::size_t i) {
    return "  - {id: s" + std::to_string(i) + ", type: sim.source, replicas: 1024}\n";
  }));
  EXPECT_AT(d, 100, 5);
  EXPECT_EQ(d.message, "replicas: 100352 in all stages is over the limit of 100000 replicas per pipeline");
  EXPECT_TRUE(contains(d.hint, "stage 's97'")) << d.to_string();
}

TEST_F(LoaderTest, StagesOverTheLimit) {
  auto d = only_error(generated(100'001, [](std::size_t i) {
    return "  - {id: s" + std::to_string(i) + ", type: sim.source}\n";
  }));
  EXPECT_AT(d, 2, 1);
  EXPECT_EQ(d.message, "stages: a list of 100001 is over the limit of 100000 stages per pipeline");
}

TEST_F(LoaderTest, EdgesOverTheLimit) {
  // 1000 sources, then 401 sinks that each take all of them: 401,000 edges.
  std::string all;
  for (int p = 0; p < 1000; ++p) all += (p == 0 ? "p" : ", p") + std::to_string(p) + "/out";
  auto d = only_error(generated(1401, [&all](std::size_t i) {
    if (i < 1000) return "  - {id: p" + std::to_string(i) + ", type: sim.source}\n";
    return "  - {id: k" + std::to_string(i - 1000) + ", type: test.any_sink, inputs: {in: [" + all + "]}}\n";
  }));
  // The 400,001st edge is the first producer of sink k400, on line 1403.
  const std::string k400 = "  - {id: k400, type: test.any_sink, inputs: {in: [";
  EXPECT_AT(d, 1403, static_cast<int>(k400.size()) + 1);
  EXPECT_EQ(d.message, "edges: 401000 producers named in all inputs is over the limit of 400000 edges per pipeline");
}

TEST_F(LoaderTest, DefinitionOverTheSizeLimitIsRefusedBeforeParsing) {
  constexpr std::size_t kLimit = 64u << 20;
  auto d = only_error(std::string(kLimit + 1, '\n'));
  EXPECT_AT(d, 1, 1);
  EXPECT_EQ(d.message, "file: 67108865 bytes is over the limit of 67108864 bytes per definition");
  // A file is refused by its size, unread (this one is sparse).
  const auto path = std::filesystem::temp_directory_path() / ("swarmflow_loader_" + std::to_string(::getpid()));
  std::ofstream(path).put('#');
  std::filesystem::resize_file(path, 1ull << 30);
  diagnostics_.clear();
  EXPECT_FALSE(config::load_pipeline_file(path.string(), registry_, diagnostics_).has_value());
  std::filesystem::remove(path);
  ASSERT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
  EXPECT_EQ(diagnostics_[0].file, path.string());
  EXPECT_EQ(diagnostics_[0].message, "file: 1073741824 bytes is over the limit of 67108864 bytes per definition");
}

TEST_F(LoaderTest, ProducerListedTwiceOnOneInput) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: a, type: sim.source}
  - {id: b, type: sim.source}
  - id: sink
    type: sim.sink
    inputs: {in: [a/out, b/out, a/out]}
)");
  EXPECT_AT(d, 7, 33);
  EXPECT_EQ(d.message, "input 'in' of stage 'sink' lists producer 'a/out' twice");
  EXPECT_TRUE(contains(d.hint, "line 7, column 19")) << d.to_string();
}

TEST_F(LoaderTest, AStageThatNeedsItsInputsJoinedIsRefusedWithoutJoin) {
  auto d = only_error(R"(pipeline: t
stages:
  - {id: a, type: sim.source}
  - {id: b, type: sim.source}
  - id: draw
    type: test.needs_join
    inputs: {a: a/out, b: b/out}
)");
  EXPECT_AT(d, 7, 5);
  EXPECT_TRUE(contains(d.message, "stage 'draw' needs its inputs together in one step")) << d.to_string();
  EXPECT_TRUE(contains(d.hint, "add `join: {key: seq}`")) << d.to_string();
  auto joined = load(R"(pipeline: t
stages:
  - {id: a, type: sim.source}
  - {id: b, type: sim.source}
  - {id: draw, type: test.needs_join, inputs: {a: a/out, b: b/out}, join: {key: seq}}
)");
  EXPECT_TRUE(joined.has_value()) << format_diagnostics(diagnostics_);
}

TEST_F(LoaderTest, OneProducerMayFeedTwoInputsOfAStage) {
  auto spec = load(R"(pipeline: t
stages:
  - {id: a, type: sim.source}
  - {id: j, type: test.join, join: {key: seq}, inputs: {a: a/out, b: a/out}}
)");
  ASSERT_TRUE(spec.has_value()) << format_diagnostics(diagnostics_);
  EXPECT_EQ(spec->stages[1].inputs.size(), 2U);
}

// -- all at once ---

TEST_F(LoaderTest, ReportsEveryMistakeInFileOrder) {
  load(R"(pipeline: t
stages:
  - id: work
    type: sim.work
    inputs: {in: nowhere/out}
    params: {service_us: -5}
  - id: sink
    type: sim.snk
    inputs: {in: work/out}
)");
  ASSERT_EQ(diagnostics_.size(), 3U) << format_diagnostics(diagnostics_);
  EXPECT_AT(diagnostics_[0], 5, 18);
  EXPECT_TRUE(contains(diagnostics_[0].message, "unknown stage 'nowhere'"));
  EXPECT_AT(diagnostics_[1], 6, 26);
  EXPECT_TRUE(contains(diagnostics_[1].message, "'service_us' = -5 is out of range"));
  EXPECT_AT(diagnostics_[2], 8, 11);
  EXPECT_TRUE(contains(diagnostics_[2].message, "unknown stage type 'sim.snk'"));
  for (const auto& d : diagnostics_) {
    EXPECT_EQ(d.file, "test.yaml");
    EXPECT_FALSE(d.hint.empty()) << d.to_string();
  }
}

}  // namespace
}  // namespace swarmflow

namespace swarmflow::config {
namespace {

TEST(LoaderSecurity, TcpEndpointsNeedKeys) {
  Registry registry;
  register_sim_stages(registry);
  std::vector<Diagnostic> diags;
  auto spec = load_pipeline_string(R"(pipeline: keys
coordinator: tcp://127.0.0.1:7000
units:
  - {id: a, endpoint: "tcp://127.0.0.1:7001"}
  - {id: b, endpoint: "ipc:///tmp/b"}
stages:
  - {id: s, type: sim.source}
)",
                                   "keys.yaml", registry, diags);
  EXPECT_FALSE(spec.has_value());
  ASSERT_EQ(diags.size(), 2U) << format_diagnostics(diags);
  EXPECT_EQ(diags[0].line, 2);  // the coordinator
  EXPECT_NE(diags[0].message.find("coordinator_key"), std::string::npos);
  EXPECT_EQ(diags[1].line, 4);  // unit a; the ipc unit b needs no key
  EXPECT_NE(diags[1].message.find("public_key"), std::string::npos);
}

}  // namespace
}  // namespace swarmflow::config
