// The JSON Schema subset validator of tests/support, and the run report's
// schema (docs/report.schema.json) against a report with every field set.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <swarmflow/report.hpp>

#include "support/json_schema.hpp"

namespace {

using nlohmann::json;
using swarmflow::testing::schema_problems;
using swarmflow::testing::undescribed_fields;

json load_report_schema() {
  std::ifstream in(std::string(SWARMFLOW_SOURCE_DIR) + "/docs/report.schema.json");
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

TEST(JsonSchema, ChecksTypes) {
  const json schema = {{"type", "integer"}};
  EXPECT_TRUE(schema_problems(schema, 3).empty());
  EXPECT_TRUE(schema_problems(schema, 3.0).empty()) << "a whole number is an integer";
  EXPECT_EQ(schema_problems(schema, 3.5).size(), 1U);
  EXPECT_EQ(schema_problems(schema, "3").size(), 1U);
  EXPECT_TRUE(schema_problems({{"type", "number"}}, 3).empty());
  EXPECT_TRUE(schema_problems({{"type", json::array({"string", "null"})}}, nullptr).empty());
  EXPECT_EQ(schema_problems({{"type", "boolean"}}, 0).size(), 1U);
}

TEST(JsonSchema, ChecksRequiredPropertiesAndAdditionalProperties) {
  const json schema = {{"type", "object"},
                       {"required", {"a"}},
                       {"properties", {{"a", {{"type", "string"}}}}},
                       {"additionalProperties", false}};
  EXPECT_TRUE(schema_problems(schema, {{"a", "x"}}).empty());
  const auto missing = schema_problems(schema, json::object());
  ASSERT_EQ(missing.size(), 1U);
  EXPECT_NE(missing[0].find("'a'"), std::string::npos) << missing[0];
  const auto extra = schema_problems(schema, {{"a", "x"}, {"b", 1}});
  ASSERT_EQ(extra.size(), 1U);
  EXPECT_NE(extra[0].find("$.b"), std::string::npos) << extra[0];
  const auto wrong = schema_problems(schema, {{"a", 1}});
  ASSERT_EQ(wrong.size(), 1U);
  EXPECT_NE(wrong[0].find("$.a"), std::string::npos) << wrong[0];
  const json map = {{"type", "object"}, {"additionalProperties", {{"type", "integer"}}}};
  EXPECT_TRUE(schema_problems(map, {{"x", 1}, {"y", 2}}).empty());
  EXPECT_EQ(schema_problems(map, {{"x", 1}, {"y", "2"}}).size(), 1U);
}

TEST(JsonSchema, ChecksItemsEnumAndBounds) {
  const json schema = {{"type", "array"},
                       {"items", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}}};
  EXPECT_TRUE(schema_problems(schema, {0, 5, 9}).empty());
  const auto bad = schema_problems(schema, {1, -1, 10});
  ASSERT_EQ(bad.size(), 2U);
  EXPECT_NE(bad[0].find("$[1]"), std::string::npos) << bad[0];
  EXPECT_NE(bad[1].find("$[2]"), std::string::npos) << bad[1];
  const json choice = {{"enum", {"block", "drop_oldest"}}};
  EXPECT_TRUE(schema_problems(choice, "block").empty());
  EXPECT_EQ(schema_problems(choice, "drop").size(), 1U);
}

TEST(JsonSchema, RefusesKeywordsItDoesNotCheck) {
  const auto problems = schema_problems({{"type", "string"}, {"pattern", "^a"}}, "b");
  ASSERT_EQ(problems.size(), 1U);
  EXPECT_NE(problems[0].find("'pattern'"), std::string::npos) << problems[0];
}

TEST(JsonSchema, FindsFieldsWithoutDescription) {
  const json schema = {{"description", "top"},
                       {"properties", {{"a", {{"type", "string"}}}, {"b", {{"description", "b"}}}}}};
  EXPECT_EQ(undescribed_fields(schema), std::vector<std::string>{"$.a"});
}

/// A report with every field the writer knows set, including the optional ones.
swarmflow::RunReport full_report() {
  swarmflow::RunReport r;
  r.pipeline = "full";
  r.ok = false;
  r.finished = true;
  r.duration_s = 1.5;
  r.error = "a stage failed";
  swarmflow::StageReport source;
  source.id = "source";
  source.type = "sim.source";
  source.replicas = 1;
  source.processed = 10;
  swarmflow::StageReport sink;
  sink.id = "sink";
  sink.type = "sim.sink";
  sink.replicas = 2;
  sink.sink = true;
  sink.processed = 9;
  sink.errors = 1;
  sink.restarts = 1;
  sink.dead_letters = 1;
  sink.counters = {{"received", 9}, {"lost", 1}, {"duplicate", 0}, {"reordered", 3}};
  sink.latency = {9, 1.0, 2.0, 3.0, 4.0};
  r.stages = {source, sink};
  swarmflow::EdgeReport e;
  e.from = "source/out";
  e.to = "sink/in";
  e.sent = 10;
  e.delivered = 9;
  e.dropped = 1;
  e.too_large = 0;
  e.refused = 1;
  e.peak_in_flight = 4;
  e.peak_retained = 6;
  e.overflow = "drop_oldest";
  r.edges = {e};
  swarmflow::UnitReport u;
  u.id = "u0";
  u.replicas = 3;
  u.sent = 5;
  u.received = 4;
  u.rejected = 1;
  u.unknown_peer = 1;
  u.send_failed = 2;
  u.refused_handshakes = 1;
  u.load_reports = 7;
  u.utilisation = 0.25;
  u.rejected_by_reason = {{"payload_invalid", 1}};
  r.units = {u};
  r.coordinator.refused_handshakes = 2;
  return r;
}

TEST(ReportSchema, EveryFieldIsDescribed) {
  EXPECT_EQ(undescribed_fields(load_report_schema()), std::vector<std::string>{});
}

TEST(ReportSchema, AReportWithEveryFieldConforms) {
  const json report = json::parse(full_report().to_json());
  const auto problems = schema_problems(load_report_schema(), report);
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems) << "\n" << report.dump(2);
}

TEST(ReportSchema, EveryFieldTheWriterEmitsIsInTheSchema) {
  // The schema allows unknown fields (reports may grow); this keeps it complete.
  const json schema = load_report_schema();
  const json report = json::parse(full_report().to_json());
  std::vector<std::string> unknown;
  auto check = [&](const json& props, const json& value, const std::string& where) {
    for (const auto& [name, unused] : value.items()) {
      if (!props.contains(name)) unknown.push_back(where + "." + name);
    }
  };
  check(schema["properties"], report, "$");
  check(schema["properties"]["stages"]["additionalProperties"]["properties"], report["stages"]["sink"], "stage");
  check(schema["properties"]["edges"]["items"]["properties"], report["edges"][0], "edge");
  check(schema["properties"]["sinks"]["additionalProperties"]["properties"], report["sinks"]["sink"], "sink");
  check(schema["properties"]["units"]["additionalProperties"]["properties"], report["units"]["u0"], "unit");
  check(schema["properties"]["coordinator"]["properties"], report["coordinator"], "coordinator");
  EXPECT_EQ(unknown, std::vector<std::string>{});
}

TEST(ReportSchema, AReportLackingACoreFieldDoesNot) {
  json report = json::parse(full_report().to_json());
  report["edges"][0].erase("delivered");
  report["sinks"]["sink"]["latency_ms"]["p99"] = "slow";
  EXPECT_EQ(schema_problems(load_report_schema(), report).size(), 2U);
}

}  // namespace
