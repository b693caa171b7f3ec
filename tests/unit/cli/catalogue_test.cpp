// The catalogue `swarmflow describe` prints: every stage's generated example
// is a valid pipeline entry, and the JSON document keeps its shape.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include <swarmflow/swarmflow.hpp>

#include "cli/catalogue.hpp"
#include "config/pipeline_spec.hpp"
#include "support/media_packs.hpp"

namespace {

using swarmflow::cli::CatalogueEntry;

/// The payload type a stub producer declares; set just before its `setup`.
std::string& stub_payload_type() {
  static std::string type;
  return type;
}

struct StubPayload {
  static const char* GetFullyQualifiedName() { return stub_payload_type().c_str(); }
};

/// A source of one payload type, standing in for an example's `producer`.
class StubProducer : public swarmflow::Stage {
 public:
  explicit StubProducer(std::string type) : type_(std::move(type)) {}
  void setup(swarmflow::StageSpec& spec) override {
    stub_payload_type() = type_;
    spec.output<StubPayload>("out", "stub output");
  }
  swarmflow::Status process(swarmflow::Inputs&, swarmflow::Outputs&, swarmflow::StageContext&) override {
    return swarmflow::Status::end_of_stream();
  }

 private:
  std::string type_;
};

/// The example of `entry` under `stages:`, after one stub producer per
/// input it connects, each of that input's payload type.
std::string completed_example(swarmflow::Registry& registry, const CatalogueEntry& entry) {
  std::string stages;
  for (const auto& input : entry.spec.inputs()) {
    if (input.optional) continue;
    const std::string payload = input.type == "*" ? "swarmflow.schema.Blob" : input.type;
    const std::string stub = "stub.produce_" + payload;
    if (registry.find(stub) == nullptr) {
      EXPECT_TRUE(registry.add(stub, "stub", [payload] { return std::make_unique<StubProducer>(payload); }).ok());
    }
    stages += "  - {id: " + swarmflow::cli::example_producer(entry.spec, input) + ", type: " + stub + "}\n";
  }
  return "pipeline: example\nstages:\n" + stages + swarmflow::cli::example_yaml(entry);
}

TEST(Catalogue, EveryStagesExampleValidatesWithTheLoader) {
  swarmflow::Runtime rt;
  swarmflow::testing::register_media_packs(rt.registry());
  std::string error;
  const auto entries = swarmflow::cli::select_stages(rt.registry(), "", &error);
  ASSERT_FALSE(entries.empty()) << error;
  auto expect_valid = [&](const std::string& yaml, const std::string& name) {
    std::vector<swarmflow::Diagnostic> diagnostics;
    const auto spec = swarmflow::config::load_pipeline_string(yaml, name, rt.registry(), diagnostics);
    EXPECT_TRUE(spec.has_value()) << name << ":\n" << swarmflow::format_diagnostics(diagnostics) << "in\n" << yaml;
  };
  for (const auto& entry : entries) {
    const std::string yaml = completed_example(rt.registry(), entry);
    expect_valid(yaml, entry.type->name);
    // The `join:` the example suggests, commented out, is valid too.
    const std::string commented_join = std::string("    # ") + swarmflow::cli::kExampleJoin;
    if (const auto at = yaml.find(commented_join); at != std::string::npos) {
      std::string joined = yaml;
      joined.replace(at, commented_join.size(), std::string("    ") + swarmflow::cli::kExampleJoin);
      expect_valid(joined, entry.type->name + " with join");
    }
  }
}

TEST(Catalogue, SelectsAStageAPackOrEverything) {
  swarmflow::Runtime rt;
  swarmflow::testing::register_media_packs(rt.registry());
  std::string error;
  const auto all = swarmflow::cli::select_stages(rt.registry(), "", &error);
  const auto one = swarmflow::cli::select_stages(rt.registry(), "sim.work", &error);
  ASSERT_EQ(one.size(), 1U);
  EXPECT_EQ(one[0].type->name, "sim.work");
  const auto vision = swarmflow::cli::select_stages(rt.registry(), "vision", &error);
  ASSERT_FALSE(vision.empty());
  std::size_t in_pack = 0;
  for (const auto& e : all) in_pack += swarmflow::cli::pack_of(e.type->name) == "vision" ? 1 : 0;
  EXPECT_EQ(vision.size(), in_pack);
  for (const auto& e : vision) EXPECT_EQ(e.type->name.rfind("vision.", 0), 0U) << e.type->name;
  EXPECT_TRUE(swarmflow::cli::select_stages(rt.registry(), "sim.wrk", &error).empty());
  EXPECT_NE(error.find("sim.work"), std::string::npos) << error;
}

TEST(Catalogue, JsonDocumentHasEveryFieldOfEveryStage) {
  swarmflow::Runtime rt;
  swarmflow::testing::register_media_packs(rt.registry());
  std::string error;
  const auto entries = swarmflow::cli::select_stages(rt.registry(), "", &error);
  const auto doc = nlohmann::json::parse(swarmflow::cli::describe_json(entries));
  ASSERT_TRUE(doc["stages"].is_array());
  ASSERT_EQ(doc["stages"].size(), entries.size());
  bool some_optional = false;
  for (const auto& s : doc["stages"]) {
    for (const char* key : {"type", "pack", "description", "inputs", "outputs", "parameters", "example"}) {
      EXPECT_TRUE(s.contains(key)) << s["type"] << " lacks " << key;
    }
    EXPECT_EQ(s["pack"], swarmflow::cli::pack_of(s["type"].get<std::string>()));
    for (const auto& p : s["inputs"]) {
      for (const char* key : {"name", "type", "description", "optional"}) EXPECT_TRUE(p.contains(key)) << key;
      some_optional = some_optional || p["optional"].get<bool>();
    }
    for (const auto& p : s["parameters"]) {
      for (const char* key : {"name", "type", "description", "default", "range", "choices"}) {
        EXPECT_TRUE(p.contains(key)) << s["type"] << "." << p["name"] << " lacks " << key;
      }
    }
  }
  EXPECT_TRUE(some_optional) << "some built-in stage has an optional input";
}

TEST(Catalogue, TextMarksOptionalInputsAndEndsWithTheExample) {
  swarmflow::Runtime rt;
  swarmflow::testing::register_media_packs(rt.registry());
  std::string error;
  for (const auto& entry : swarmflow::cli::select_stages(rt.registry(), "", &error)) {
    const std::string text = swarmflow::cli::describe_text(entry);
    const std::string example = swarmflow::cli::example_yaml(entry);
    ASSERT_GE(text.size(), example.size());
    EXPECT_EQ(text.substr(text.size() - example.size()), example) << entry.type->name;
    for (const auto& input : entry.spec.inputs()) {
      if (!input.optional) continue;
      EXPECT_NE(text.find("(optional) " + input.description), std::string::npos) << text;
    }
  }
}

}  // namespace
