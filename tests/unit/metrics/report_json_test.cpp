#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <swarmflow/report.hpp>

namespace swarmflow {
namespace {

RunReport sample_report() {
  RunReport r;
  r.pipeline = "demo";
  r.ok = true;
  r.finished = true;
  r.duration_s = 1.5;

  StageReport src;
  src.id = "src";
  src.type = "sim.source";
  src.replicas = 2;
  src.processed = 1000;
  src.counters = {{"emitted", 1000}};
  r.stages.push_back(src);

  StageReport work;
  work.id = "work";
  work.type = "sim.work";
  work.replicas = 3;
  work.processed = 990;
  work.errors = 4;
  work.restarts = 2;
  work.dead_letters = 1;
  r.stages.push_back(work);

  StageReport sink;
  sink.id = "sink";
  sink.type = "sim.sink";
  sink.replicas = 1;
  sink.sink = true;
  sink.processed = 985;
  sink.counters = {{"received", 980}, {"lost", 15}, {"duplicate", 2}, {"reordered", 3}, {"extra", -7}};
  sink.latency = LatencySummary{980, 1.25, 4.5, 7.75, 9.0};
  r.stages.push_back(sink);

  StageReport dump;
  dump.id = "dump";
  dump.type = "io.jsonl";
  dump.replicas = 1;
  dump.sink = true;
  dump.processed = 42;
  r.stages.push_back(dump);

  auto edge = [](const char* from, const char* to, std::uint64_t sent, std::uint64_t delivered,
                 std::uint64_t dropped) {
    EdgeReport e;
    e.from = from;
    e.to = to;
    e.sent = sent;
    e.delivered = delivered;
    e.dropped = dropped;
    e.overflow = "block";
    return e;
  };
  r.edges.push_back(edge("src/out", "work/in", 1000, 995, 5));
  r.edges.push_back(edge("work/out", "sink/in", 990, 990, 0));
  return r;
}

TEST(ReportJson, TopLevelFields) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  EXPECT_EQ(j.at("pipeline"), "demo");
  EXPECT_EQ(j.at("ok"), true);
  EXPECT_EQ(j.at("finished"), true);
  EXPECT_DOUBLE_EQ(j.at("duration_s").get<double>(), 1.5);
  EXPECT_FALSE(j.contains("error"));
  EXPECT_TRUE(j.at("stages").is_object());
  EXPECT_TRUE(j.at("edges").is_array());
  EXPECT_TRUE(j.at("sinks").is_object());
}

TEST(ReportJson, ErrorAppearsOnlyWhenSet) {
  RunReport r = sample_report();
  r.ok = false;
  r.error = "stage work: \"boom\"";
  const auto j = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(j.at("ok"), false);
  EXPECT_EQ(j.at("error"), "stage work: \"boom\"");
}

TEST(ReportJson, StagesByIdWithCounters) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  const auto& stages = j.at("stages");
  ASSERT_EQ(stages.size(), 4U);
  const auto& work = stages.at("work");
  EXPECT_EQ(work.at("type"), "sim.work");
  EXPECT_EQ(work.at("replicas"), 3);
  EXPECT_EQ(work.at("processed"), 990);
  EXPECT_EQ(work.at("errors"), 4);
  EXPECT_EQ(work.at("restarts"), 2);
  EXPECT_EQ(work.at("dead_letters"), 1);
  EXPECT_TRUE(work.at("counters").is_object());
  EXPECT_TRUE(work.at("counters").empty());
  EXPECT_EQ(stages.at("src").at("counters").at("emitted"), 1000);
  EXPECT_EQ(stages.at("sink").at("counters").at("extra"), -7);
}

TEST(ReportJson, EdgesInOrder) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  const auto& edges = j.at("edges");
  ASSERT_EQ(edges.size(), 2U);
  EXPECT_EQ(edges[0].at("from"), "src/out");
  EXPECT_EQ(edges[0].at("to"), "work/in");
  EXPECT_EQ(edges[0].at("sent"), 1000);
  EXPECT_EQ(edges[0].at("delivered"), 995);
  EXPECT_EQ(edges[0].at("dropped"), 5);
  EXPECT_EQ(edges[1].at("from"), "work/out");
}

TEST(ReportJson, SinksListEveryStageMarkedSink) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  const auto& sinks = j.at("sinks");
  ASSERT_EQ(sinks.size(), 2U);
  EXPECT_FALSE(sinks.contains("src"));
  EXPECT_FALSE(sinks.contains("work"));

  const auto& sink = sinks.at("sink");
  EXPECT_EQ(sink.at("received"), 980);
  EXPECT_EQ(sink.at("lost"), 15);
  EXPECT_EQ(sink.at("duplicate"), 2);
  EXPECT_EQ(sink.at("reordered"), 3);
  EXPECT_DOUBLE_EQ(sink.at("latency_ms").at("p50").get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(sink.at("latency_ms").at("p99").get<double>(), 4.5);
  EXPECT_DOUBLE_EQ(sink.at("latency_ms").at("p999").get<double>(), 7.75);
  EXPECT_DOUBLE_EQ(sink.at("latency_ms").at("max").get<double>(), 9.0);
  EXPECT_EQ(sink.at("counters").at("received"), 980);
}

TEST(ReportJson, SinkWithoutCountersFallsBackToProcessed) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  const auto& dump = j.at("sinks").at("dump");
  EXPECT_EQ(dump.at("received"), 42);
  EXPECT_EQ(dump.at("lost"), 0);
  EXPECT_EQ(dump.at("duplicate"), 0);
  EXPECT_EQ(dump.at("reordered"), 0);
  EXPECT_DOUBLE_EQ(dump.at("latency_ms").at("p50").get<double>(), 0.0);
}

TEST(ReportJson, EmptyReportIsValid) {
  const auto j = nlohmann::json::parse(RunReport{}.to_json());
  EXPECT_EQ(j.at("pipeline"), "");
  EXPECT_EQ(j.at("finished"), false);
  EXPECT_TRUE(j.at("stages").empty());
  EXPECT_TRUE(j.at("edges").empty());
  EXPECT_TRUE(j.at("sinks").empty());
}

TEST(ReportJson, CoordinatorCountsRefusedHandshakes) {
  RunReport r = sample_report();
  EXPECT_EQ(nlohmann::json::parse(r.to_json()).at("coordinator").at("refused_handshakes"), 0);
  r.coordinator.refused_handshakes = 7;
  EXPECT_EQ(nlohmann::json::parse(r.to_json()).at("coordinator").at("refused_handshakes"), 7);
}

TEST(ReportJson, InvalidUtf8DoesNotBreakTheReport) {
  RunReport r = sample_report();
  r.error = "bad byte \xff here";
  const auto j = nlohmann::json::parse(r.to_json());
  EXPECT_TRUE(j.at("error").is_string());
}

TEST(Report, StageAndEdgeLookup) {
  const RunReport r = sample_report();
  ASSERT_NE(r.stage("work"), nullptr);
  EXPECT_EQ(r.stage("work")->type, "sim.work");
  EXPECT_EQ(r.stage("nope"), nullptr);
  ASSERT_NE(r.edge("src/out", "work/in"), nullptr);
  EXPECT_EQ(r.edge("src/out", "work/in")->dropped, 5U);
  EXPECT_EQ(r.edge("work/in", "src/out"), nullptr);
}

}  // namespace
}  // namespace swarmflow
